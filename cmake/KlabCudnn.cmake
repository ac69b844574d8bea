# klab_lesson_cudnn(<id> [FRONTEND <source.cu>...])
#
# The cuDNN baselines of lesson <id>. cuDNN 9 ships with some CUDA toolkits and, on the GPU
# machine, inside PyTorch's Python environment (no unversioned libcudnn.so there, hence the
# .so.9 name). Found, the lesson's target gets KLAB_HAVE_CUDNN=1, cudnn.h and the library.
#
# FRONTEND names the sources that use the cuDNN frontend's graph API, whose headers come from
# the PyPI package nvidia-cudnn-frontend (tools/setup.sh installs it into .venv; on the GPU
# machine it may sit in KLAB_PYTHON's environment instead; they land in
# site-packages/include). Found with cuDNN, those sources get KLAB_HAVE_CUDNN_FRONTEND=1 and
# the frontend's headers, and the target links NVRTC's library file: the frontend compiles
# some engines at run time. Not the CUDA::nvrtc target, which brings libcuda with it: klab
# resolves the driver at run time (klab/src/cuda_driver_shim.cpp) so that it starts on a
# machine without one.
#
# Without them the `cudnn` impls are still registered and their supports() says why they
# cannot run; the configure step says which was missing.
function(klab_lesson_cudnn id)
  cmake_parse_arguments(C "" "" "FRONTEND" ${ARGN})
  set(lib klab_lesson_${id})
  set(hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR}
      /opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn)
  find_path(KLAB_CUDNN_INCLUDE_DIR cudnn_ops.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${hints} PATH_SUFFIXES include)
  find_library(KLAB_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} ${hints}
               PATH_SUFFIXES lib64 lib)
  if(NOT (KLAB_CUDNN_INCLUDE_DIR AND KLAB_CUDNN_LIBRARY))
    message(STATUS "lesson ${id}: cuDNN not found; the cudnn impls will report themselves unsupported")
    return()
  endif()
  target_compile_definitions(${lib} PRIVATE KLAB_HAVE_CUDNN=1)
  target_include_directories(${lib} PRIVATE ${KLAB_CUDNN_INCLUDE_DIR})
  target_link_libraries(${lib} PUBLIC ${KLAB_CUDNN_LIBRARY})
  if(NOT C_FRONTEND)
    message(STATUS "lesson ${id}: cuDNN baseline on (${KLAB_CUDNN_LIBRARY})")
    return()
  endif()
  file(GLOB fe_hints ${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/include)
  if(KLAB_PYTHON)
    execute_process(COMMAND ${KLAB_PYTHON} -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"
                    OUTPUT_VARIABLE purelib OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(purelib)
      list(APPEND fe_hints ${purelib}/include)
    endif()
  endif()
  find_path(KLAB_CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h HINTS ${fe_hints} NO_DEFAULT_PATH)
  if(NOT KLAB_CUDNN_FRONTEND_INCLUDE_DIR)
    message(STATUS "lesson ${id}: the cuDNN frontend's headers not found; the cudnn impls will report themselves unsupported")
    return()
  endif()
  message(STATUS "lesson ${id}: cuDNN frontend baseline on (${KLAB_CUDNN_FRONTEND_INCLUDE_DIR})")
  set_source_files_properties(${C_FRONTEND} PROPERTIES COMPILE_DEFINITIONS KLAB_HAVE_CUDNN_FRONTEND=1)
  target_include_directories(${lib} PRIVATE ${KLAB_CUDNN_FRONTEND_INCLUDE_DIR})
  target_link_libraries(${lib} PUBLIC $<TARGET_FILE:CUDA::nvrtc>)
endfunction()

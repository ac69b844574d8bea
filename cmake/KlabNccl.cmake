# klab_lesson_nccl(<id>)
#
# The NCCL baseline of lesson <id> (16, multi-GPU). NCCL ships with some CUDA toolkits (13.0
# here) and, on the GPU machine, inside PyTorch's Python environment (nvidia/nccl, no
# unversioned libnccl.so there, hence the .so.2 name). Found, the lesson's target gets
# KLAB_HAVE_NCCL=1, nccl.h and the library; without it the `nccl` impl is still registered
# and its supports() says why it cannot run.
function(klab_lesson_nccl id)
  set(lib klab_lesson_${id})
  set(hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR}
      /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl)
  find_path(KLAB_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${hints} PATH_SUFFIXES include)
  # NAMES_PER_DIR: the first folder with either name wins, so header and library come from
  # the same NCCL where the toolkit has none (the GPU machine also has an older system one).
  find_library(KLAB_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${CUDAToolkit_LIBRARY_DIR} ${hints}
               PATH_SUFFIXES lib64 lib)
  if(NOT (KLAB_NCCL_INCLUDE_DIR AND KLAB_NCCL_LIBRARY))
    message(STATUS "lesson ${id}: NCCL not found; the nccl impl will report itself unsupported")
    return()
  endif()
  target_compile_definitions(${lib} PRIVATE KLAB_HAVE_NCCL=1)
  target_include_directories(${lib} PRIVATE ${KLAB_NCCL_INCLUDE_DIR})
  target_link_libraries(${lib} PUBLIC ${KLAB_NCCL_LIBRARY})
  message(STATUS "lesson ${id}: NCCL baseline on (${KLAB_NCCL_LIBRARY})")
endfunction()

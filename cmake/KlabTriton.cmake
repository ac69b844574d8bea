# The Triton track: each *_triton.py is compiled ahead of time (tools/triton_aot.py) into
# one C file of launchers plus a header, built into the lesson. On when KLAB_PYTHON imports
# triton 3.6.0; otherwise the build goes on without the Triton impls and records why
# (`klab doctor` prints it, the impls report it as their unsupported reason).
set(KLAB_TRITON_VERSION "3.6.0")
set(KLAB_PYTHON "" CACHE STRING "Python that has triton==${KLAB_TRITON_VERSION} (default: .venv, then python3)")
if(NOT KLAB_PYTHON)
  if(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
    set(KLAB_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python)
  else()
    find_program(KLAB_PYTHON_FOUND NAMES python3 python)
    set(KLAB_PYTHON "${KLAB_PYTHON_FOUND}")
  endif()
endif()

set(KLAB_HAVE_TRITON OFF)
if(NOT KLAB_PYTHON)
  set(KLAB_TRITON_NOTE "no Python interpreter found (run `make setup`, or pass -DKLAB_PYTHON=...)")
else()
  execute_process(
    COMMAND ${KLAB_PYTHON} -c "import triton, sys; v = triton.__version__; sys.exit(0 if v == '${KLAB_TRITON_VERSION}' else 'triton ' + v + ' found, ${KLAB_TRITON_VERSION} required')"
    RESULT_VARIABLE _klab_tr ERROR_VARIABLE _klab_tr_err OUTPUT_QUIET)
  if(_klab_tr EQUAL 0)
    set(KLAB_HAVE_TRITON ON)
    set(KLAB_TRITON_NOTE "")
    message(STATUS "klab: Triton ${KLAB_TRITON_VERSION} found (${KLAB_PYTHON}); Triton kernels are compiled ahead of time")
  else()
    string(STRIP "${_klab_tr_err}" _klab_tr_err)
    string(REGEX REPLACE ".*\n" "" _klab_tr_err "${_klab_tr_err}")   # last line of the traceback
    string(REPLACE "\"" "'" _klab_tr_err "${_klab_tr_err}")
    set(KLAB_TRITON_NOTE "${KLAB_PYTHON} cannot import triton==${KLAB_TRITON_VERSION}: ${_klab_tr_err} (run `make setup`)")
    message(WARNING "klab: building without the Triton impls: ${KLAB_TRITON_NOTE}")
  endif()
endif()

# klab_triton_aot(<object library> <path/NAME_triton.py> [<output dir>])
# (The output dir, default <binary dir>/triton, keeps apart files of the same name: a Triton
# exercise's stub, solution and TODO variants.)
function(klab_triton_aot target py)
  if(NOT KLAB_HAVE_TRITON)
    return()
  endif()
  get_filename_component(stem ${py} NAME_WE)
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/triton)
  if(ARGC GREATER 2)
    set(dir ${ARGV2})
  endif()
  # Shared @triton.jit helpers come from klab/triton/klab_tl.py (on the AOT tool's import path).
  add_custom_command(
    OUTPUT ${dir}/${stem}.c ${dir}/${stem}.h
    COMMAND ${KLAB_PYTHON} ${CMAKE_SOURCE_DIR}/tools/triton_aot.py ${py} --out-dir ${dir}
    DEPENDS ${py} ${CMAKE_SOURCE_DIR}/tools/triton_aot.py ${CMAKE_SOURCE_DIR}/klab/triton/klab_tl.py
    COMMENT "Triton AOT: ${stem}.py -> ${stem}.c"
    VERBATIM)
  target_sources(${target} PRIVATE ${dir}/${stem}.c)
  target_include_directories(${target} PRIVATE ${dir})
  target_compile_definitions(${target} PRIVATE KLAB_HAVE_TRITON=1)
endfunction()

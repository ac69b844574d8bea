# klab_add_lesson(<id> SOURCES <.cu...> [TRITON <_triton.py...>] [EXERCISE <exercise.cu>])
#
# Builds the lesson's kernels as an object library linked into `klab`. The exercise file
# goes into `klab`; the completed exercise from solutions/<lesson folder>/ goes into
# `klab-solutions` instead, so the tests can prove the stub fails and the solution passes
# without handing the solution to the learner in the exercise file.
function(klab_add_lesson id)
  cmake_parse_arguments(L "" "EXERCISE" "SOURCES;TRITON" ${ARGN})
  set(lib klab_lesson_${id})
  add_library(${lib} OBJECT ${L_SOURCES})
  target_link_libraries(${lib} PUBLIC klab_core)
  foreach(py ${L_TRITON})
    klab_triton_aot(${lib} ${CMAKE_CURRENT_SOURCE_DIR}/${py})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY KLAB_LESSON_LIBS ${lib})
  set_property(GLOBAL APPEND PROPERTY KLAB_LESSON_IDS ${id})

  if(L_EXERCISE)
    get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
    add_library(${lib}_exercise OBJECT ${L_EXERCISE})
    target_link_libraries(${lib}_exercise PUBLIC klab_core)
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_LIBS ${lib}_exercise)
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_IDS ${id})
    set(solution ${CMAKE_SOURCE_DIR}/solutions/${folder}/${L_EXERCISE})
    if(EXISTS ${solution})
      add_library(${lib}_solution OBJECT ${solution})
      target_include_directories(${lib}_solution PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
      target_link_libraries(${lib}_solution PUBLIC klab_core)
      set_property(GLOBAL APPEND PROPERTY KLAB_SOLUTION_LIBS ${lib}_solution)
    else()
      message(WARNING "lesson ${id}: no solution at ${solution}")
    endif()
  endif()
endfunction()

function(klab_add_executables)
  # Object libraries linked here contribute their objects (and with them the static
  # registrations that a static library would let the linker drop).
  get_property(lessons GLOBAL PROPERTY KLAB_LESSON_LIBS)
  get_property(exercises GLOBAL PROPERTY KLAB_EXERCISE_LIBS)
  get_property(solutions GLOBAL PROPERTY KLAB_SOLUTION_LIBS)

  add_executable(klab ${CMAKE_SOURCE_DIR}/klab/cli/main.cpp)
  target_link_libraries(klab PRIVATE klab_cli ${lessons} ${exercises})
  set_target_properties(klab PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  if(KLAB_BUILD_SOLUTIONS)
    add_executable(klab-solutions ${CMAKE_SOURCE_DIR}/klab/cli/main.cpp)
    target_link_libraries(klab-solutions PRIVATE klab_cli ${lessons} ${solutions})
    set_target_properties(klab-solutions PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
  endif()
endfunction()

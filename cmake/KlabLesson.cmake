# klab_add_lesson(<id> SOURCES <.cu...> [TRITON <_triton.py...>] [EXERCISE <exercise.cu>]
#                 [TRITON_EXERCISE <exercise_triton.py> <launcher.cu>])
#
# Builds the lesson's kernels as an object library linked into `klab`. The exercise file
# goes into `klab`; the completed exercise from solutions/<lesson folder>/ goes into
# `klab-solutions` instead, so the tests can prove the stub fails and the solution passes
# without handing the solution to the learner in the exercise file. Each TODO of the
# exercise is proven to matter as well: the solution with that TODO blanked (and with each
# mistake its markers name) is built into klab-todo-<id>-<variant> (klab_todo_variants).
#
# The Triton exercise works the same way: the learner's .py (stub), its solution and each
# TODO variant are compiled ahead of time, each with its own copy of the lesson's launcher
# (the C++ that registers the impl `exercise_triton` and calls the generated launcher), into
# klab, klab-solutions and klab-todo-<id>-triton_<variant>.
function(klab_add_lesson id)
  cmake_parse_arguments(L "" "" "SOURCES;TRITON;EXERCISE;TRITON_EXERCISE" ${ARGN})
  set(lib klab_lesson_${id})
  add_library(${lib} OBJECT ${L_SOURCES})
  target_link_libraries(${lib} PUBLIC klab_core)
  foreach(py ${L_TRITON})
    klab_triton_aot(${lib} ${CMAKE_CURRENT_SOURCE_DIR}/${py})
  endforeach()
  set_property(GLOBAL APPEND PROPERTY KLAB_LESSON_LIBS ${lib})
  set_property(GLOBAL APPEND PROPERTY KLAB_LESSON_IDS ${id})
  if(KLAB_BUILD_SOLUTIONS)
    # The same objects as an archive, for the TODO variants' klab of another lesson: the
    # linker takes from it only the objects that lesson calls (06 calls 05's GEMM reference).
    add_library(${lib}_archive STATIC EXCLUDE_FROM_ALL $<TARGET_OBJECTS:${lib}>)
    target_link_libraries(${lib}_archive PUBLIC klab_core)
  endif()

  # EXERCISE exercise.cu [exercise_<tag>.cu ...]: the lesson's exercise (`klab check NN`),
  # then its further ones, NNb, NNc, ... in that order (Lesson::more_exercises names the
  # same files); a further one's libraries and TODO variants carry its tag.
  set(letters b c d e f)
  set(n 0)
  foreach(file ${L_EXERCISE})
    get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
    if(n EQUAL 0)
      set(key ${id})
      set(sfx "")
      set(prefix "")
    else()
      math(EXPR at "${n} - 1")
      list(GET letters ${at} letter)
      set(key ${id}${letter})
      get_filename_component(stem ${file} NAME_WE)
      string(REGEX REPLACE "^exercise_" "" tag "${stem}")
      if(tag STREQUAL stem)
        message(FATAL_ERROR "lesson ${id}: a further exercise is named exercise_<tag>.cu, not ${file}")
      endif()
      set(sfx _${tag})
      set(prefix ${tag}_)
    endif()
    math(EXPR n "${n} + 1")
    add_library(${lib}_exercise${sfx} OBJECT ${file})
    target_link_libraries(${lib}_exercise${sfx} PUBLIC klab_core)
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_LIBS ${lib}_exercise${sfx})
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_IDS ${key})
    set(solution ${CMAKE_SOURCE_DIR}/solutions/${folder}/${file})
    if(EXISTS ${solution})
      add_library(${lib}_solution${sfx} OBJECT ${solution})
      target_include_directories(${lib}_solution${sfx} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
      target_link_libraries(${lib}_solution${sfx} PUBLIC klab_core)
      set_property(GLOBAL APPEND PROPERTY KLAB_SOLUTION_LIBS ${lib}_solution${sfx})
      if(KLAB_BUILD_SOLUTIONS)
        klab_todo_variants(${id} ${CMAKE_CURRENT_SOURCE_DIR}/${file} ${solution} KEY ${key} PREFIX "${prefix}"
                           REPLACES ${lib}_solution${sfx})
      endif()
    else()
      message(WARNING "lesson ${id}: no solution at ${solution}")
    endif()
  endforeach()
  if(L_TRITON_EXERCISE)
    list(GET L_TRITON_EXERCISE 0 py)
    list(GET L_TRITON_EXERCISE 1 launcher)
    get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
    set(stub ${CMAKE_CURRENT_SOURCE_DIR}/${py})
    set(solution ${CMAKE_SOURCE_DIR}/solutions/${folder}/${py})
    set(out ${CMAKE_CURRENT_BINARY_DIR}/triton-exercise)
    klab_triton_exercise_lib(${lib}_triton_exercise ${stub} ${CMAKE_CURRENT_SOURCE_DIR}/${launcher} ${out}/stub)
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_LIBS ${lib}_triton_exercise)
    set_property(GLOBAL APPEND PROPERTY KLAB_TRITON_EXERCISE_IDS ${id})
    if(NOT EXISTS ${solution})
      message(FATAL_ERROR "lesson ${id}: no solution at ${solution}")
    endif()
    klab_triton_exercise_lib(${lib}_triton_solution ${solution} ${CMAKE_CURRENT_SOURCE_DIR}/${launcher} ${out}/solution)
    set_property(GLOBAL APPEND PROPERTY KLAB_SOLUTION_LIBS ${lib}_triton_solution)
    if(KLAB_BUILD_SOLUTIONS AND KLAB_HAVE_TRITON)
      klab_todo_variants(${id} ${stub} ${solution} KEY ${id} PREFIX triton_ LAUNCHER ${CMAKE_CURRENT_SOURCE_DIR}/${launcher}
                         REPLACES ${lib}_triton_solution)
    endif()
  endif()
endfunction()

# klab_add_catalog(<id> SOURCES <.cu...> CASES <case.cu...>)
#
# The debugging track's catalog of broken kernels (debugging/, lesson `<id>` in the registry,
# its folder registered as Lesson::folder). SOURCES: the cases' ops. Each case file is the
# learner's, the kernel with its bug: built into klab as the case op's impl `exercise`;
# its fix, solutions/<folder>/<case.cu>, into klab-solutions. `klab check <id>/<case>`
# grades it like an exercise (KLAB_EXERCISE_IDS: the stub fails, the fix passes), and the
# tests prove the case's tool catches the bug and passes the fix (KLAB_CATALOG_CASES). A
# case has no TODOs, so no TODO variants.
function(klab_add_catalog id)
  cmake_parse_arguments(L "" "" "SOURCES;CASES" ${ARGN})
  set(lib klab_lesson_${id})
  add_library(${lib} OBJECT ${L_SOURCES})
  target_link_libraries(${lib} PUBLIC klab_core)
  target_include_directories(${lib} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  set_property(GLOBAL APPEND PROPERTY KLAB_LESSON_LIBS ${lib})
  if(KLAB_BUILD_SOLUTIONS)
    add_library(${lib}_archive STATIC EXCLUDE_FROM_ALL $<TARGET_OBJECTS:${lib}>)
    target_link_libraries(${lib}_archive PUBLIC klab_core)
  endif()
  get_filename_component(folder ${CMAKE_CURRENT_SOURCE_DIR} NAME)
  foreach(file ${L_CASES})
    get_filename_component(name ${file} NAME_WE)
    add_library(${lib}_exercise_${name} OBJECT ${file})
    target_link_libraries(${lib}_exercise_${name} PUBLIC klab_core)
    target_include_directories(${lib}_exercise_${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_LIBS ${lib}_exercise_${name})
    set_property(GLOBAL APPEND PROPERTY KLAB_EXERCISE_IDS ${id}/${name})
    set_property(GLOBAL APPEND PROPERTY KLAB_CATALOG_CASES ${id}/${name})
    set(solution ${CMAKE_SOURCE_DIR}/solutions/${folder}/${file})
    if(NOT EXISTS ${solution})
      message(FATAL_ERROR "catalog ${id}: no fix at ${solution}")
    endif()
    add_library(${lib}_solution_${name} OBJECT ${solution})
    target_link_libraries(${lib}_solution_${name} PUBLIC klab_core)
    target_include_directories(${lib}_solution_${name} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
    set_property(GLOBAL APPEND PROPERTY KLAB_SOLUTION_LIBS ${lib}_solution_${name})
  endforeach()
endfunction()

# klab_triton_exercise_lib(<object library> <exercise .py> <launcher .cu> <AOT output dir>)
# The launcher registers the impl whatever the build; without Triton it reports why the impl
# cannot run (klab::triton_supported), and no AOT is compiled.
function(klab_triton_exercise_lib obj py launcher dir)
  add_library(${obj} OBJECT ${launcher})
  target_link_libraries(${obj} PUBLIC klab_core)
  target_include_directories(${obj} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(${obj} PRIVATE "KLAB_TRITON_EXERCISE_PY=\"${py}\"")
  klab_triton_aot(${obj} ${py} ${dir})
endfunction()

# klab_todo_variants(<id> <stub> <solution> KEY <exercise id> REPLACES <solution library>
#                    [PREFIX <variant name prefix>] [LAUNCHER <Triton launcher .cu>])
#
# tools/todo_proof.py checks that the TODO markers of the stub and its solution correspond
# (a mismatch stops the configure) and writes one source per variant under
# todo/<id>/<variant>/; each becomes an object library, klab_todo_<id>_<variant>, and
# KLAB_TODO_VARIANTS records "<id>|<variant>|<proof>|<object library>|<the solution library
# it replaces>|<the exercise id `klab check` takes>" for
# klab_add_executables and the tests. A variant proven by `compile:NAME` must not compile:
# it is left out of the default build, and a test builds it and expects the error.
function(klab_todo_variants id stub solution)
  # PREFIX: the variant names' prefix (triton_, bwd_); LAUNCHER, for a Triton exercise: the
  # launcher each variant's AOT output is built with.
  cmake_parse_arguments(T "" "KEY;PREFIX;LAUNCHER;REPLACES" "" ${ARGN})
  set(prefix "${T_PREFIX}")
  set(launcher "${T_LAUNCHER}")
  find_package(Python3 COMPONENTS Interpreter)
  if(NOT Python3_Interpreter_FOUND)
    message(FATAL_ERROR "lesson ${id}: the TODO proofs (tools/todo_proof.py) need Python 3; "
                        "install it or configure with -DKLAB_BUILD_SOLUTIONS=OFF")
  endif()
  set(tool ${CMAKE_SOURCE_DIR}/tools/todo_proof.py)
  set(todo_dir ${CMAKE_BINARY_DIR}/todo/${id})
  if(prefix)
    string(REGEX REPLACE "_$" "" tag "${prefix}")
    set(todo_dir ${todo_dir}-${tag})
  endif()
  execute_process(COMMAND ${Python3_EXECUTABLE} ${tool} generate ${stub} ${solution}
                          --out-dir ${todo_dir}
                  OUTPUT_VARIABLE manifest ERROR_VARIABLE why RESULT_VARIABLE rc
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  # Editing either file or the tool configures again, and with it regenerates the variants.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${stub} ${solution} ${tool})
  if(rc EQUAL 3)   # a learner's edited exercise in a copy without git: no stub to prove against
    string(STRIP "${why}" why)
    message(WARNING "lesson ${id}: ${why}")
    return()
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "lesson ${id}: the TODO markers of the exercise and its solution do not "
                        "correspond (tools/todo_proof.py):\n${why}")
  endif()
  if(why)   # a learner's edited exercise: the variants come from the stub of record
    string(STRIP "${why}" why)
    message(STATUS "lesson ${id}: ${why}")
  endif()
  string(REPLACE "\n" ";" manifest "${manifest}")
  foreach(line ${manifest})
    string(REPLACE "|" ";" fields "${line}")
    list(GET fields 0 variant)
    list(GET fields 1 proof)
    list(GET fields 2 source)
    set(variant ${prefix}${variant})
    set(obj klab_todo_${id}_${variant})
    if(launcher)
      get_filename_component(vdir ${source} DIRECTORY)
      klab_triton_exercise_lib(${obj} ${source} ${launcher} ${vdir}/aot)
    else()
      add_library(${obj} OBJECT ${source})
      target_include_directories(${obj} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
      target_link_libraries(${obj} PUBLIC klab_core)
      # A TODO left blank leaves variables unused (177: declared, 550: set but never read).
      target_compile_options(${obj} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--diag-suppress=177,550>)
    endif()
    if(proof MATCHES "^compile:")
      set_target_properties(${obj} PROPERTIES EXCLUDE_FROM_ALL ON)
    endif()
    set_property(GLOBAL APPEND PROPERTY KLAB_TODO_VARIANTS "${id}|${variant}|${proof}|${obj}|${T_REPLACES}|${T_KEY}")
  endforeach()
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
    # One klab per TODO variant: the variant's lesson alone, with its solution swapped for the
    # variant. Only the variant's exercise.cu is compiled anew; the rest is linked. The other
    # lessons come as archives, so only what the lesson calls of them is linked: a klab with
    # all of them is ~160 MB of kernels for two archs, and some 150 such filled CI's disk. The test todo.registry proves that each
    # variant's klab lists its lesson as klab-solutions does.
    get_property(variants GLOBAL PROPERTY KLAB_TODO_VARIANTS)
    foreach(v ${variants})
      string(REPLACE "|" ";" fields "${v}")
      list(GET fields 0 id)
      list(GET fields 1 variant)
      list(GET fields 2 proof)
      list(GET fields 3 obj)
      list(GET fields 4 replaces)
      if(proof MATCHES "^compile:")
        continue()
      endif()
      # The lesson's solutions with the variant in its solution's place: linked in the order
      # klab-solutions has them, so the impls register (and list) in the same order.
      set(mine "")
      foreach(s ${solutions})
        if(s STREQUAL replaces)
          list(APPEND mine ${obj})
        elseif(s MATCHES "^klab_lesson_${id}_(triton_)?solution")
          list(APPEND mine ${s})
        endif()
      endforeach()
      set(archives "")
      foreach(l ${lessons})
        if(NOT l STREQUAL klab_lesson_${id})
          list(APPEND archives ${l}_archive)
        endif()
      endforeach()
      string(REPLACE ";" "," archives "${archives}")
      add_executable(klab-todo-${id}-${variant} ${CMAKE_SOURCE_DIR}/klab/cli/main.cpp)
      target_link_libraries(klab-todo-${id}-${variant} PRIVATE klab_cli klab_lesson_${id} ${mine}
                            "$<LINK_GROUP:RESCAN,${archives}>")
      set_target_properties(klab-todo-${id}-${variant} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/todo)
    endforeach()
  endif()
endfunction()

# `klab report` (tests/report/): included from tests/CMakeLists.txt.
#
# On the CPU: the HTML generator's unit tests (test_report_html.cpp, in klab_unit_tests);
# bad input is one line and exit 2; the default page of no bench files; a learner's file at
# --out is kept as FILE.bak. In a headless browser (check_report.py): the page of the
# fixtures renders its charts, points and rows with no console message, and a planted JS
# exception is caught. Without chromium the browser tests skip (77), unless
# KLAB_REQUIRE_BROWSER=1 (CI) makes a missing browser a failure.
set(_report ${CMAKE_CURRENT_SOURCE_DIR}/report)
target_sources(klab_unit_tests PRIVATE ${_report}/test_report_html.cpp)
set(_report_out ${CMAKE_CURRENT_BINARY_DIR}/report-out)
file(MAKE_DIRECTORY ${_report_out})
set(_report_cases
    "bad_json|not valid JSON: parse error|${_report}/fixtures/truncated.json"
    "missing_field|no_median.json: bench\\[3\\]: \"median_ms\" missing or not a number|${_report}/fixtures/no_median.json"
    "verify_only|verify_only.json: no \"bench\" records|${_report}/fixtures/verify_only.json"
    "missing_file|nope.json: no such file|${_report}/fixtures/nope.json"
    "is_directory|fixtures: is a directory|${_report}/fixtures")
foreach(_case ${_report_cases})
  string(REPLACE "|" ";" _f "${_case}")
  list(GET _f 0 _name)
  list(GET _f 1 _re)
  list(GET _f 2 _arg)
  add_test(NAME report.${_name} COMMAND ${EXPECT} 2 "^klab: error: .*${_re}" $<TARGET_FILE:klab> report
           --root ${_report}/tree --out ${_report_out}/${_name}.html ${_arg})
endforeach()
add_test(NAME report.out_no_directory COMMAND ${EXPECT} 2 "^klab: error: --out .*: there is no directory"
         $<TARGET_FILE:klab> report --root ${_report}/tree --out ${_report_out}/no/such/dir/r.html)
add_test(NAME report.out_is_directory COMMAND ${EXPECT} 2 "^klab: error: --out .*: is a directory, not a file"
         $<TARGET_FILE:klab> report --root ${_report}/tree --out ${_report_out})
add_test(NAME report.root_not_directory COMMAND ${EXPECT} 2 "^klab: error: --root .*: not a directory"
         $<TARGET_FILE:klab> report --root ${_report}/nope --out ${_report_out}/r.html)
add_test(NAME report.unknown_option COMMAND ${EXPECT} 2 "^klab: error: report: unknown option '--bogus'"
         $<TARGET_FILE:klab> report --bogus)
add_test(NAME report.no_files COMMAND ${EXPECT} 0 "^read 0 bench files; wrote /.*/none.html$"
         $<TARGET_FILE:klab> report --root ${_report}/fixtures --out ${_report_out}/none.html)
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME report.keeps_learner_file COMMAND ${Python3_EXECUTABLE} ${_report}/check_report.py backup
           $<TARGET_FILE:klab> ${_report_out}/backup)
  foreach(_mode render planted_js_error empty)
    add_test(NAME report.browser.${_mode} COMMAND ${Python3_EXECUTABLE} ${_report}/check_report.py ${_mode}
             $<TARGET_FILE:klab> ${_report_out}/browser-${_mode})
    set_tests_properties(report.browser.${_mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 180 LABELS browser
                         RESOURCE_LOCK browser)
  endforeach()
endif()

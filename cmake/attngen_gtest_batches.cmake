# Run by ctest through the script attngen_gtest_batches() writes (cmake/AttngenTests.cmake), with
# command, list_args, prefix, batch and properties set: lists the suite's cases and adds a test
# per batch of up to `batch` cases of one suite.
execute_process(COMMAND ${command} ${list_args} OUTPUT_VARIABLE listing ERROR_VARIABLE errors
                RESULT_VARIABLE result TIMEOUT 120)
if (NOT result EQUAL 0)
  # A test that fails and says why, rather than a suite that silently has no tests.
  string(REPLACE ";" " " shown "${command}")
  add_test("${prefix}NOT_LISTED" "${CMAKE_COMMAND}" -E echo
           "listing the cases of ${shown} failed (${result}): ${errors}")
  set_tests_properties("${prefix}NOT_LISTED" PROPERTIES WILL_FAIL TRUE)
  return()
endif ()

# --gtest_list_tests: "Suite." then "  Case" lines, either with a "  # GetParam() = ..." or
# "  # TypeParam = ..." comment (which may hold any character: dropped before the lines are a list).
string(REGEX REPLACE "  #[^\n]*" "" listing "${listing}")
string(REPLACE ";" "" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")

set(suites "")
set(suite "")
foreach (line IN LISTS lines)
  if (line MATCHES "^([^ ].*)\\.$")
    set(suite "${CMAKE_MATCH_1}")
    string(MAKE_C_IDENTIFIER "${suite}" key)
    list(APPEND suites "${suite}")
    set(cases_${key} "")
  elseif (line MATCHES "^  +([^ ]+)$" AND NOT suite STREQUAL "")
    set(case "${CMAKE_MATCH_1}")
    if (NOT case MATCHES "^DISABLED_" AND NOT suite MATCHES "(^|/)DISABLED_")
      list(APPEND cases_${key} "${suite}.${case}")
    endif ()
  endif ()
endforeach ()

foreach (suite IN LISTS suites)
  string(MAKE_C_IDENTIFIER "${suite}" key)
  list(LENGTH cases_${key} count)
  if (count EQUAL 0)
    continue()
  endif ()
  math(EXPR parts "(${count} + ${batch} - 1) / ${batch}")
  # The cases dealt out evenly: parts of equal size to within one.
  set(first 0)
  foreach (part RANGE 1 ${parts})
    math(EXPR size "(${count} - ${first}) / (${parts} - ${part} + 1)")
    math(EXPR last "${first} + ${size} - 1")
    set(names "")
    foreach (i RANGE ${first} ${last})
      list(GET cases_${key} ${i} name)
      list(APPEND names "${name}")
    endforeach ()
    math(EXPR first "${last} + 1")
    string(REPLACE ";" ":" filter "${names}")
    set(test "${prefix}${suite}")
    if (parts GREATER 1)
      set(test "${test}[${part}/${parts}]")
    endif ()
    add_test("${test}" ${command} "--gtest_filter=${filter}")
    set_tests_properties("${test}" PROPERTIES ${properties})
  endforeach ()
endforeach ()

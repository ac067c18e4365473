# attngen_gtest_batches(TARGET [PREFIX p] [FILTER f] [BATCH n] [TIMEOUT s]): the GoogleTest
# cases of TARGET as ctest tests, up to BATCH cases of one suite to a process.
#
# One process per case, gtest_discover_tests()'s way, spent more time starting processes than
# testing: 0.03 s a start for the x86 suite (0.1 s with the sanitizers), 0.18 s under qemu, over
# about 3500 x86 and 1250 aarch64 cases (bench/RESULTS.md, "The online-softmax merge as a
# loop; ctest in batches"). The cases are listed when ctest runs (through
# CROSSCOMPILING_EMULATOR in a cross build), so a rebuilt suite is never stale.
#
#   PREFIX   each test's name starts with it (default: TARGET and a dot); a test is named after
#            its suite, with [k/n] where the suite takes n batches: `ctest -R Suite` selects them
#   FILTER   a --gtest_filter for the listing (e.g. -Builtin/*)
#   BATCH    cases of one suite to a process (default 16)
#   TIMEOUT  seconds a batch may take (default 600)
#
# A batch passes when its cases pass or skip; it is reported as skipped when every case skipped
# (the suites' main, attngen_gtest_main, exits 77 then). Disabled cases are left out. One case:
# the binary with --gtest_filter=Suite.Case.
function(attngen_gtest_batches TARGET)
  cmake_parse_arguments(A "" "PREFIX;FILTER;BATCH;TIMEOUT" "" ${ARGN})
  if (NOT DEFINED A_PREFIX)
    set(A_PREFIX "${TARGET}.")
  endif ()
  if (NOT A_BATCH)
    set(A_BATCH 16)
  endif ()
  if (NOT A_TIMEOUT)
    set(A_TIMEOUT 600)
  endif ()
  set(list_args --gtest_list_tests)
  if (A_FILTER)
    list(APPEND list_args "--gtest_filter=${A_FILTER}")
  endif ()
  get_property(emulator TARGET ${TARGET} PROPERTY CROSSCOMPILING_EMULATOR)
  set(command "\"$<TARGET_FILE:${TARGET}>\"")
  if (emulator)
    set(command "\"${emulator}\" ${command}")
  endif ()
  set(script "${CMAKE_CURRENT_BINARY_DIR}/${TARGET}_batches.cmake")
  file(GENERATE OUTPUT "${script}" CONTENT "# Written by attngen_gtest_batches() (cmake/AttngenTests.cmake); ctest includes it.
set(command ${command})
set(list_args \"${list_args}\")
set(prefix \"${A_PREFIX}\")
set(batch ${A_BATCH})
set(properties WORKING_DIRECTORY \"${CMAKE_CURRENT_BINARY_DIR}\" SKIP_RETURN_CODE 77 TIMEOUT ${A_TIMEOUT})
include(\"${_ATTNGEN_TESTS_DIR}/attngen_gtest_batches.cmake\")
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${script}")
endfunction()

set(_ATTNGEN_TESTS_DIR "${CMAKE_CURRENT_LIST_DIR}")

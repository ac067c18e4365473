# ctest tuning.descriptors: the built-in kernels were generated with the tunables of the tuning
# files, so the test fails when a file is ignored. The descriptors (attngen_kernel_info::tuning
# and ::tunables, printed by attngen_list_kernels) are compared with the files read here
# directly, with string(JSON), not through the variant tool that applied them; the kernels an
# entry applies to are those whose descriptor names its class and target:
#   - every entry of <TUNING_DIR>/<arch>_<isa>.json whose kernel was built names the file and
#     the class in `tuning` and carries exactly the entry's tunables;
#   - no other kernel claims a tuning file; with USE_TUNING OFF, none does.
#   cmake -DLIST=<attngen_list_kernels> [-DEMULATOR=a|b|c] -DTUNING_DIR=<dir> -DUSE_TUNING=ON
#         -P tests/tuning/check_descriptors.cmake
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" emulator "${EMULATOR}")
execute_process(COMMAND ${emulator} "${LIST}" RESULT_VARIABLE rc OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "${LIST} failed (${rc}): ${err}")
endif ()
string(REPLACE "\n" ";" lines "${out}")

set(names "")
foreach (line IN LISTS lines)
  if (line MATCHES "^([^|]*)\\|([^|]*)\\|([^|]*)\\|([^|]*)\\|(.*)$")
    set(name "${CMAKE_MATCH_1}")
    list(APPEND names "${name}")
    set(tuning_${name} "${CMAKE_MATCH_3}")
    set(tunables_${name} "${CMAKE_MATCH_4}")
    # The kernels a tuning file entry applies to: its target and the kernel's shape class.
    string(MAKE_C_IDENTIFIER "kernels_${CMAKE_MATCH_2}_${CMAKE_MATCH_5}" key)
    list(APPEND ${key} "${name}")
  endif ()
endforeach ()
list(LENGTH names n)
if (n EQUAL 0)
  message(FATAL_ERROR "no kernels listed by ${LIST}:\n${out}")
endif ()

set(expected "")  # kernels that must name a tuning file
set(checked 0)
if (USE_TUNING)
  file(GLOB files "${TUNING_DIR}/*.json")
  foreach (file IN LISTS files)
    get_filename_component(target "${file}" NAME_WE)
    file(READ "${file}" json)
    string(JSON count LENGTH "${json}" entries)
    math(EXPR last "${count} - 1")
    foreach (e RANGE ${last})
      string(JSON class MEMBER "${json}" entries ${e})
      string(MAKE_C_IDENTIFIER "kernels_${target}_${class}" key)
      set(kernels "${${key}}")
      if (NOT kernels)
        message(STATUS "not built here: a ${target} kernel of class '${class}'")
        continue()
      endif ()
      set(want "")
      string(JSON nt LENGTH "${json}" entries "${class}" tunables)
      if (nt GREATER 0)
        math(EXPR lt "${nt} - 1")
        foreach (p RANGE ${lt})
          string(JSON key MEMBER "${json}" entries "${class}" tunables ${p})
          string(JSON value GET "${json}" entries "${class}" tunables "${key}")
          list(APPEND want "${key}=${value}")
        endforeach ()
      endif ()
      list(SORT want)
      foreach (kernel IN LISTS kernels)
        string(REPLACE " " ";" got "${tunables_${kernel}}")
        list(SORT got)
        if (NOT tuning_${kernel} STREQUAL "${target}.json#${class}" OR NOT got STREQUAL want)
          message(SEND_ERROR "${kernel}: descriptor says tuning '${tuning_${kernel}}', tunables "
                             "'${tunables_${kernel}}'; ${target}.json has '${class}' with "
                             "'${want}' (was the tuning file ignored?)")
        else ()
          message(STATUS "ok: ${kernel} generated with ${target}.json '${class}': ${want}")
        endif ()
        list(APPEND expected "${kernel}")
        math(EXPR checked "${checked} + 1")
      endforeach ()
    endforeach ()
  endforeach ()
endif ()

foreach (name IN LISTS names)
  if (tuning_${name} MATCHES "\\.json#" AND NOT name IN_LIST expected)
    message(SEND_ERROR "${name} claims tuning '${tuning_${name}}', which no tuning file in "
                       "${TUNING_DIR} has (USE_TUNING ${USE_TUNING})")
  endif ()
endforeach ()
message(STATUS "${n} kernels, ${checked} generated from tuning files")

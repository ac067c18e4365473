# ctest tuning.autotune_smoke: bench/autotune end to end on a tiny budget and shape (generator,
# shared objects, harness, search, A/B run), then its tuning file read back by the build's
# lookup (attngen_generator --tuning-lookup, the reader attngen_add_kernel uses). The file starts
# with an entry for the class: the search's first point, which the new entry's provenance
# carries (with the old provenance) and its verdict names where it stays or gives way.
#   cmake -DSOURCE_DIR=<attngen> -DPYTHON=<python3> -DGENERATOR=<attngen_generator>
#         -DWORK=<dir> -P tests/tuning/autotune_smoke.cmake
cmake_minimum_required(VERSION 3.25)
set(class "attention d64 causal")
set(out "${WORK}/x86_64_smoke.json")
file(REMOVE_RECURSE "${WORK}")
# The tuning file's target: the one bench/autotune picks here (this machine's ISA).
execute_process(COMMAND "${GENERATOR}" --describe --class "${class}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE described ERROR_VARIABLE error)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} --describe failed (${rc}): ${error}")
endif ()
string(JSON tuning_target GET "${described}" target)
file(WRITE "${out}" "{\"format\": \"attngen-tuning-1\", \"target\": \"${tuning_target}\", \"entries\": {
  \"${class}\": {\"tunables\": {\"query_tile\": 16, \"key_tile\": 4},
                  \"provenance\": {\"method\": \"autotune_smoke\"}}}}\n")
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/bench/autotune" --class "${class}"
                        --shapes 1,2,64 --budget-min 0.5 --autoschedulers none --threads 1
                        --ab-seconds 2 --generator "${GENERATOR}" --work "${WORK}" --out "${out}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE report ERROR_VARIABLE progress)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "bench/autotune failed (${rc}):\n${progress}\n${report}")
endif ()
message(STATUS "${report}")
file(READ "${out}" json)
string(JSON target GET "${json}" target)
# The file's entry went first, and the new provenance records it. (The evaluations are in the
# order of the search in state.json; CMake's JSON reader sorts an object's members, so Python
# reads the first.)
execute_process(COMMAND "${PYTHON}" -c
                        "import json, sys; print(next(iter(json.load(open(sys.argv[1]))['classes'][sys.argv[2]]['evals'])))"
                        "${WORK}/state.json" "${class}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE first ERROR_VARIABLE error
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "reading ${WORK}/state.json failed (${rc}): ${error}")
endif ()
if (NOT first MATCHES "(^| )key_tile=4( |$)" OR NOT first MATCHES "(^| )query_tile=16( |$)")
  message(FATAL_ERROR "the search's first point is '${first}', not the file's entry")
endif ()
string(JSON old GET "${json}" entries "${class}" provenance file_entry provenance method)
string(JSON old_tile GET "${json}" entries "${class}" provenance file_entry tunables key_tile)
if (NOT old STREQUAL "autotune_smoke" OR NOT old_tile EQUAL 4)
  message(FATAL_ERROR "the new provenance does not carry the file's entry:\n${json}")
endif ()
string(JSON verdict GET "${json}" entries "${class}" provenance verdict)
if (NOT verdict MATCHES "^tuned: .*; it replaces the file's entry before this run" AND
    NOT verdict MATCHES "^the file's entry kept" AND
    NOT verdict MATCHES "gives way to the defaults$")
  message(FATAL_ERROR "the verdict says nothing of the file's entry: ${verdict}")
endif ()
execute_process(COMMAND "${GENERATOR}" --tuning-lookup "${out}" "${target}" "${class}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE lookup ERROR_VARIABLE error)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "${GENERATOR} --tuning-lookup rejects ${out} (${rc}): ${error}\n${json}")
endif ()
if (NOT lookup MATCHES "(^|\n)found=1(\n|$)")
  message(FATAL_ERROR "${out} has no entry '${class}' (--tuning-lookup: ${lookup}):\n${json}")
endif ()
string(REGEX MATCH "(^|\n)tunables=([^\n]*)" _ "${lookup}")
set(t "${CMAKE_MATCH_2}")
# What the script wrote must be what the build reads: the entry's tunables, as name=value;...
string(JSON entry GET "${json}" entries "${class}" tunables)
string(JSON n LENGTH "${entry}")
set(written "")
if (n GREATER 0)
  math(EXPR last "${n} - 1")
  foreach (i RANGE ${last})
    string(JSON name MEMBER "${entry}" ${i})
    string(JSON value GET "${entry}" "${name}")
    list(APPEND written "${name}=${value}")
  endforeach ()
endif ()
list(SORT written)
set(read_back "${t}")  # a list: name=value;...
list(SORT read_back)
if (NOT "${written}" STREQUAL "${read_back}")
  message(FATAL_ERROR "--tuning-lookup read '${t}' from ${out}, which has ${entry}")
endif ()
message(STATUS "entry read back: '${t}' (${verdict})")

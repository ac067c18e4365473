# ctest tuning.autotune_smoke: bench/autotune end to end on a tiny budget and shape (generator,
# shared objects, harness, search, A/B run), then its tuning file read back by the build's
# lookup (cmake/AttngenTuning.cmake).
#   cmake -DSOURCE_DIR=<attngen> -DPYTHON=<python3> -DGENERATOR=<attngen_generator>
#         -DWORK=<dir> -P tests/tuning/autotune_smoke.cmake
cmake_minimum_required(VERSION 3.25)
set(out "${WORK}/x86_64_smoke.json")
file(REMOVE_RECURSE "${WORK}")
execute_process(COMMAND "${PYTHON}" "${SOURCE_DIR}/bench/autotune" --class "attention d64 causal"
                        --shapes 1,2,64 --budget-min 0.5 --autoschedulers none --threads 1
                        --ab-seconds 2 --generator "${GENERATOR}" --work "${WORK}" --out "${out}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE report ERROR_VARIABLE progress)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "bench/autotune failed (${rc}):\n${progress}\n${report}")
endif ()
message(STATUS "${report}")
file(READ "${out}" json)
string(JSON target GET "${json}" target)
include("${SOURCE_DIR}/cmake/AttngenTuning.cmake")
attngen_tuning_lookup(FILE "${out}" TARGET "${target}" CLASS "attention d64 causal" OUT t
                      FOUND found)
if (NOT found)
  message(FATAL_ERROR "${out} has no entry 'attention d64 causal':\n${json}")
endif ()
string(JSON verdict GET "${json}" entries "attention d64 causal" provenance verdict)
message(STATUS "entry read back: '${t}' (${verdict})")

# ctest tuning.lookup: the variant model's shape classes and tuning-file lookups on a sample file
# (hits, misses, an entry that keeps the defaults, a missing file), through the generator's
# --variant-cmake and --tuning-lookup modes (generator/variant_cli.h).
#   cmake -DSOURCE_DIR=<attngen> -DTOOL=<attngen_generator> -P tests/tuning/lookup_test.cmake
cmake_minimum_required(VERSION 3.25)
set(sample "${CMAKE_CURRENT_LIST_DIR}/sample_x86_64_avx512.json")

function(expect what got want)
  if (NOT "${got}" STREQUAL "${want}")
    message(SEND_ERROR "${what}: got '${got}', expected '${want}'")
  else ()
    message(STATUS "ok: ${what} = '${got}'")
  endif ()
endfunction()

# What the model says of a variant (ATTNGEN_V_* in the caller).
macro(ask)
  execute_process(COMMAND "${TOOL}" --variant-cmake ${ARGN} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if (NOT rc EQUAL 0)
    message(FATAL_ERROR "${TOOL} --variant-cmake ${ARGN}: ${err}")
  endif ()
  cmake_language(EVAL CODE "${out}")
endmacro()

function(lookup class)
  execute_process(COMMAND "${TOOL}" --tuning-lookup "${sample}" x86_64_avx512 "${class}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if (NOT rc EQUAL 0)
    message(FATAL_ERROR "lookup of '${class}': ${err}")
  endif ()
  string(REGEX MATCH "found=([01])" _ "${out}")
  set(found ${CMAKE_MATCH_1} PARENT_SCOPE)
  string(REGEX MATCH "tunables=([^\n]*)" _ "${out}")
  set(tunables "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

# Shape classes, from the arguments of attngen_add_kernel().
ask(-- OP attention HEAD_DIM 64 HEAD_DIM_V 64 MASK none MASK_TENSOR none PATTERN none)
expect("class of the dense D64 variant" "${ATTNGEN_V_CLASS}" "attention d64 dense")
ask(-- OP attention HEAD_DIM 64 MASK causal KEY_BLOCK 128)
expect("class of an explicit key-block variant" "${ATTNGEN_V_CLASS}" "attention d64 causal kb128")
ask(-- OP attention HEAD_DIM 40 HEAD_DIM_V 24 MASK causal MASK_TENSOR bool KEY_BLOCK 32)
expect("class with Dv and a mask tensor" "${ATTNGEN_V_CLASS}" "attention d40v24 causal bmask kb32")
ask(-- OP attention HEAD_DIM 64 MASK causal PATTERN window WINDOW_LEFT 255 WINDOW_RIGHT -1 SOFTCAP
    LSE)
expect("class with a pattern and flags" "${ATTNGEN_V_CLASS}" "attention d64 causal cap win255_inf lse")
ask(-- OP attention HEAD_DIM 64 PATTERN global_local GLOBAL_TOKENS 4 LOCAL 16
    MASK_TENSOR additive WEIGHTS)
expect("class with global+local" "${ATTNGEN_V_CLASS}" "attention d64 dense amask glob4_loc16 weights")
ask(-- OP linear)
expect("class of linear" "${ATTNGEN_V_CLASS}" "linear")
ask(-- OP decode HEAD_DIM 128)
expect("decode has no tuning class" "${ATTNGEN_V_CLASS}" "")

# A variant takes its tuning file's entry, unless it gives TUNABLES; its param says which.
ask(--tuning-dir "${CMAKE_CURRENT_LIST_DIR}" -- OP attention HEAD_DIM 64 ISA avx512)
expect("no file of that name: defaults" "${ATTNGEN_V_TUNING}" "")
file(MAKE_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/lookup_dir")
configure_file("${sample}" "${CMAKE_CURRENT_BINARY_DIR}/lookup_dir/x86_64_avx512.json" COPYONLY)
ask(--tuning-dir "${CMAKE_CURRENT_BINARY_DIR}/lookup_dir" -- OP attention HEAD_DIM 64 ISA avx512)
expect("tuned variant: source" "${ATTNGEN_V_TUNING}" "x86_64_avx512.json#attention d64 dense")
expect("tuned variant: param" "${ATTNGEN_V_VARIANT}"
       "OP attention HEAD_DIM 64 TUNABLES key_tile=8 pv_rows=2 query_tile=48")
ask(--tuning-dir "${CMAKE_CURRENT_BINARY_DIR}/lookup_dir" -- OP attention HEAD_DIM 64 ISA avx512
    TUNABLES key_tile=3)
expect("TUNABLES win over the file" "${ATTNGEN_V_TUNING}|${ATTNGEN_V_VARIANT}"
       "TUNABLES|OP attention HEAD_DIM 64 TUNABLES key_tile=3")
ask(--tuning-dir "${CMAKE_CURRENT_BINARY_DIR}/lookup_dir" -- OP attention HEAD_DIM 64 ISA avx2)
expect("another ISA's file is not read" "${ATTNGEN_V_TUNING}" "")

# Hits.
lookup("attention d64 dense")
expect("dense hit" "${tunables}" "key_tile=8;pv_rows=2;query_tile=48")
expect("dense found" "${found}" "1")
lookup("attention d64 causal")
expect("causal hit (key_block tunable)" "${tunables}" "key_block=128;query_tile=32")
lookup("attention d64 causal kb128")
expect("explicit key-block class hit" "${tunables}" "key_tile=4")
lookup("attention d40v24 causal bmask kb32")
expect("entry keeping the defaults: no tunables" "${tunables}" "")
expect("entry keeping the defaults: found" "${found}" "1")
lookup("linear")
expect("linear hit" "${tunables}" "e_chunk=64;n_vectors=2;rows=12")

# Misses: another class, a prefix of a class.
lookup("attention d80 causal")
expect("miss: no entry" "${tunables}|${found}" "|0")
lookup("attention d64")
expect("miss: a prefix is not a class" "${found}" "0")

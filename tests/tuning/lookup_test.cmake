# ctest tuning.lookup: attngen_tuning_class() and attngen_tuning_lookup() on a sample file:
# hits, misses, an entry that keeps the defaults, a missing file.
#   cmake -DSOURCE_DIR=<attngen> -P tests/tuning/lookup_test.cmake
cmake_minimum_required(VERSION 3.25)
include("${SOURCE_DIR}/cmake/AttngenTuning.cmake")
set(sample "${CMAKE_CURRENT_LIST_DIR}/sample_x86_64_avx512.json")
set(failures 0)

function(expect what got want)
  if (NOT "${got}" STREQUAL "${want}")
    message(SEND_ERROR "${what}: got '${got}', expected '${want}'")
  else ()
    message(STATUS "ok: ${what} = '${got}'")
  endif ()
endfunction()

# Shape classes, from the arguments of attngen_add_kernel().
attngen_tuning_class(c OP attention HEAD_DIM 64 HEAD_DIM_V 64 MASK none MASK_TENSOR none
                     KEY_BLOCK 0 PATTERN none)
expect("class of the dense D64 variant" "${c}" "attention d64 dense")
attngen_tuning_class(c OP attention HEAD_DIM 64 MASK causal KEY_BLOCK 128)
expect("class of an explicit key-block variant" "${c}" "attention d64 causal kb128")
attngen_tuning_class(c OP attention HEAD_DIM 40 HEAD_DIM_V 24 MASK causal MASK_TENSOR bool
                     KEY_BLOCK 32)
expect("class with Dv and a mask tensor" "${c}" "attention d40v24 causal bmask kb32")
attngen_tuning_class(c OP attention HEAD_DIM 64 MASK causal PATTERN window WINDOW_LEFT 255
                     WINDOW_RIGHT -1 SOFTCAP LSE)
expect("class with a pattern and flags" "${c}" "attention d64 causal cap win255_inf lse")
attngen_tuning_class(c OP attention HEAD_DIM 64 PATTERN global_local GLOBAL_TOKENS 4 LOCAL 16
                     MASK_TENSOR additive WEIGHTS)
expect("class with global+local" "${c}" "attention d64 dense amask glob4_loc16 weights")
attngen_tuning_class(c OP linear)
expect("class of linear" "${c}" "linear")

# Hits.
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512 CLASS "attention d64 dense"
                      OUT t FOUND found)
expect("dense hit" "${t}" "key_tile=8;pv_rows=2;query_tile=48")
expect("dense found" "${found}" "TRUE")
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512 CLASS "attention d64 causal"
                      OUT t)
expect("causal hit (key_block tunable)" "${t}" "key_block=128;query_tile=32")
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512 CLASS "attention d64 causal kb128"
                      OUT t)
expect("explicit key-block class hit" "${t}" "key_tile=4")
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512
                      CLASS "attention d40v24 causal bmask kb32" OUT t FOUND found)
expect("entry keeping the defaults: no tunables" "${t}" "")
expect("entry keeping the defaults: found" "${found}" "TRUE")
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512 CLASS "linear" OUT t)
expect("linear hit" "${t}" "e_chunk=64;n_vectors=2;rows=12")

# Misses: another class, a prefix of a class, a missing file.
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512 CLASS "attention d80 causal"
                      OUT t FOUND found)
expect("miss: no entry" "${t}" "")
expect("miss: not found" "${found}" "FALSE")
attngen_tuning_lookup(FILE "${sample}" TARGET x86_64_avx512 CLASS "attention d64" OUT t
                      FOUND found)
expect("miss: a prefix is not a class" "${found}" "FALSE")
attngen_tuning_lookup(FILE "${CMAKE_CURRENT_LIST_DIR}/no_such_target.json" TARGET x86_64_avx512
                      CLASS "attention d64 dense" OUT t FOUND found)
expect("miss: no file" "${t}|${found}" "|FALSE")

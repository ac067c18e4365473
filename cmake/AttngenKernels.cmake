# attngen_add_kernel(): generate one specialised attention kernel as a static library.
#
# Used by attngen itself (generated/variants.cmake) and by projects that find_package(attngen):
#
#   attngen_add_kernel(my_attn OP attention HEAD_DIM 96 MASK causal ISA avx512)
#   target_link_libraries(app PRIVATE my_attn attngen::attngen)
#   ... attngen_register_kernel(&attngen_kernel_my_attn);   // or pass it to attngen_attention_with
#
# Arguments (see docs/variants.md for the naming scheme and every value):
#   OP           attention | linear | mha | decode                (default attention)
#   HEAD_DIM     head dim of Q and K (attention, decode) or of the heads (mha)
#   HEAD_DIM_V   head dim of V and O, when it differs (attention, decode)
#   MASK         none | causal                  (default none; decode kernels are always causal)
#   MASK_TENSOR  none | bool | additive                           (default none)
#   SOFTCAP      flag: the kernel applies c * tanh(s / c)
#   PATTERN      none | window | strided | block_sparse | global_local, with its parameters
#                WINDOW_LEFT/WINDOW_RIGHT (-1: unbounded), STRIDE, BLOCK (the layout is a
#                run-time input), LOCAL and GLOBAL_TOKENS (docs/semantics.md)
#   WEIGHTS      flag: also writes the attention weights P [B, Hq, Sq, Skv]
#   LSE          flag: also writes the row log-sum-exp [B, Hq, Sq]
#   KEY_BLOCK    keys per block of the online-softmax form (attention; 0 or absent: the ISA's
#                default, whole score rows on CPUs and shared-memory-sized blocks on CUDA), or
#                of a decode kernel's splits (decode; 0 or absent: the ISA's default)
#   QUERY_TILE   query rows per parallel task (attention on CPUs; 0 or absent: the schedule's
#                default or the tuning file's). A kernel with a smaller tile than the default
#                pads a short ragged query sequence less (ViT's 197 tokens: 224 rows at 32, 256 at
#                64); the runtime prefers it where it pads noticeably fewer rows
#                (runtime/src/registry.cpp)
#   ISA          host | avx512 | avx2 | sse41 | neon | cuda      (default host)
#   TUNABLES     generator params of the schedule, e.g. query_tile=32; without them the
#                kernel takes the entry for its shape class in the tuning file of its target,
#                ${ATTNGEN_TUNING_DIR}/<arch>_<isa>.json (schedules/tuned/README.md), unless
#                ATTNGEN_USE_TUNING is OFF; else the target's defaults
#   NAME_VAR     variable that receives the kernel's derived name (when NAME is AUTO)
#
# NAME AUTO derives the name from the parameters: attn_f32_d64_causal__x86_64_avx512.
include_guard(GLOBAL)
include("${CMAKE_CURRENT_LIST_DIR}/AttngenTuning.cmake")

# Tuning files: schedules/tuned in attngen's tree, tuned/ next to this file when installed.
if (EXISTS "${CMAKE_CURRENT_LIST_DIR}/../schedules/tuned")
  get_filename_component(_attngen_tuning_dir "${CMAKE_CURRENT_LIST_DIR}/../schedules/tuned"
                         ABSOLUTE)
else ()
  set(_attngen_tuning_dir "${CMAKE_CURRENT_LIST_DIR}/tuned")
endif ()
set(ATTNGEN_TUNING_DIR "${_attngen_tuning_dir}" CACHE PATH
    "Directory of the tuning files (<arch>_<isa>.json) that attngen_add_kernel() reads")

# Halide target string for an ISA name.
function(attngen_halide_target ISA OUT)
  set(x86 "x86-64-linux")
  if (ISA STREQUAL "host")
    set(t "host")
  elseif (ISA STREQUAL "avx512")
    set(t "${x86}-sse41-avx-f16c-fma-avx2-avx512-avx512_skylake")
  elseif (ISA STREQUAL "avx2")
    set(t "${x86}-sse41-avx-f16c-fma-avx2")
  elseif (ISA STREQUAL "sse41")
    set(t "${x86}-sse41")
  elseif (ISA STREQUAL "neon")
    set(t "arm-64-linux")
  elseif (ISA STREQUAL "cuda")
    # Host code for any x86-64; PTX for sm_80, which the driver JIT-compiles for newer GPUs.
    set(t "${x86}-cuda-cuda_capability_80")
  else ()
    message(FATAL_ERROR "attngen: unknown ISA '${ISA}' (host, avx512, avx2, sse41, neon, cuda)")
  endif ()
  set(${OUT} "${t}" PARENT_SCOPE)
endfunction()

# The ISA that `host` means on this build machine, for names and dispatch.
function(_attngen_host_isa OUT)
  if (NOT DEFINED ATTNGEN_HOST_ISA)
    set(isa "generic")
    if (CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
      set(isa "sse41")
      if (EXISTS "/proc/cpuinfo")
        file(READ "/proc/cpuinfo" cpuinfo)
        if (cpuinfo MATCHES "avx512f" AND cpuinfo MATCHES "avx512bw" AND cpuinfo MATCHES "avx512vl")
          set(isa "avx512")
        elseif (cpuinfo MATCHES " avx2" AND cpuinfo MATCHES " fma")
          set(isa "avx2")
        endif ()
      endif ()
    elseif (CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
      set(isa "neon")
    endif ()
    set(ATTNGEN_HOST_ISA "${isa}" CACHE STRING "ISA that the 'host' kernel target means here")
  endif ()
  set(${OUT} "${ATTNGEN_HOST_ISA}" PARENT_SCOPE)
endfunction()

# The Halide runtime shared by every kernel of one architecture (one per build). On x86-64 it
# carries Halide's CUDA runtime when ATTNGEN_CUDA is on (it loads libcuda only when a CUDA kernel
# runs), so CPU and CUDA kernels link into one binary.
function(_attngen_runtime_for ISA OUT)
  if (ISA STREQUAL "neon")
    set(arch arm_64)
    set(rt_target "arm-64-linux")
  else ()
    set(arch x86_64)
    set(rt_target "x86-64-linux")
    if (ATTNGEN_CUDA)
      string(APPEND rt_target "-cuda")
    elseif (ISA STREQUAL "cuda")
      message(FATAL_ERROR "attngen: ISA cuda needs ATTNGEN_CUDA=ON (a Halide runtime with CUDA)")
    endif ()
  endif ()
  set(rt attngen_halide_runtime_${arch})
  if (NOT TARGET ${rt})
    if (TARGET attngen::${rt})  # from an installed attngen (find_package)
      set(rt attngen::${rt})
    else ()
      set(obj "${CMAKE_CURRENT_BINARY_DIR}/${rt}.o")
      add_custom_command(OUTPUT "${obj}"
                         COMMAND ${ATTNGEN_GENERATOR} -r ${rt} -o "${CMAKE_CURRENT_BINARY_DIR}"
                                 -e object target=${rt_target}-user_context
                         DEPENDS ${ATTNGEN_GENERATOR}
                         COMMENT "Generating the Halide runtime for ${rt_target}"
                         VERBATIM)
      add_library(${rt} STATIC "${obj}")
      set_target_properties(${rt} PROPERTIES LINKER_LANGUAGE CXX)
      find_package(Threads REQUIRED)
      target_link_libraries(${rt} INTERFACE Threads::Threads ${CMAKE_DL_LIBS})
      set_property(GLOBAL APPEND PROPERTY ATTNGEN_HALIDE_RUNTIMES ${rt})
    endif ()
  endif ()
  set(${OUT} ${rt} PARENT_SCOPE)
endfunction()

function(attngen_add_kernel NAME)
  set(options SOFTCAP WEIGHTS LSE)
  set(one OP HEAD_DIM HEAD_DIM_V MASK MASK_TENSOR KEY_BLOCK QUERY_TILE ISA NAME_VAR PATTERN
          WINDOW_LEFT WINDOW_RIGHT STRIDE BLOCK LOCAL GLOBAL_TOKENS)
  set(multi TUNABLES)
  cmake_parse_arguments(A "${options}" "${one}" "${multi}" ${ARGN})
  if (A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attngen_add_kernel(${NAME}): unknown arguments ${A_UNPARSED_ARGUMENTS}")
  endif ()
  # Called from a project that added attngen's tree with add_subdirectory (how a cross build
  # makes its own kernels): attngen's targets. The installed package sets both.
  if (NOT ATTNGEN_GENERATOR)
    set(ATTNGEN_GENERATOR attngen::generator)
  endif ()
  if (NOT ATTNGEN_HEADERS_TARGET)
    set(ATTNGEN_HEADERS_TARGET attngen::headers)
  endif ()
  if (NOT A_OP)
    set(A_OP attention)
  endif ()
  if (A_OP STREQUAL "linear")
    set(A_HEAD_DIM 0)  # a linear layer has no heads
    set(A_HEAD_DIM_V 0)
  elseif (NOT A_HEAD_DIM)
    message(FATAL_ERROR "attngen_add_kernel(${NAME}): HEAD_DIM is required for OP ${A_OP}")
  endif ()
  if (NOT A_HEAD_DIM_V)
    set(A_HEAD_DIM_V ${A_HEAD_DIM})
  endif ()
  if (A_OP STREQUAL "decode")
    # Queries of a KV cache attend the cached positions up to their own (bottom-right causal).
    if (A_MASK AND NOT A_MASK STREQUAL "causal")
      message(FATAL_ERROR "attngen_add_kernel(${NAME}): decode kernels are causal (MASK causal)")
    endif ()
    set(A_MASK causal)
  endif ()
  if (NOT A_MASK)
    set(A_MASK none)
  endif ()
  if (NOT A_MASK_TENSOR)
    set(A_MASK_TENSOR none)
  endif ()
  if (NOT A_ISA)
    set(A_ISA host)
  endif ()
  if (NOT A_KEY_BLOCK)
    set(A_KEY_BLOCK 0)
  endif ()
  if (NOT A_QUERY_TILE)
    set(A_QUERY_TILE 0)
  elseif (NOT A_OP STREQUAL "attention")
    message(FATAL_ERROR "attngen_add_kernel(${NAME}): QUERY_TILE is for OP attention")
  endif ()
  if (NOT A_PATTERN)
    set(A_PATTERN none)
  endif ()
  foreach (p WINDOW_LEFT WINDOW_RIGHT)
    if (NOT DEFINED A_${p})
      set(A_${p} -1)
    endif ()
  endforeach ()
  foreach (p STRIDE BLOCK LOCAL GLOBAL_TOKENS)
    if (NOT DEFINED A_${p})
      set(A_${p} 0)
    endif ()
  endforeach ()
  set(weights 0)
  set(lse 0)
  if (A_WEIGHTS)
    set(weights 1)
  endif ()
  if (A_LSE)
    set(lse 1)
  endif ()
  set(softcap 0)
  if (A_SOFTCAP)
    set(softcap 1)
  endif ()

  set(isa "${A_ISA}")
  if (isa STREQUAL "host")
    _attngen_host_isa(isa)
  endif ()
  if (A_ISA STREQUAL "host" AND CMAKE_CROSSCOMPILING)
    # Halide's `host` is the machine the generator runs on, not the one the kernel is for.
    attngen_halide_target(${isa} halide_target)
  else ()
    attngen_halide_target(${A_ISA} halide_target)
  endif ()

  set(arch x86_64)
  if (isa STREQUAL "neon")
    set(arch aarch64)
  endif ()

  # Name scheme (docs/variants.md):
  #   <op>_f32_d<Dqk>[v<Dv>]_<mask>[_bmask|_amask][_cap][_<pattern>][_kb<key block>]
  #   [_qt<query tile>][_p][_lse]__<arch>_<isa>
  if (NAME STREQUAL "AUTO")
    set(op_short attn)
    if (A_OP STREQUAL "linear")
      set(op_short linear)
    elseif (A_OP STREQUAL "mha")
      set(op_short mha)
    elseif (A_OP STREQUAL "decode")
      set(op_short decode)
    endif ()
    set(NAME "${op_short}_f32")
    if (NOT A_OP STREQUAL "linear")
      string(APPEND NAME "_d${A_HEAD_DIM}")
      if (NOT A_HEAD_DIM_V EQUAL A_HEAD_DIM)
        string(APPEND NAME "v${A_HEAD_DIM_V}")
      endif ()
      string(APPEND NAME "_${A_MASK}")
    endif ()
    if (A_MASK_TENSOR STREQUAL "bool")
      string(APPEND NAME "_bmask")
    elseif (A_MASK_TENSOR STREQUAL "additive")
      string(APPEND NAME "_amask")
    endif ()
    if (softcap)
      string(APPEND NAME "_cap")
    endif ()
    if (A_PATTERN STREQUAL "window")
      string(REPLACE "-1" "inf" l "${A_WINDOW_LEFT}")
      string(REPLACE "-1" "inf" r "${A_WINDOW_RIGHT}")
      string(APPEND NAME "_win${l}_${r}")
    elseif (A_PATTERN STREQUAL "strided")
      string(APPEND NAME "_str${A_STRIDE}")
    elseif (A_PATTERN STREQUAL "block_sparse")
      string(APPEND NAME "_bs${A_BLOCK}")
    elseif (A_PATTERN STREQUAL "global_local")
      string(APPEND NAME "_glob${A_GLOBAL_TOKENS}_loc${A_LOCAL}")
    endif ()
    if (A_KEY_BLOCK GREATER 0)
      string(APPEND NAME "_kb${A_KEY_BLOCK}")
    endif ()
    if (A_QUERY_TILE GREATER 0)
      string(APPEND NAME "_qt${A_QUERY_TILE}")
    endif ()
    if (weights)
      string(APPEND NAME "_p")
    endif ()
    if (lse)
      string(APPEND NAME "_lse")
    endif ()
    string(APPEND NAME "__${arch}_${isa}")
  endif ()
  if (A_NAME_VAR)
    set(${A_NAME_VAR} "${NAME}" PARENT_SCOPE)
  endif ()

  # Schedule tunables: TUNABLES when given, else the tuning file's entry for the kernel's shape
  # class, else none (the target's defaults). `tuning` says which, for the kernel's descriptor.
  set(tunables "${A_TUNABLES}")
  set(tuning "")
  if (A_TUNABLES)
    set(tuning "TUNABLES")
  elseif ((NOT DEFINED ATTNGEN_USE_TUNING OR ATTNGEN_USE_TUNING)
          AND (A_OP STREQUAL "attention" OR A_OP STREQUAL "linear"))
    set(flags "")
    foreach (flag SOFTCAP WEIGHTS LSE)
      if (A_${flag})
        list(APPEND flags ${flag})
      endif ()
    endforeach ()
    attngen_tuning_class(class OP ${A_OP} HEAD_DIM ${A_HEAD_DIM} HEAD_DIM_V ${A_HEAD_DIM_V}
                         MASK ${A_MASK} MASK_TENSOR ${A_MASK_TENSOR} KEY_BLOCK ${A_KEY_BLOCK}
                         QUERY_TILE ${A_QUERY_TILE} PATTERN ${A_PATTERN}
                         WINDOW_LEFT ${A_WINDOW_LEFT} WINDOW_RIGHT ${A_WINDOW_RIGHT}
                         STRIDE ${A_STRIDE} BLOCK ${A_BLOCK}
                         LOCAL ${A_LOCAL} GLOBAL_TOKENS ${A_GLOBAL_TOKENS} ${flags})
    set(tuning_file "${ATTNGEN_TUNING_DIR}/${arch}_${isa}.json")
    attngen_tuning_lookup(FILE "${tuning_file}" TARGET "${arch}_${isa}" CLASS "${class}"
                          OUT tunables FOUND found)
    if (EXISTS "${tuning_file}")
      set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${tuning_file}")
    endif ()
    if (found)
      set(tuning "${arch}_${isa}.json#${class}")
    endif ()
  endif ()
  string(REPLACE ";" " " KERNEL_TUNABLES "${tunables}")
  set(KERNEL_TUNING "${tuning}")
  # key_block and query_tile are generator params of the variant where it names them; a tuned
  # key_block replaces the default form's 0 (the descriptor keeps saying 0: the kernel still
  # serves the default form's calls), a tuned query_tile is the kernel's tile (the descriptor
  # says so: dispatch compares tiles).
  set(key_block ${A_KEY_BLOCK})
  set(query_tile ${A_QUERY_TILE})
  foreach (p IN LISTS tunables)
    foreach (param key_block query_tile)
      string(TOUPPER ${param} arg)
      if (param STREQUAL "query_tile" AND NOT A_OP STREQUAL "attention")
        continue()  # another op's own generator param
      endif ()
      if (p MATCHES "^${param}=(.*)$")
        if (A_${arg} GREATER 0 AND NOT CMAKE_MATCH_1 EQUAL A_${arg})
          message(FATAL_ERROR "attngen_add_kernel(${NAME}): TUNABLES ${p} contradicts ${arg} "
                              "${A_${arg}}")
        endif ()
        set(${param} ${CMAKE_MATCH_1})
        list(REMOVE_ITEM tunables "${p}")
      endif ()
    endforeach ()
  endforeach ()

  if (A_OP STREQUAL "attention")
    set(params head_dim_qk=${A_HEAD_DIM} head_dim_v=${A_HEAD_DIM_V} mask=${A_MASK}
               mask_tensor=${A_MASK_TENSOR} softcap=$<IF:${softcap},true,false>
               key_block=${key_block} query_tile=${query_tile} pattern=${A_PATTERN}
               window_left=${A_WINDOW_LEFT} window_right=${A_WINDOW_RIGHT} stride=${A_STRIDE}
               block=${A_BLOCK} local=${A_LOCAL} global_tokens=${A_GLOBAL_TOKENS}
               weights=$<IF:${weights},true,false> lse=$<IF:${lse},true,false>)
  elseif (A_OP STREQUAL "mha")
    set(params head_dim=${A_HEAD_DIM} mask=${A_MASK})
  elseif (A_OP STREQUAL "linear")
    set(params "")
  elseif (A_OP STREQUAL "decode")
    set(params head_dim_qk=${A_HEAD_DIM} head_dim_v=${A_HEAD_DIM_V} key_block=${A_KEY_BLOCK})
  else ()
    message(FATAL_ERROR "attngen_add_kernel(${NAME}): OP must be attention, linear, mha or decode")
  endif ()
  list(APPEND params ${tunables})

  _attngen_runtime_for(${isa} runtime)
  add_halide_library(${NAME} FROM ${ATTNGEN_GENERATOR}
                     GENERATOR ${A_OP}
                     FUNCTION_NAME ${NAME}
                     TARGETS ${halide_target}
                     FEATURES user_context
                     USE_RUNTIME ${runtime}
                     PARAMS ${params}
                     ASSEMBLY ${NAME}_asm
                     STMT ${NAME}_stmt)

  string(TOUPPER "${A_OP}" KERNEL_OP)
  string(TOUPPER "${A_MASK}" KERNEL_MASK)
  string(TOUPPER "${A_MASK_TENSOR}" KERNEL_MASK_TENSOR)
  set(KERNEL_NAME "${NAME}")
  set(KERNEL_ISA "${isa}")
  set(KERNEL_TARGET "${halide_target}")
  set(KERNEL_DQK ${A_HEAD_DIM})
  set(KERNEL_DV ${A_HEAD_DIM_V})
  set(KERNEL_SOFTCAP ${softcap})
  string(TOUPPER "${A_PATTERN}" KERNEL_PATTERN)
  set(KERNEL_WINDOW_LEFT ${A_WINDOW_LEFT})
  set(KERNEL_WINDOW_RIGHT ${A_WINDOW_RIGHT})
  set(KERNEL_STRIDE ${A_STRIDE})
  set(KERNEL_BLOCK ${A_BLOCK})
  set(KERNEL_LOCAL ${A_LOCAL})
  set(KERNEL_GLOBAL_TOKENS ${A_GLOBAL_TOKENS})
  set(KERNEL_WEIGHTS ${weights})
  set(KERNEL_LSE ${lse})
  set(KERNEL_KEY_BLOCK ${A_KEY_BLOCK})
  set(KERNEL_QUERY_TILE 0)
  if (A_OP STREQUAL "attention")
    set(KERNEL_QUERY_TILE ${query_tile})
  endif ()
  # Extra arguments of the generated function (attngen::glue::Feature).
  set(features 0)
  if (NOT A_MASK_TENSOR STREQUAL "none")
    math(EXPR features "${features} + 1")
  endif ()
  if (A_PATTERN STREQUAL "block_sparse")
    math(EXPR features "${features} + 2")
  endif ()
  math(EXPR features "${features} + 4 * ${weights} + 8 * ${lse}")
  if (isa STREQUAL "cuda")
    math(EXPR features "${features} + 16")
  endif ()
  set(KERNEL_FEATURES ${features})
  set(glue "${CMAKE_CURRENT_BINARY_DIR}/${NAME}.glue.cpp")
  configure_file("${CMAKE_CURRENT_FUNCTION_LIST_DIR}/kernel_glue.cpp.in" "${glue}" @ONLY)
  add_library(${NAME}_glue OBJECT "${glue}")
  target_link_libraries(${NAME}_glue PRIVATE ${ATTNGEN_HEADERS_TARGET} Halide::Runtime)
  add_dependencies(${NAME}_glue ${NAME}.update)
  target_include_directories(${NAME}_glue PRIVATE "${CMAKE_CURRENT_BINARY_DIR}")
  target_sources(${NAME} PRIVATE $<TARGET_OBJECTS:${NAME}_glue>)
  target_link_libraries(${NAME} INTERFACE ${ATTNGEN_HEADERS_TARGET})
  set_property(GLOBAL APPEND PROPERTY ATTNGEN_KERNELS ${NAME})
endfunction()

# Writes a C source defining `attngen_builtin_kernels`, a NULL-terminated table of the given
# kernels' descriptors: the runtime's dispatch table.
function(attngen_write_registry OUTPUT)
  set(decls "")
  set(entries "")
  foreach (k IN LISTS ARGN)
    string(APPEND decls "extern const attngen_kernel_info attngen_kernel_${k};\n")
    string(APPEND entries "    &attngen_kernel_${k},\n")
  endforeach ()
  file(CONFIGURE OUTPUT "${OUTPUT}" CONTENT
"/* Generated by attngen_write_registry() from generated/variants.cmake; do not edit. */
#include \"attngen/kernel.h\"

${decls}
const attngen_kernel_info* const attngen_builtin_kernels[] = {
${entries}    0,
};
" @ONLY)
endfunction()

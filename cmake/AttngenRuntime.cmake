# attngen_runtime_library(NAME [CORE] [SANITIZE] [FUZZ]): the C API runtime with the built-in
# kernel table. CORE builds it without the table (attngen_core): it links no kernel, and an app
# links the runtime plus the kernels it registers (examples/embedded). SANITIZE builds it with
# AddressSanitizer and UBSan (the kernels themselves are Halide-made objects and stay
# uninstrumented). FUZZ (clang only) adds libFuzzer's coverage instrumentation to the same
# sanitizers, for tests/fuzz.
#
# Every function and datum is a section of its own, so an app linked with --gc-sections keeps
# only the entry points it calls and what they reach.
set(ATTNGEN_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
                           -fno-omit-frame-pointer)

function(attngen_runtime_library NAME)
  cmake_parse_arguments(A "CORE;SANITIZE;FUZZ" "" "" ${ARGN})
  if (A_CORE)
    set(table "${PROJECT_SOURCE_DIR}/runtime/src/no_builtin_kernels.c")
    set(kernels "")
  else ()
    set(table "${ATTNGEN_REGISTRY_SOURCE}")
    set(kernels ${ATTNGEN_BUILTIN_KERNELS})
  endif ()
  add_library(${NAME} STATIC
              "${PROJECT_SOURCE_DIR}/runtime/src/allocator.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/api.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/convert.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/cpu_rates.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/decode.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/kv_cache.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/pattern.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/modifier.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/registry.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/rope.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/threads.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/validate.cpp"
              "${PROJECT_SOURCE_DIR}/runtime/src/weights.cpp"
              "${table}")
  target_include_directories(${NAME} PRIVATE "${PROJECT_SOURCE_DIR}")
  # Halide::Runtime only for its headers (the runtime's code is attngen_halide_runtime_*):
  # BUILD_INTERFACE keeps it out of the installed package, whose users need no Halide.
  target_compile_options(${NAME} PRIVATE -ffunction-sections -fdata-sections)
  if (ATTNGEN_SINGLE_THREADED)
    # No thread-safe statics either: their guards are the only locks left.
    target_compile_definitions(${NAME} PRIVATE ATTNGEN_SINGLE_THREADED=1)
    target_compile_options(${NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fno-threadsafe-statics>)
  endif ()
  if (ATTNGEN_CUDA AND ATTNGEN_GPU_API STREQUAL "opencl")
    # The cuda row's kernels are OpenCL ones (ATTNGEN_GPU_API): probe for an OpenCL device.
    target_compile_definitions(${NAME} PRIVATE ATTNGEN_GPU_OPENCL=1)
  endif ()
  if (A_CORE)
    target_compile_options(${NAME} PRIVATE -Os)
  endif ()
  target_link_libraries(${NAME} PUBLIC attngen_headers ${kernels}
                        PRIVATE $<BUILD_INTERFACE:Halide::Runtime> ${CMAKE_DL_LIBS})
  if (A_SANITIZE)
    target_compile_options(${NAME} PRIVATE ${ATTNGEN_SANITIZE_FLAGS})
    target_link_options(${NAME} INTERFACE -fsanitize=address,undefined)
  endif ()
  if (A_FUZZ)
    target_compile_options(${NAME} PRIVATE ${ATTNGEN_SANITIZE_FLAGS} -fsanitize=fuzzer-no-link)
    target_link_options(${NAME} INTERFACE -fsanitize=fuzzer,address,undefined)
  endif ()
endfunction()

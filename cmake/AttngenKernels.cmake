# attngen_add_kernel(): generate one attention kernel as a static library.
#
# Used by attngen itself (generated/variants.cmake) and by projects that
# find_package(attngen COMPONENTS generator) or add attngen's tree:
#
#   attngen_add_kernel(my_attn OP attention HEAD_DIM 96 MASK causal ISA avx512)
#   target_link_libraries(app PRIVATE my_attn attngen::attngen)
#   ... #include "my_attn.attngen.h"   attngen_register_my_attn();
#
# Each kernel comes with a header, <name>.attngen.h, on the include path of whoever links it,
# declaring its descriptor attngen_kernel_<name> and attngen_register_<name>() (C and C++).
#
# The arguments after the name are the kernel's variant (docs/variants.md lists every word:
# OP, DTYPE, HEAD_DIM, MASK, PATTERN, ..., ISA, TUNABLES, ONLY_ISAS). The variant model is C++
# (generator/variant.h): this file only passes the variant on and links what comes out. The
# model names the kernel, picks its Halide target and runtime, and takes its tunables from
# TUNABLES or else from the tuning file of its target (${ATTNGEN_TUNING_DIR}/<arch>_<isa>.json,
# schedules/tuned/README.md) unless ATTNGEN_USE_TUNING is OFF; the generator writes the kernel's
# descriptor (what the schedule resolved) next to its object.
#   NAME AUTO     the name the model derives: attn_f32_d64_causal__x86_64_avx512
#   NAME_VAR var  receives the kernel's name; "" when ONLY_ISAS leaves this ISA out
#   AUTO_REGISTER registers the kernel when the program starts (a static initializer linked into
#                 every target that links the kernel); attngen_register_<name>() then returns
#                 ATTNGEN_OK, or the registration's error again
#   GENERATOR gen generates the kernel (and writes its descriptor) with gen, a generator made by
#                 attngen_add_generator(), instead of attngen's: for a variant whose MODIFIER is
#                 one of gen's own
#
# attngen_add_generator(NAME SOURCES file.cpp ...): an executable generator made of attngen's
# generator (its objects: the algorithm, the schedules, the library's modifiers, Halide's driver
# with its main()) and the given sources, which define modifiers of their own (ATTNGEN_MODIFIER,
# generator/modifier.h; docs/variants.md, "A modifier of your own"). Needs
# find_package(attngen COMPONENTS modifiers), or attngen's tree in a host build.
include_guard(GLOBAL)

# Tuning files: schedules/tuned in attngen's tree, tuned/ next to this file when installed.
if (EXISTS "${CMAKE_CURRENT_LIST_DIR}/../schedules/tuned")
  get_filename_component(_attngen_tuning_dir "${CMAKE_CURRENT_LIST_DIR}/../schedules/tuned"
                         ABSOLUTE)
else ()
  set(_attngen_tuning_dir "${CMAKE_CURRENT_LIST_DIR}/tuned")
endif ()
set(ATTNGEN_TUNING_DIR "${_attngen_tuning_dir}" CACHE PATH
    "Directory of the tuning files (<arch>_<isa>.json) that attngen_add_kernel() reads")
set(_attngen_source_dir "${CMAKE_CURRENT_LIST_DIR}/..")

# The command that answers the variant model's questions at configure time
# (generator/variant_cli.h): ATTNGEN_VARIANT_TOOL where set (the installed or host generator),
# else the model's sources compiled now, before the generator exists.
function(_attngen_variant_tool OUT)
  if (ATTNGEN_VARIANT_TOOL)
    set(${OUT} "${ATTNGEN_VARIANT_TOOL}" PARENT_SCOPE)
    return()
  endif ()
  set(sources generator/variant.cpp generator/variant_cli.cpp generator/tuning_file.cpp
              generator/variant_tool.cpp)
  set(hash "")
  foreach (s IN LISTS sources ITEMS generator/variant.h generator/variant_cli.h
           generator/tuning_file.h core/dtype.h core/pattern.h core/targets.h core/tunables.h
           core/cpu_features.h runtime/include/attngen/dtype.h)
    file(SHA256 "${_attngen_source_dir}/${s}" h)
    string(APPEND hash "${h}")
    set_property(DIRECTORY "${CMAKE_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
                 "${_attngen_source_dir}/${s}")
  endforeach ()
  string(SHA256 hash "${hash}")
  set(tool "${CMAKE_BINARY_DIR}/attngen_variant_tool")
  if (NOT EXISTS "${tool}" OR NOT "${hash}" STREQUAL "${_ATTNGEN_VARIANT_TOOL_HASH}")
    list(TRANSFORM sources PREPEND "${_attngen_source_dir}/")
    try_compile(ok "${CMAKE_BINARY_DIR}/attngen_variant_tool.dir" SOURCES ${sources}
                CMAKE_FLAGS
                  "-DINCLUDE_DIRECTORIES=${_attngen_source_dir};${_attngen_source_dir}/runtime/include"
                CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                OUTPUT_VARIABLE log COPY_FILE "${tool}")
    if (NOT ok)
      message(FATAL_ERROR "attngen: could not build the variant tool:\n${log}")
    endif ()
    set(_ATTNGEN_VARIANT_TOOL_HASH "${hash}" CACHE INTERNAL "")
  endif ()
  set(${OUT} "${tool}" PARENT_SCOPE)
endfunction()

# Runs a mode of the variant tool and evaluates the CMake code it prints (ATTNGEN_V_*).
macro(_attngen_variant_ask MODE)
  _attngen_variant_tool(_attngen_tool)
  set(_attngen_opts "")
  if (CMAKE_CROSSCOMPILING)
    list(APPEND _attngen_opts --cross "${CMAKE_SYSTEM_PROCESSOR}")
  endif ()
  if (ATTNGEN_CUDA)
    list(APPEND _attngen_opts --cuda-runtime)
    if (ATTNGEN_GPU_API STREQUAL "opencl")
      list(APPEND _attngen_opts --gpu-api opencl)
    endif ()
  endif ()
  execute_process(COMMAND "${_attngen_tool}" ${MODE} ${_attngen_opts} ${ARGN}
                  RESULT_VARIABLE _attngen_rc
                  OUTPUT_VARIABLE _attngen_out ERROR_VARIABLE _attngen_err)
  if (NOT _attngen_rc EQUAL 0)
    message(FATAL_ERROR "${_attngen_err}")
  endif ()
  cmake_language(EVAL CODE "${_attngen_out}")
endmacro()

# The ISAs a build of this architecture makes its variants for (the target table's).
function(attngen_default_isas OUT)
  _attngen_variant_ask(--variant-isas)
  set(${OUT} "${ATTNGEN_V_ISAS}" PARENT_SCOPE)
endfunction()

# The name the variant model gives a variant's kernel (NAME AUTO), e.g. for a target that links
# one: attngen_kernel_name(name OP attention HEAD_DIM 64 ISA cuda).
function(attngen_kernel_name OUT)
  _attngen_variant_ask(--variant-cmake -- ${ARGN})
  set(${OUT} "${ATTNGEN_V_NAME}" PARENT_SCOPE)
endfunction()

# The Halide runtime shared by every kernel of one architecture (one per build).
function(_attngen_runtime NAME TARGET)
  if (TARGET ${NAME} OR TARGET attngen::${NAME})
    return()
  endif ()
  set(obj "${CMAKE_CURRENT_BINARY_DIR}/${NAME}.o")
  # Single-threaded builds (ATTNGEN_SINGLE_THREADED): Halide's runtime for no OS, whose parallel
  # loops run serially and which needs neither pthreads nor dlopen; the runtime library
  # provides its halide_malloc, halide_free, halide_error and halide_print.
  if (ATTNGEN_SINGLE_THREADED)
    string(REGEX REPLACE "-(linux|android|osx|windows)" "-noos" TARGET "${TARGET}")
  endif ()
  add_custom_command(OUTPUT "${obj}"
                     COMMAND ${ATTNGEN_GENERATOR} -r ${NAME} -o "${CMAKE_CURRENT_BINARY_DIR}"
                             -e object target=${TARGET}-user_context
                     DEPENDS ${ATTNGEN_GENERATOR}
                     COMMENT "Generating the Halide runtime for ${TARGET}"
                     VERBATIM)
  add_library(${NAME} STATIC "${obj}")
  set_target_properties(${NAME} PROPERTIES LINKER_LANGUAGE CXX)
  if (NOT ATTNGEN_SINGLE_THREADED)
    find_package(Threads REQUIRED)
    target_link_libraries(${NAME} INTERFACE Threads::Threads ${CMAKE_DL_LIBS})
  endif ()
  set_property(GLOBAL APPEND PROPERTY ATTNGEN_HALIDE_RUNTIMES ${NAME})
endfunction()

# <name>.attngen.h, in the kernel's build directory (next to Halide's <name>.h) and on the
# include path of whoever links the kernel: its descriptor and a one-call registration.
function(_attngen_kernel_header NAME VARIANT)
  string(TOUPPER "${NAME}" guard)
  file(CONFIGURE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/${NAME}.attngen.h" CONTENT
"/* Generated by attngen_add_kernel(@NAME@); do not edit.
 * Variant: @VARIANT@ */
#ifndef ATTNGEN_KERNEL_@guard@_ATTNGEN_H_
#define ATTNGEN_KERNEL_@guard@_ATTNGEN_H_

#include \"attngen/kernel.h\"

#ifdef __cplusplus
extern \"C\" {
#endif

/* The kernel's descriptor (written by the generator, runtime/include/attngen/kernel.h). */
extern const attngen_kernel_info attngen_kernel_@NAME@;

/* Registers the kernel with the runtime, which from then on dispatches to it. ATTNGEN_OK also
 * when it is registered already (an earlier call, AUTO_REGISTER); else the status of
 * attngen_register_kernel(), e.g. ATTNGEN_ERROR_ABI (attngen_last_error() says why). */
static inline attngen_status attngen_register_@NAME@(void) {
  if (attngen_find_kernel(attngen_kernel_@NAME@.name) == &attngen_kernel_@NAME@) {
    return ATTNGEN_OK;
  }
  return attngen_register_kernel(&attngen_kernel_@NAME@);
}

#ifdef __cplusplus
} /* extern \"C\" */
#endif

#endif /* ATTNGEN_KERNEL_@guard@_ATTNGEN_H_ */
" @ONLY)
  target_include_directories(${NAME} INTERFACE "$<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}>")
endfunction()

# AUTO_REGISTER: a static initializer that registers the kernel. It is an object library whose
# object goes on the link line of every target that links the kernel: inside the kernel's
# archive nothing would reference it and the linker would drop it.
function(_attngen_auto_register NAME)
  set(source "${CMAKE_CURRENT_BINARY_DIR}/${NAME}.register.cpp")
  file(CONFIGURE OUTPUT "${source}" CONTENT
"// Generated by attngen_add_kernel(@NAME@ AUTO_REGISTER); do not edit.
#include \"@NAME@.attngen.h\"

namespace {
// A failure is not lost: attngen_register_@NAME@() returns it again.
const attngen_status registered = attngen_register_@NAME@();
}  // namespace
" @ONLY)
  add_library(${NAME}_register OBJECT "${source}")
  target_include_directories(${NAME}_register PRIVATE "${CMAKE_CURRENT_BINARY_DIR}")
  target_link_libraries(${NAME}_register PRIVATE ${ATTNGEN_HEADERS_TARGET})
  target_link_libraries(${NAME} INTERFACE $<TARGET_OBJECTS:${NAME}_register>)
endfunction()

# Each kernel's lowered Halide statement (NAME.stmt) is for reading a schedule's loops, and its
# assembly (NAME.s, with LLVM's loop and spill comments: bench/arm_loops.py) for reading its code;
# writing them took up to a third and a fifth of a small kernel's generation, so they are asked
# for (-DATTNGEN_KERNEL_STMT=ON, -DATTNGEN_KERNEL_ASM=ON, or one kernel by the generator's
# command line: docs/variants.md). The assembly tests disassemble the objects instead.
option(ATTNGEN_KERNEL_STMT "Write each kernel's Halide statement (.stmt) for inspection" OFF)
option(ATTNGEN_KERNEL_ASM "Write each kernel's assembly (.s) for inspection" OFF)

# ATTNGEN_KERNELS_FROM: another build tree of this architecture whose kernels, made by the same
# generator from the same variants and tuning files, this tree links instead of generating them
# again (the embedded tree takes the aarch64 tree's, the fuzz tree the ci tree's: CMakePresets.json;
# that tree is built first). A kernel it lacks is generated here as usual.
set(ATTNGEN_KERNELS_FROM "" CACHE PATH
    "A build tree of the same architecture and generator whose generated kernels this one copies")

# The kernel NAME as the tree ATTNGEN_KERNELS_FROM generated it (the same directory relative to
# its top), copied rather than generated, in the targets add_halide_library() would make:
# NAME (its code, its header on the include path, linking RUNTIME) and NAME.update. Its code is
# the object add_halide_library() makes, or the static library it makes where Halide takes the
# build for a cross build. OUT is set to TRUE, or FALSE where that tree has no such kernel.
function(_attngen_copied_kernel NAME RUNTIME OUT)
  set(${OUT} FALSE PARENT_SCOPE)
  if (NOT ATTNGEN_KERNELS_FROM)
    return()
  endif ()
  file(RELATIVE_PATH dir "${CMAKE_BINARY_DIR}" "${CMAKE_CURRENT_BINARY_DIR}")
  set(from "${ATTNGEN_KERNELS_FROM}/${dir}")
  set(code "${NAME}${CMAKE_C_OUTPUT_EXTENSION}")
  if (NOT EXISTS "${from}/${code}")
    set(code "${NAME}${CMAKE_STATIC_LIBRARY_SUFFIX}")
  endif ()
  set(sources "")
  set(outputs "")
  foreach (f IN ITEMS "${code}" "${NAME}.h")
    if (NOT EXISTS "${from}/${f}")
      return()
    endif ()
    list(APPEND sources "${from}/${f}")
    list(APPEND outputs "${CMAKE_CURRENT_BINARY_DIR}/${f}")
  endforeach ()
  foreach (f IN ITEMS "${NAME}.s" "${NAME}.stmt")  # where that tree wrote them
    if (EXISTS "${from}/${f}")
      list(APPEND sources "${from}/${f}")
      list(APPEND outputs "${CMAKE_CURRENT_BINARY_DIR}/${f}")
    endif ()
  endforeach ()
  add_custom_command(OUTPUT ${outputs}
                     COMMAND ${CMAKE_COMMAND} -E copy ${sources} "${CMAKE_CURRENT_BINARY_DIR}"
                     DEPENDS ${sources}
                     COMMENT "Copying ${NAME} from ${from}"
                     VERBATIM)
  add_custom_target(${NAME}.update ALL DEPENDS ${outputs})
  list(GET outputs 0 code)
  if (code MATCHES "${CMAKE_STATIC_LIBRARY_SUFFIX}$")
    add_library(${NAME} STATIC IMPORTED GLOBAL)
    set_target_properties(${NAME} PROPERTIES IMPORTED_LOCATION "${code}")
  else ()
    add_library(${NAME} STATIC "${code}")
    set_target_properties(${NAME} PROPERTIES POSITION_INDEPENDENT_CODE ON LINKER_LANGUAGE CXX)
  endif ()
  add_dependencies(${NAME} ${NAME}.update)
  target_include_directories(${NAME} INTERFACE "$<BUILD_INTERFACE:${CMAKE_CURRENT_BINARY_DIR}>")
  target_link_libraries(${NAME} INTERFACE "${RUNTIME}")
  set(${OUT} TRUE PARENT_SCOPE)
endfunction()

function(attngen_add_kernel NAME)
  # What is left after the CMake-only keywords is the variant, for the variant model.
  cmake_parse_arguments(A "AUTO_REGISTER" "NAME_VAR;GENERATOR" "" ${ARGN})
  # Called from a project that added attngen's tree with add_subdirectory (how a cross build
  # makes its own kernels): attngen's targets. The installed package sets both.
  if (A_GENERATOR)
    if (NOT TARGET ${A_GENERATOR})
      message(FATAL_ERROR "attngen_add_kernel(${NAME}): GENERATOR ${A_GENERATOR} is not a target "
                          "(make it with attngen_add_generator())")
    endif ()
    set(ATTNGEN_GENERATOR ${A_GENERATOR})
  elseif (NOT ATTNGEN_GENERATOR)
    set(ATTNGEN_GENERATOR attngen::generator)
  endif ()
  if (NOT ATTNGEN_HEADERS_TARGET)
    set(ATTNGEN_HEADERS_TARGET attngen::headers)
  endif ()
  set(tuning "")
  if (NOT DEFINED ATTNGEN_USE_TUNING OR ATTNGEN_USE_TUNING)
    set(tuning --tuning-dir "${ATTNGEN_TUNING_DIR}")
  endif ()
  _attngen_variant_ask(--variant-cmake ${tuning} -- ${A_UNPARSED_ARGUMENTS})
  if (ATTNGEN_V_TUNING_FILE)
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${ATTNGEN_V_TUNING_FILE}")
  endif ()
  if (NAME STREQUAL "AUTO")
    set(NAME "${ATTNGEN_V_NAME}")
  endif ()
  if (A_NAME_VAR)
    set(${A_NAME_VAR} "${NAME}" PARENT_SCOPE)
    if (ATTNGEN_V_SKIP)
      set(${A_NAME_VAR} "" PARENT_SCOPE)
    endif ()
  endif ()
  if (ATTNGEN_V_SKIP)
    return()
  endif ()

  set(runtime ${ATTNGEN_V_RUNTIME})
  if (TARGET attngen::${runtime})  # from an installed attngen (find_package)
    set(runtime attngen::${runtime})
  else ()
    _attngen_runtime(${runtime} ${ATTNGEN_V_RUNTIME_TARGET})
  endif ()
  _attngen_copied_kernel(${NAME} ${runtime} copied)
  if (NOT copied)
    # The GPU kernels' statements always: tests/cuda reads their shared memory there.
    set(stmt "")
    if (ATTNGEN_KERNEL_STMT OR ATTNGEN_V_ISA STREQUAL "cuda")
      set(stmt STMT ${NAME}_stmt)
    endif ()
    set(assembly "")
    if (ATTNGEN_KERNEL_ASM)
      set(assembly ASSEMBLY ${NAME}_asm)
    endif ()
    add_halide_library(${NAME} FROM ${ATTNGEN_GENERATOR}
                       GENERATOR ${ATTNGEN_V_GENERATOR}
                       FUNCTION_NAME ${NAME}
                       TARGETS ${ATTNGEN_V_HALIDE_TARGET}
                       FEATURES user_context
                       USE_RUNTIME ${runtime}
                       PARAMS "variant=${ATTNGEN_V_VARIANT}"
                       ${assembly} ${stmt})
    set_property(GLOBAL APPEND PROPERTY ATTNGEN_KERNELS_GENERATED_HERE ${NAME})
  endif ()

  # The descriptor, written by the generator from the same variant: what the kernel does.
  set(descriptor "${CMAKE_CURRENT_BINARY_DIR}/${NAME}.descriptor.cpp")
  set(source "${ATTNGEN_V_TUNING}")
  if (NOT source)
    set(source "-")
  endif ()
  add_custom_command(OUTPUT "${descriptor}"
                     COMMAND ${ATTNGEN_GENERATOR} --descriptor "${descriptor}" ${ATTNGEN_V_ISA}
                             ${ATTNGEN_V_HALIDE_TARGET} "${source}" -- "${ATTNGEN_V_VARIANT}"
                     DEPENDS ${ATTNGEN_GENERATOR}
                     COMMENT "Describing ${NAME}"
                     VERBATIM)
  add_library(${NAME}_glue OBJECT "${descriptor}")
  target_link_libraries(${NAME}_glue PRIVATE ${ATTNGEN_HEADERS_TARGET} Halide::Runtime)
  add_dependencies(${NAME}_glue ${NAME}.update)
  target_include_directories(${NAME}_glue PRIVATE "${CMAKE_CURRENT_BINARY_DIR}")
  target_sources(${NAME} PRIVATE $<TARGET_OBJECTS:${NAME}_glue>)
  target_link_libraries(${NAME} INTERFACE ${ATTNGEN_HEADERS_TARGET})
  _attngen_kernel_header(${NAME} "${ATTNGEN_V_VARIANT}")
  if (A_AUTO_REGISTER)
    _attngen_auto_register(${NAME})
  endif ()
  set_property(GLOBAL APPEND PROPERTY ATTNGEN_KERNELS ${NAME})
  # For the assembly tests (tests/CMakeLists.txt): what the ISA's code must contain.
  set_property(GLOBAL PROPERTY ATTNGEN_KERNEL_ASM_${NAME} "${ATTNGEN_V_ASM_SIGNATURE}")
  set_property(GLOBAL PROPERTY ATTNGEN_KERNEL_ASM_FORBIDDEN_${NAME} "${ATTNGEN_V_ASM_FORBIDDEN}")
endfunction()

function(attngen_add_generator NAME)
  cmake_parse_arguments(A "" "" "SOURCES" ${ARGN})
  if (NOT ATTNGEN_GENERATOR_OBJECTS)
    message(FATAL_ERROR "attngen_add_generator(${NAME}) needs find_package(attngen COMPONENTS "
                        "modifiers), which needs Halide 14's package (libHalide and LLVM)")
  endif ()
  if (NOT A_SOURCES OR A_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attngen_add_generator(${NAME} SOURCES file.cpp ...): the modifiers' "
                        "sources (given: ${ARGN})")
  endif ()
  add_executable(${NAME} ${A_SOURCES})
  target_link_libraries(${NAME} PRIVATE ${ATTNGEN_GENERATOR_OBJECTS})
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

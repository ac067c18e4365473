# Checks that the generated code of a kernel uses the ISA it was generated for: SIGNATURE is the
# target table's instruction pattern for the ISA (core/targets.h, e.g. zmm FMAs), a list when the
# kernel must show more than one (f16 read with vcvtph2ps: generator/variant_cli.cpp), and
# FORBIDDEN (optional) instructions its CPU check does not cover. The code is read disassembled
# from the kernel's object (the toolchain's objdump), not from an assembly file the generator
# would have to write for every kernel (ATTNGEN_KERNEL_ASM).
#   cmake -DOBJDUMP=<objdump> -DCODE=<kernel.o> "-DSIGNATURE=<regex>" ["-DFORBIDDEN=<regex>"]
#         -P check_asm.cmake
execute_process(COMMAND "${OBJDUMP}" -d --no-show-raw-insn "${CODE}" OUTPUT_VARIABLE text
                RESULT_VARIABLE failed ERROR_VARIABLE error)
if (failed)
  message(FATAL_ERROR "${OBJDUMP} -d ${CODE}: ${error}")
endif ()
if (FORBIDDEN)
  string(REGEX MATCHALL "${FORBIDDEN}" bad "${text}")
  list(LENGTH bad n_bad)
  if (n_bad GREATER 0)
    list(GET bad 0 first)
    message(FATAL_ERROR "${CODE}: ${n_bad} instructions matching '${FORBIDDEN}' (first: ${first}), "
                        "which the ISA's CPU check does not cover")
  endif ()
endif ()
if (NOT SIGNATURE)
  message(STATUS "${CODE}: the target table has no instruction signature for this ISA")
  return()
endif ()
foreach (pattern IN LISTS SIGNATURE)
  string(REGEX MATCHALL "${pattern}" hits "${text}")
  list(LENGTH hits n)
  if (n EQUAL 0)
    message(FATAL_ERROR "${CODE}: no '${pattern}' instruction; the kernel does not use its ISA "
                        "as it should")
  endif ()
  message(STATUS "${CODE}: ${n} instructions matching '${pattern}'")
endforeach ()

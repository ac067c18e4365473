# Checks that the generated assembly of a kernel uses the ISA it was generated for: SIGNATURE is
# the target table's instruction pattern for the ISA (schedules/targets.h, e.g. zmm FMAs).
#   cmake -DASM=<file.s> "-DSIGNATURE=<regex>" -P check_asm.cmake
file(READ "${ASM}" text)
if (NOT SIGNATURE)
  message(STATUS "${ASM}: the target table has no instruction signature for this ISA")
  return()
endif ()
string(REGEX MATCHALL "${SIGNATURE}" hits "${text}")
list(LENGTH hits n)
if (n EQUAL 0)
  message(FATAL_ERROR "${ASM}: no '${SIGNATURE}' instruction; the schedule did not vectorise "
                      "for its ISA")
endif ()
message(STATUS "${ASM}: ${n} instructions matching '${SIGNATURE}'")

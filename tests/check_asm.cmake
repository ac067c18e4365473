# Checks that the generated assembly of a kernel uses the ISA it was generated for: SIGNATURE is
# the target table's instruction pattern for the ISA (schedules/targets.h, e.g. zmm FMAs), and
# FORBIDDEN (optional) instructions its CPU check does not cover.
#   cmake -DASM=<file.s> "-DSIGNATURE=<regex>" ["-DFORBIDDEN=<regex>"] -P check_asm.cmake
file(READ "${ASM}" text)
if (FORBIDDEN)
  string(REGEX MATCHALL "${FORBIDDEN}" bad "${text}")
  list(LENGTH bad n_bad)
  if (n_bad GREATER 0)
    list(GET bad 0 first)
    message(FATAL_ERROR "${ASM}: ${n_bad} instructions matching '${FORBIDDEN}' (first: ${first}), "
                        "which the ISA's CPU check does not cover")
  endif ()
endif ()
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

# cmake -DNM=<nm> -DAPP=<executable> -DFORBIDDEN=<regex> -P no_symbols.cmake
# Fails if the executable's symbol table has a symbol whose whole name matches FORBIDDEN, e.g. the single-
# threaded embedded app must link no thread creation (pthread_create).
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND "${NM}" "${APP}" RESULT_VARIABLE rc OUTPUT_VARIABLE symbols
                ERROR_VARIABLE err)
if (NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} ${APP} failed: ${err}")
endif ()
string(REGEX MATCHALL "[^\n]* (${FORBIDDEN})\n" found "${symbols}\n")
string(LENGTH "${symbols}" length)
if (found)
  list(JOIN found "\n" found)
  message(FATAL_ERROR "${APP} names symbols matching '${FORBIDDEN}':\n${found}")
endif ()
message("${APP}: no symbol matches '${FORBIDDEN}' (${length} bytes of nm output)")

# cmake --install: headers, the runtime with its built-in kernels, the generator, the command-line
# tool, the generator's objects and a CMake package. find_package(attngen) links the runtime (no
# Halide needed); find_package(attngen COMPONENTS generator) also generates kernels with
# attngen_add_kernel(); COMPONENTS modifiers also builds generators with modifiers of the
# consumer's own (attngen_add_generator()) from the generator's objects and the headers a modifier
# includes (examples/consumer_prebuilt, examples/consumer, examples/custom_modifier;
# cmake/attngenConfig.cmake.in).
#
# cmake --install builds nothing, so the target attngen_package builds everything installed here
# (tools/demo.sh builds it with the demo), and the install stops with that advice, naming what is
# missing, instead of failing halfway on the first unbuilt file.
include(CMakePackageConfigHelpers)
set(ATTNGEN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/attngen")

get_property(attngen_runtimes GLOBAL PROPERTY ATTNGEN_HALIDE_RUNTIMES)
set(attngen_built_targets attngen attngen_core attngen_generator ${ATTNGEN_BUILTIN_KERNELS} ${attngen_runtimes})
set(attngen_tool_targets "")
if (TARGET attngen_cli)
  set(attngen_tool_targets attngen_cli)
endif ()

add_custom_target(attngen_package)
add_dependencies(attngen_package ${attngen_built_targets} ${attngen_tool_targets})

set(attngen_installed_files "")
foreach (t IN LISTS attngen_built_targets attngen_tool_targets)
  list(APPEND attngen_installed_files "$<TARGET_FILE:${t}>")
endforeach ()
install(CODE "
  set(missing \"\")
  foreach (f IN ITEMS \"$<JOIN:${attngen_installed_files},\" \">\")
    if (NOT EXISTS \"\${f}\")
      string(APPEND missing \"\\n  \${f}\")
    endif ()
  endforeach ()
  if (missing)
    message(FATAL_ERROR \"attngen: not built:\${missing}\\n\"
            \"cmake --build ${PROJECT_BINARY_DIR} --target attngen_package \"
            \"builds everything that cmake --install installs.\")
  endif ()
")

install(TARGETS attngen attngen_core attngen_headers attngen_generator ${ATTNGEN_BUILTIN_KERNELS}
                ${attngen_runtimes}
        EXPORT attngenTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
if (attngen_tool_targets)
  install(TARGETS ${attngen_tool_targets} RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif ()
install(DIRECTORY runtime/include/attngen DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT attngenTargets NAMESPACE attngen:: DESTINATION "${ATTNGEN_INSTALL_CMAKEDIR}")

# The generator's objects in an export set of their own, loaded only by COMPONENTS modifiers:
# they need Halide's whole package (libHalide, LLVM), which the other components do not.
install(TARGETS attngen_generator_objects
        EXPORT attngenGeneratorTargets
        OBJECTS DESTINATION "${CMAKE_INSTALL_LIBDIR}/attngen/generator")
install(EXPORT attngenGeneratorTargets NAMESPACE attngen::
        DESTINATION "${ATTNGEN_INSTALL_CMAKEDIR}")
# What a modifier's source includes: generator/modifier.h and the Halide-free vocabulary under it
# (attngen/dtype.h is the runtime's, installed above).
install(FILES generator/modifier.h
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/attngen-generator/generator")
install(FILES core/modifier.h core/dtype.h
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/attngen-generator/core")
configure_package_config_file(cmake/attngenConfig.cmake.in
                              "${PROJECT_BINARY_DIR}/attngenConfig.cmake"
                              INSTALL_DESTINATION "${ATTNGEN_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/attngenConfigVersion.cmake"
                                 COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/attngenConfig.cmake"
              "${PROJECT_BINARY_DIR}/attngenConfigVersion.cmake"
              cmake/AttngenKernels.cmake
        DESTINATION "${ATTNGEN_INSTALL_CMAKEDIR}")
# The tuning files, so that a consumer's kernels of a tuned shape class get the tuned schedule.
install(DIRECTORY schedules/tuned/ DESTINATION "${ATTNGEN_INSTALL_CMAKEDIR}/tuned"
        FILES_MATCHING PATTERN "*.json")

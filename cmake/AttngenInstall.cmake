# cmake --install: headers, the runtime with its built-in kernels, the generator and a CMake
# package, so that another project can find_package(attngen) and generate its own kernels with
# attngen_add_kernel() (see examples/consumer).
include(CMakePackageConfigHelpers)
set(ATTNGEN_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/attngen")

get_property(attngen_runtimes GLOBAL PROPERTY ATTNGEN_HALIDE_RUNTIMES)
install(TARGETS attngen attngen_headers attngen_generator ${ATTNGEN_BUILTIN_KERNELS}
                ${attngen_runtimes}
        EXPORT attngenTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
        RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(DIRECTORY runtime/include/attngen DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT attngenTargets NAMESPACE attngen:: DESTINATION "${ATTNGEN_INSTALL_CMAKEDIR}")
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

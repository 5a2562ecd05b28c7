# Packaging: `cmake --install` puts the public headers, the static libraries, the two
# executables and an exported target set with coagentConfig.cmake (+ version file) under the
# prefix, so a consumer needs only
#     find_package(coagent REQUIRED)
#     target_link_libraries(app PRIVATE coagent::coagent)
# coagent::coagent is an INTERFACE umbrella over coagent::runtime … coagent::modes (it also
# asks for C++20). Nothing else is required of a consumer: no compile definitions, no
# include paths; the config re-finds the dependencies the static libraries link.
# Included by the top-level CMakeLists.txt after every library folder was added.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# folder libraries in dependency order (runtime ← classify ← retry ← session ← telemetry,
# providers ← modes)
set(COAGENT_PUBLIC_LIBRARIES runtime classify retry session telemetry providers modes)

# The umbrella (the name `coagent` itself belongs to the executable).
add_library(coagent_all INTERFACE)
add_library(coagent::coagent ALIAS coagent_all)
set_target_properties(coagent_all PROPERTIES EXPORT_NAME coagent)
target_compile_features(coagent_all INTERFACE cxx_std_20)
foreach(lib IN LISTS COAGENT_PUBLIC_LIBRARIES)
  target_link_libraries(coagent_all INTERFACE coagent::${lib})
endforeach()

# Exported as coagent::<name>, the same names the build tree's ALIAS targets use.
set(COAGENT_EXPORTED_TARGETS coagent_all)
foreach(lib IN LISTS COAGENT_PUBLIC_LIBRARIES ITEMS fakellm)
  set_target_properties(coagent_${lib} PROPERTIES EXPORT_NAME ${lib})
  target_compile_features(coagent_${lib} PUBLIC cxx_std_20)
  list(APPEND COAGENT_EXPORTED_TARGETS coagent_${lib})
endforeach()

if(NOT COAGENT_INSTALL)
  return()
endif()

set(COAGENT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/coagent)

install(TARGETS ${COAGENT_EXPORTED_TARGETS} EXPORT coagentTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS coagent coagent-fakellm RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir IN LISTS COAGENT_PUBLIC_LIBRARIES)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
    FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
endforeach()

install(EXPORT coagentTargets NAMESPACE coagent:: DESTINATION ${COAGENT_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/coagentConfig.cmake.in
  ${PROJECT_BINARY_DIR}/coagentConfig.cmake INSTALL_DESTINATION ${COAGENT_CMAKE_DIR})
# 0.x: a new minor version may break the API, so only the same minor version is compatible
write_basic_package_version_file(${PROJECT_BINARY_DIR}/coagentConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/coagentConfig.cmake ${PROJECT_BINARY_DIR}/coagentConfigVersion.cmake
  DESTINATION ${COAGENT_CMAKE_DIR})
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/coagent OPTIONAL)

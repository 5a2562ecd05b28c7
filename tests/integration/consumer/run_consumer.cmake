# Driver of the ctest tests install_consumer and subdirectory_consumer (cmake -P).
#   MODE=install: `cmake --install BUILD_DIR --prefix WORK_DIR/prefix`, then configure, build and
#                 run tests/integration/consumer against that prefix (find_package(coagent)).
#   MODE=subdir:  configure, build and run tests/integration/consumer_subdir (add_subdirectory of
#                 SOURCE_DIR); its build dir is kept between runs, so a rerun is incremental.
# Other inputs: SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, BUILD_TYPE, and CXX_FLAGS /
# LINK_FLAGS (install mode: the sanitizer flags of the installed libraries, which consumers
# must link with too).
cmake_minimum_required(VERSION 3.25)

function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "> ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${shown}")
  endif()
endfunction()

set(configure_args -G "${GENERATOR}" -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
  "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}")

if(MODE STREQUAL "install")
  set(prefix ${WORK_DIR}/prefix)
  set(build ${WORK_DIR}/build)
  file(REMOVE_RECURSE ${WORK_DIR})
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
  foreach(f lib/cmake/coagent/coagentConfig.cmake lib/cmake/coagent/coagentConfigVersion.cmake
            lib/cmake/coagent/coagentTargets.cmake include/coagent/session/agent_session.hpp
            include/coagent/runtime/event.hpp lib/libcoagent_runtime.a lib/libcoagent_modes.a bin/coagent)
    if(NOT EXISTS ${prefix}/${f})
      message(FATAL_ERROR "not installed: ${f}")
    endif()
  endforeach()
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/integration/consumer -B ${build} ${configure_args}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
  # the package found must be the one just installed
  file(STRINGS ${build}/CMakeCache.txt found REGEX "^coagent_DIR:")
  string(FIND "${found}" "${prefix}/" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "find_package(coagent) found another package: ${found}")
  endif()
  run(${CMAKE_COMMAND} --build ${build} -j2)
  run(${build}/consumer)
elseif(MODE STREQUAL "subdir")
  set(build ${WORK_DIR}/build)
  # this builds coagent's libraries from source: no debug info keeps that quick
  run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/integration/consumer_subdir -B ${build} ${configure_args}
      -DCMAKE_CXX_FLAGS_DEBUG=-g0 -DCOAGENT_SOURCE_DIR=${SOURCE_DIR})
  run(${CMAKE_COMMAND} --build ${build} -j2 --target consumer)
  run(${build}/consumer)
else()
  message(FATAL_ERROR "MODE must be install or subdir")
endif()

# Warning flags for every coagent target: coagent_warnings(<target>)
function(coagent_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic)
  if(COAGENT_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# coagent_library(<name> SOURCES ... DEPS ...): one folder = one library coagent::<name>
function(coagent_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(coagent_${name} ${ARG_SOURCES})
  add_library(coagent::${name} ALIAS coagent_${name})
  target_include_directories(coagent_${name} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:include>)
  target_link_libraries(coagent_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  coagent_warnings(coagent_${name})
endfunction()

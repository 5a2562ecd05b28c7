# `cmake --build <dir> --target docs`: the API reference from the public headers (Doxygen,
# Debian's `doxygen`), written to <build>/docs/api/html. Not part of ALL; defined only when
# doxygen is found. docs/Doxyfile is usable by hand too (see its header).
find_program(COAGENT_DOXYGEN doxygen)
if(COAGENT_DOXYGEN AND PROJECT_IS_TOP_LEVEL)
  add_custom_target(docs
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/docs/api
    COMMAND ${CMAKE_COMMAND} -E env COAGENT_DOCS_OUT=${PROJECT_BINARY_DIR}/docs/api
            COAGENT_VERSION=${PROJECT_VERSION} ${COAGENT_DOXYGEN} docs/Doxyfile
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "Doxygen: API reference in ${PROJECT_BINARY_DIR}/docs/api/html/index.html"
    VERBATIM)
endif()

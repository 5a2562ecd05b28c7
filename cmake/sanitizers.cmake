# COAGENT_SANITIZE=address,undefined adds the sanitizers to every target (compile and link).
if(COAGENT_SANITIZE)
  add_compile_options(-fsanitize=${COAGENT_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${COAGENT_SANITIZE} -fno-sanitize-recover=all)
endif()

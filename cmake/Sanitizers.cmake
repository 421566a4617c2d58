# Sanitizer builds: KILN_SANITIZE (e.g. address,undefined) for `make test-asan`, and KILN_FUZZ
# for the libFuzzer targets, which instruments all code for coverage as well.
if(KILN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "KILN_FUZZ needs clang (configure with -DCMAKE_CXX_COMPILER=clang++)")
  endif()
  if(NOT KILN_SANITIZE)
    set(KILN_SANITIZE address,undefined)
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(KILN_SANITIZE)
  # Every UB report fails the run; frame pointers give whole stacks at little cost. vptr checks
  # are off: libtorch's classes cross library boundaries without the checker's type info.
  add_compile_options(-fsanitize=${KILN_SANITIZE} -fno-sanitize=vptr -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${KILN_SANITIZE} -fno-sanitize=vptr)
  message(STATUS "kiln: sanitizers ${KILN_SANITIZE}")
endif()

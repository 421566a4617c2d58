# Helpers that give every kiln target the same flags, and torch users one shared PCH.

# kiln_target(<target>): warnings, include roots.
function(kiln_target target)
  target_compile_options(${target} PRIVATE ${KILN_WARNING_FLAGS})
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
endfunction()

# kiln_torch_target(<target>): also links libtorch and reuses the libtorch PCH built once by
# kiln_ir (a fresh build would otherwise spend most of its time re-parsing torch headers).
function(kiln_torch_target target)
  kiln_target(${target})
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  # Executables get -fPIE and libraries -fPIC; a PCH must be used with the flags it was built
  # with, so every torch target compiles as PIC (the last of -fPIE/-fPIC wins).
  target_compile_options(${target} PRIVATE -fPIC)
  if(target STREQUAL "kiln_ir")
    target_precompile_headers(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/ir/torch_pch.h)
  else()
    target_precompile_headers(${target} REUSE_FROM kiln_ir)
  endif()
endfunction()

# For libraries Python loads next to torch, which uses the shared libstdc++: a copy linked in
# statically (some toolchains, the GPU machines' among them, put a libstdc++.a first on the
# search path) crashes at its first stream use there. Name the shared one explicitly, so the
# link never reaches the archive.
function(kiln_link_shared_libstdcxx target)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.so
                    OUTPUT_VARIABLE _libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(IS_ABSOLUTE "${_libstdcxx}" AND EXISTS "${_libstdcxx}")
      target_link_libraries(${target} PRIVATE -Wl,--no-as-needed "${_libstdcxx}" -Wl,--as-needed)
    endif()
  endif()
endfunction()

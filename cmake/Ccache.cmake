# Uses ccache when present; sloppiness settings let it cache translation units built with a PCH.
find_program(KILN_CCACHE ccache)
if(KILN_CCACHE)
  set(_launcher ${CMAKE_COMMAND} -E env
      CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
      ${KILN_CCACHE})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
  set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
  message(STATUS "kiln: using ccache (${KILN_CCACHE})")
endif()

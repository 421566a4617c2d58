# Finds kiln's dependencies: Debian packages on test machines, python3's torch plus a carried
# .deps/ prefix on GPU machines. Each one becomes a target named kiln::<dep>.
list(APPEND CMAKE_PREFIX_PATH ${KILN_DEPS_DIR})

# --- libtorch (1.13 from Debian, or 2.x from python3's torch package) ---
find_package(Torch REQUIRED)
message(STATUS "kiln: libtorch ${Torch_VERSION} (${TORCH_INSTALL_PREFIX})")

# --- header-only libraries ---
function(kiln_header_dep target header)
  find_path(_dir_${target} ${header} HINTS ${KILN_DEPS_DIR}/include REQUIRED)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${_dir_${target}})
endfunction()
kiln_header_dep(kiln::cli11 CLI/CLI.hpp)
kiln_header_dep(kiln::json nlohmann/json.hpp)
# xxHash is used header-only (XXH_INLINE_ALL), so no library is linked.
kiln_header_dep(kiln::xxhash xxhash.h)

# --- GoogleTest: Debian's package, or its sources carried in .deps/src/googletest ---
if(BUILD_TESTING)
  find_package(GTest CONFIG QUIET)
  if(NOT GTest_FOUND)
    set(_gtest_src ${KILN_DEPS_DIR}/src/googletest)
    if(NOT EXISTS ${_gtest_src}/CMakeLists.txt)
      set(_gtest_src /usr/src/googletest)
    endif()
    set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
    add_subdirectory(${_gtest_src} ${CMAKE_BINARY_DIR}/_deps/googletest EXCLUDE_FROM_ALL SYSTEM)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endif()

# --- a python3 that imports torch and torchvision, for making test models ---
set(KILN_PYTHON "" CACHE FILEPATH "python3 with torch and torchvision")
if(NOT KILN_PYTHON)
  foreach(_py /usr/bin/python3 python3)
    find_program(_py_path ${_py} NO_CACHE)
    if(_py_path)
      execute_process(COMMAND ${_py_path} -c "import torch, torchvision"
                      RESULT_VARIABLE _rc OUTPUT_QUIET ERROR_QUIET)
      if(_rc EQUAL 0)
        set(KILN_PYTHON ${_py_path} CACHE FILEPATH "python3 with torch and torchvision" FORCE)
        break()
      endif()
    endif()
    unset(_py_path)
  endforeach()
endif()
if(KILN_PYTHON)
  message(STATUS "kiln: python for test models: ${KILN_PYTHON}")
else()
  message(STATUS "kiln: no python3 with torch and torchvision; model tests will fail to set up")
endif()

# --- CUDA (optional) ---
set(KILN_HAS_CUDA OFF)
if(KILN_ENABLE_CUDA)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND)
    set(KILN_HAS_CUDA ON)
  endif()
endif()
if(KILN_HAS_CUDA)
  # cuDNN 9 (the legacy convolution API lives behind libcudnn.so's shim): next to the toolkit, or
  # under KILN_CUDNN_ROOT (e.g. python's nvidia/cudnn package on GPU machines).
  set(KILN_CUDNN_ROOT "" CACHE PATH "cuDNN prefix (include/, lib/) when it is not in the CUDA toolkit")
  find_path(KILN_CUDNN_INCLUDE cudnn.h HINTS ${KILN_CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
  find_library(KILN_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
               HINTS ${KILN_CUDNN_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR})
  if(NOT KILN_CUDNN_INCLUDE OR NOT KILN_CUDNN_LIBRARY)
    message(STATUS "kiln: CUDA found but not cuDNN (set KILN_CUDNN_ROOT)")
    set(KILN_HAS_CUDA OFF)
  endif()
endif()
if(KILN_HAS_CUDA)
  # sm_90 machine code plus compute_90 PTX (CMake's plain "90" embeds both), set on kiln's kernel
  # target itself: libtorch's CMake config sets CMAKE_CUDA_ARCHITECTURES to OFF for its own flags.
  set(_kiln_cuda_arch 90)
  if(DEFINED CACHE{CMAKE_CUDA_ARCHITECTURES} AND NOT "$CACHE{CMAKE_CUDA_ARCHITECTURES}" STREQUAL "OFF")
    set(_kiln_cuda_arch "$CACHE{CMAKE_CUDA_ARCHITECTURES}")
  endif()
  set(KILN_CUDA_ARCHITECTURES "${_kiln_cuda_arch}" CACHE STRING
      "CUDA architectures of kiln's kernels (90: sm_90 code plus compute_90 PTX)")
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${KILN_CUDA_ARCHITECTURES})
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  add_library(kiln::cudnn INTERFACE IMPORTED GLOBAL)
  set_target_properties(kiln::cudnn PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${KILN_CUDNN_INCLUDE}
                                               INTERFACE_LINK_LIBRARIES ${KILN_CUDNN_LIBRARY})
  message(STATUS "kiln: CUDA ${CUDAToolkit_VERSION} found (${CUDAToolkit_BIN_DIR}), cuDNN "
                 "${KILN_CUDNN_LIBRARY}, architectures ${KILN_CUDA_ARCHITECTURES}; CUDA backend enabled")
else()
  message(STATUS "kiln: CUDA not found (or KILN_ENABLE_CUDA=OFF); building the CPU backend only")
endif()

# --- oneDNN (Debian's libdnnl-dev, or a copy carried in .deps/) and OpenMP ---
find_path(KILN_DNNL_INCLUDE dnnl.hpp HINTS ${KILN_DEPS_DIR}/include REQUIRED)
find_library(KILN_DNNL_LIBRARY NAMES dnnl HINTS ${KILN_DEPS_DIR}/lib REQUIRED)
add_library(kiln::dnnl INTERFACE IMPORTED GLOBAL)
set_target_properties(kiln::dnnl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${KILN_DNNL_INCLUDE}
                                            INTERFACE_LINK_LIBRARIES ${KILN_DNNL_LIBRARY})
find_package(OpenMP REQUIRED COMPONENTS CXX)

# Finds kiln's dependencies: the torch of the project's virtual environment (.venv/, made by
# scripts/setup-deps.sh) or of python3 on GPU machines, Debian packages or a carried .deps/ prefix
# for the rest. Each one becomes a target named kiln::<dep>.
list(APPEND CMAKE_PREFIX_PATH ${KILN_DEPS_DIR})

# --- python with torch: .venv's, else KILN_PYTHON as given (GPU machines: their python3) ---
set(KILN_PYTHON "" CACHE FILEPATH "python3 with torch, torchvision and transformers")
if(NOT KILN_PYTHON AND EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/python)
  set(KILN_PYTHON ${CMAKE_SOURCE_DIR}/.venv/bin/python CACHE FILEPATH
      "python3 with torch, torchvision and transformers" FORCE)
endif()
if(NOT KILN_PYTHON)
  message(FATAL_ERROR "kiln: no .venv/ (run scripts/setup-deps.sh) and no KILN_PYTHON given")
endif()
execute_process(COMMAND ${KILN_PYTHON} -c "import torch; print(torch.utils.cmake_prefix_path)"
                OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                RESULT_VARIABLE _rc ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "kiln: ${KILN_PYTHON} does not import torch: ${_err}")
endif()
list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
message(STATUS "kiln: python for test models: ${KILN_PYTHON}")

# --- libtorch (2.x, from that python's torch package) ---
# Its CMake config adds -gencode flags for TORCH_CUDA_ARCH_LIST to every CUDA compile; without a
# GPU to detect, its default list starts at sm_50, which CUDA 13 no longer has. kiln's kernels
# name their own architectures (KILN_CUDA_ARCHITECTURES below).
if(NOT TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()
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
  # targets itself: libtorch's CMake config enables CUDA with the compiler's default architecture
  # and ignores CMAKE_CUDA_ARCHITECTURES for its own flags.
  set(KILN_CUDA_ARCHITECTURES 90 CACHE STRING
      "CUDA architectures of kiln's kernels (90: sm_90 code plus compute_90 PTX)")
  set(CMAKE_CUDA_ARCHITECTURES ${KILN_CUDA_ARCHITECTURES})
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  enable_language(CUDA)
  add_library(kiln::cudnn INTERFACE IMPORTED GLOBAL)
  set_target_properties(kiln::cudnn PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${KILN_CUDNN_INCLUDE}
                                               INTERFACE_LINK_LIBRARIES ${KILN_CUDNN_LIBRARY})
  message(STATUS "kiln: CUDA ${CUDAToolkit_VERSION} found (${CUDAToolkit_BIN_DIR}), cuDNN "
                 "${KILN_CUDNN_LIBRARY}, architectures ${KILN_CUDA_ARCHITECTURES}; CUDA backend enabled")
  # cuDNN's C++ graph API (header-only, PyPI's nvidia-cudnn-frontend: in .venv by
  # scripts/setup-deps.sh, in .deps/cudnn_frontend on GPU machines by tools/device/pack-deps.sh),
  # for the attention layer's cuDNN form (src/engine/cuda/attention_cudnn.cpp); without it that
  # form is compiled out and attention runs on kiln's own kernels.
  file(GLOB _venv_frontend ${CMAKE_SOURCE_DIR}/.venv/lib/python3*/site-packages/include)
  execute_process(COMMAND ${KILN_PYTHON} -c "import sysconfig; print(sysconfig.get_paths()['platlib'])"
                  OUTPUT_VARIABLE _python_platlib OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  find_path(KILN_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h
            HINTS ${KILN_DEPS_DIR}/cudnn_frontend/include ${_venv_frontend} ${_python_platlib}/include
            DOC "cuDNN frontend headers (cudnn_frontend.h); not found: no cuDNN attention")
  if(KILN_CUDNN_FRONTEND_INCLUDE)
    file(STRINGS ${KILN_CUDNN_FRONTEND_INCLUDE}/cudnn_frontend_version.h _frontend_version
         REGEX "define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION")
    string(REGEX REPLACE "[^0-9;]" "" _frontend_version "${_frontend_version}")
    string(REPLACE ";" "." _frontend_version "${_frontend_version}")
    message(STATUS "kiln: cuDNN frontend ${_frontend_version} (${KILN_CUDNN_FRONTEND_INCLUDE}); "
                   "attention may run on cuDNN")
  else()
    message(STATUS "kiln: no cuDNN frontend (cudnn_frontend.h; set KILN_CUDNN_FRONTEND_INCLUDE); "
                   "attention runs on kiln's kernels only")
  endif()
else()
  message(STATUS "kiln: CUDA not found (or KILN_ENABLE_CUDA=OFF); building the CPU backend only")
endif()

# --- oneDNN: a private copy of Debian's libdnnl (or of one carried in .deps/), and OpenMP ---
# libtorch 2.x bundles oneDNN 3.x and exports some of its symbols; a plain libdnnl in the same
# process binds to them and its GEMM kernels fail. The copy exports only oneDNN's C API
# (cmake/private_onednn.py says how and why); .deps/ may carry it ready-made (GPU machines).
find_path(KILN_DNNL_INCLUDE dnnl.hpp HINTS ${KILN_DEPS_DIR}/include REQUIRED)
find_library(KILN_DNNL_PRIVATE NAMES libkiln_dnnl.so.2 HINTS ${KILN_DEPS_DIR}/lib NO_DEFAULT_PATH)
if(NOT KILN_DNNL_PRIVATE)
  find_library(KILN_DNNL_SYSTEM NAMES dnnl HINTS ${KILN_DEPS_DIR}/lib REQUIRED)
  get_filename_component(_dnnl_real ${KILN_DNNL_SYSTEM} REALPATH)
  set(_private ${CMAKE_LIBRARY_OUTPUT_DIRECTORY}/libkiln_dnnl.so.2)
  if(NOT EXISTS ${_private} OR ${_dnnl_real} IS_NEWER_THAN ${_private}
     OR ${CMAKE_SOURCE_DIR}/cmake/private_onednn.py IS_NEWER_THAN ${_private})
    file(MAKE_DIRECTORY ${CMAKE_LIBRARY_OUTPUT_DIRECTORY})
    execute_process(COMMAND ${KILN_PYTHON} ${CMAKE_SOURCE_DIR}/cmake/private_onednn.py
                            ${_dnnl_real} ${_private} libkiln_dnnl.so.2
                    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "kiln: making the private oneDNN failed: ${_out}")
    endif()
  endif()
  set(KILN_DNNL_PRIVATE ${_private})
endif()
message(STATUS "kiln: oneDNN ${KILN_DNNL_PRIVATE}")
add_library(kiln::dnnl INTERFACE IMPORTED GLOBAL)
set_target_properties(kiln::dnnl PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${KILN_DNNL_INCLUDE}
                                            INTERFACE_LINK_LIBRARIES ${KILN_DNNL_PRIVATE})
find_package(OpenMP REQUIRED COMPONENTS CXX)
# The flag alone, so the compiler links libgomp by its soname: FindOpenMP's target names gcc's
# libgomp.so by path, and CMake then warns on every target that torch's lib folder carries a
# libgomp.so.1 of its own. A process loads one libgomp.so.1 either way (torch's where torch is
# loaded first), and kiln's OpenMP regions share its thread count with torch.set_num_threads.
add_library(kiln::openmp INTERFACE IMPORTED GLOBAL)
set_target_properties(kiln::openmp PROPERTIES
  INTERFACE_COMPILE_OPTIONS $<$<COMPILE_LANGUAGE:CXX>:${OpenMP_CXX_FLAGS}>
  INTERFACE_LINK_OPTIONS ${OpenMP_CXX_FLAGS})

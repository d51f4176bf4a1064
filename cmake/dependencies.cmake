# Every third-party dependency is found here, once, and exposed as an imported target.
# All of them come from Debian packages installed by scripts/setup.sh.
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
find_package(ZLIB REQUIRED)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(CapnProto REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
pkg_check_modules(URING REQUIRED IMPORTED_TARGET liburing)
pkg_check_modules(LIBDEFLATE REQUIRED IMPORTED_TARGET libdeflate)  # the wire frames' CRC-32

find_package(OpenBLAS CONFIG REQUIRED)
add_library(troupe_blas INTERFACE IMPORTED)
target_include_directories(troupe_blas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
target_link_libraries(troupe_blas INTERFACE ${OpenBLAS_LIBRARIES})

# CAF 0.17.6 ships no CMake config or .pc file.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY caf_core REQUIRED)
find_library(CAF_IO_LIBRARY caf_io REQUIRED)
add_library(caf::core INTERFACE IMPORTED)
target_include_directories(caf::core INTERFACE ${CAF_INCLUDE_DIR})
target_link_libraries(caf::core INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)
add_library(caf::io INTERFACE IMPORTED)
target_link_libraries(caf::io INTERFACE ${CAF_IO_LIBRARY} caf::core)

# CUDA is optional: built where nvcc exists, skipped elsewhere.
option(TROUPE_WITH_CUDA "Build the CUDA/NCCL parts when a CUDA compiler is found" ON)
set(TROUPE_HAVE_CUDA OFF)
if(TROUPE_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90)
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR})
    if(CUDAToolkit_FOUND AND NCCL_LIBRARY)
      set(TROUPE_HAVE_CUDA ON)
    endif()
  endif()
endif()
message(STATUS "troupe: CUDA parts ${TROUPE_HAVE_CUDA}")

# A test that needs something missing (a GPU) exits 77; ctest shows it as skipped.
function(troupe_add_gtest name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES SKIP_RETURN_CODE 77)
endfunction()

# Tests that assert on wall-clock time run alone (on 2 cores a parallel neighbour would measure
# the neighbour, not the code) and carry the `perf` label (`ctest -L perf` runs just them).
function(troupe_add_timing_gtest name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE LABELS perf)
endfunction()

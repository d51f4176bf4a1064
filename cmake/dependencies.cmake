# Every third-party dependency is found here, once, and exposed as an imported target.
# All of them come from Debian packages installed by scripts/setup.sh.
macro(troupe_find)
  find_package(${ARGN} REQUIRED)
endmacro()
macro(troupe_missing what)
  message(FATAL_ERROR "troupe needs ${what}; scripts/setup.sh installs every dependency")
endmacro()
include(${CMAKE_CURRENT_LIST_DIR}/troupe_link_dependencies.cmake)
find_package(GTest REQUIRED)
find_package(benchmark REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(CLI11 CONFIG REQUIRED)

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

# Tests that compare wall-clock times (a measured step against a simulated one, a straggler's
# cost) run alone (on 2 cores a parallel neighbour would measure the neighbour, not the code) and
# carry the `perf` label. They do not hold on a busy machine, so the README's test command leaves
# them out (`ctest -LE perf`); `scripts/setup.sh bench` runs them (`ctest -L perf`).
function(troupe_add_timing_gtest name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE LABELS perf)
endfunction()

# Tests that start processes or wait for a watchdog run alone too, so that their deadlines (tens
# of seconds) are not spent waiting for a neighbour; they hold under load and stay in the suite.
function(troupe_add_serial_gtest name)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endfunction()

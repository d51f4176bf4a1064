# The libraries that troupe's own static libraries link, found the same way by two readers: this
# build (cmake/dependencies.cmake) and a project calling find_package(troupe), whose
# troupeConfig.cmake includes this file installed as troupeDependencies.cmake. Each reader first
# defines troupe_find(<find_package arguments>) and troupe_missing(<what>): stop the build, or
# mark troupe not found and return. What only the command, tests and benchmarks use (CLI11,
# toml++, GTest, Google Benchmark) stays in dependencies.cmake.
troupe_find(Threads)
troupe_find(ZLIB)
troupe_find(fmt)
troupe_find(spdlog)
# Debian's CapnProtoConfig.cmake probes libatomic with check_library_exists, which only works
# when C is enabled (capnproto/capnproto#1448); a C++-only project answers it here with a C++
# link probe, and Cap'n Proto then uses the cached answer.
if(NOT CMAKE_C_COMPILER_LOADED AND NOT DEFINED FOUND_LIBATOMIC)
  include(CheckCXXSourceCompiles)
  include(CMakePushCheckState)
  cmake_push_check_state(RESET)
  set(CMAKE_REQUIRED_LIBRARIES atomic)
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("#include <atomic>\nint main() { std::atomic<long long> a{1}; return static_cast<int>(a.load()) - 1; }"
                            FOUND_LIBATOMIC)
  cmake_pop_check_state()
endif()
if(NOT TARGET CapnProto::capnp)  # its targets file fails when read twice (a second find_package(troupe))
  troupe_find(CapnProto)
endif()
troupe_find(OpenSSL COMPONENTS Crypto)
troupe_find(PkgConfig)
pkg_check_modules(LIBDEFLATE QUIET IMPORTED_TARGET libdeflate)  # the wire frames' CRC-32
if(NOT LIBDEFLATE_FOUND)
  troupe_missing("libdeflate (pkg-config module libdeflate; Debian: libdeflate-dev)")
  return()
endif()
pkg_check_modules(URING QUIET IMPORTED_TARGET liburing)  # storage/uring_store
if(NOT URING_FOUND)
  troupe_missing("liburing (pkg-config module liburing; Debian: liburing-dev)")
  return()
endif()

troupe_find(OpenBLAS CONFIG)
if(NOT TARGET troupe_blas)
  add_library(troupe_blas INTERFACE IMPORTED)
  target_include_directories(troupe_blas INTERFACE ${OpenBLAS_INCLUDE_DIRS})
  target_link_libraries(troupe_blas INTERFACE ${OpenBLAS_LIBRARIES})
endif()
# oneDNN's sgemm, the GEMMs' library on CPUs with AVX-512 (kernels/gemm_library.hpp). Debian's
# threads with OpenMP; troupe calls omp_set_num_threads itself, so it links the runtime too.
troupe_find(dnnl CONFIG)
troupe_find(OpenMP COMPONENTS CXX)
if(NOT TARGET troupe_gemm)
  add_library(troupe_gemm INTERFACE IMPORTED)
  target_link_libraries(troupe_gemm INTERFACE troupe_blas DNNL::dnnl ${OpenMP_CXX_LIBRARIES})
endif()

# CAF 0.17.6 ships no CMake config or .pc file.
find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)
if(NOT (CAF_INCLUDE_DIR AND CAF_CORE_LIBRARY AND CAF_IO_LIBRARY))
  troupe_missing("CAF 0.17 (caf/all.hpp, libcaf_core, libcaf_io; Debian: libcaf-dev)")
  return()
endif()
if(NOT TARGET caf::core)
  add_library(caf::core INTERFACE IMPORTED)
  target_include_directories(caf::core INTERFACE ${CAF_INCLUDE_DIR})
  target_link_libraries(caf::core INTERFACE ${CAF_CORE_LIBRARY} Threads::Threads)
  add_library(caf::io INTERFACE IMPORTED)
  target_link_libraries(caf::io INTERFACE ${CAF_IO_LIBRARY} caf::core)
endif()

# Optional peers: an installed troupe needs them only when it was built with them (the config
# sets TROUPE_LINKS_*; this build finds them where they are used, e.g. MPI in comm/).
if(TROUPE_LINKS_MPI AND CMAKE_C_COMPILER_LOADED)
  troupe_find(MPI COMPONENTS C)
elseif(TROUPE_LINKS_MPI)
  # FindMPI's C component needs C enabled. Its C++ component finds the same libmpi and mpi.h,
  # and comm/ calls only MPI's C API; FindMPI fills this target in if C is enabled later.
  troupe_find(MPI COMPONENTS CXX)
  if(NOT TARGET MPI::MPI_C)
    add_library(MPI::MPI_C INTERFACE IMPORTED)
    target_link_libraries(MPI::MPI_C INTERFACE MPI::MPI_CXX)
  endif()
endif()
if(TROUPE_LINKS_CUDA)
  troupe_find(CUDAToolkit)
endif()

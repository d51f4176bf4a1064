# `cmake --install`: the libraries' headers under include/ with the paths the sources use
# ("actors/run/training_job.hpp"), the static libraries, the `troupe` command, and a CMake
# package so that another project does find_package(troupe) and links troupe::actors (or
# troupe::kernels, ::storage, ::schedules, ::comm; troupe::actors is every actors/ layer, which
# are exported one by one as well: ::actors_config, ::actors_plan ... ::actors_run). The command's own library (cli/) is not
# installed: it is the command, not an API.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TROUPE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/troupe)
set(troupe_layers kernels storage schedules comm actors)  # bottom-up, as the add_subdirectory calls
# The libraries, bottom-up (actors/CMakeLists.txt's layers, then troupe_actors, all of them).
set(troupe_libraries kernels storage schedules comm actors_config actors_plan actors_observe actor_roles
    actors_compose actors_run actors)

set(TROUPE_LINKS_MPI OFF)
set(TROUPE_LINKS_CUDA OFF)
# One static library into the package as troupe::<name>.
macro(troupe_export lib name)
  # The layers name their include folders as build paths (the source tree, comm/'s generated
  # Cap'n Proto code), which an exported target must not carry: they hold for this build only,
  # and the installed headers sit under include/.
  get_target_property(dirs ${lib} INTERFACE_INCLUDE_DIRECTORIES)
  if(NOT dirs)
    set(dirs)
  endif()
  set(build_dirs)
  foreach(dir ${dirs})
    list(APPEND build_dirs "$<BUILD_INTERFACE:${dir}>")
  endforeach()
  set_property(TARGET ${lib} PROPERTY INTERFACE_INCLUDE_DIRECTORIES
               ${build_dirs} "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
  set_property(TARGET ${lib} PROPERTY EXPORT_NAME ${name})
  # The optional peers this build links are the ones the installed package must find.
  get_target_property(links ${lib} INTERFACE_LINK_LIBRARIES)
  if(links MATCHES "MPI::")
    set(TROUPE_LINKS_MPI ON)
  endif()
  if(links MATCHES "CUDA::")
    set(TROUPE_LINKS_CUDA ON)
  endif()
  install(TARGETS ${lib} EXPORT troupeTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
endmacro()
foreach(lib ${troupe_libraries})
  troupe_export(troupe_${lib} ${lib})
endforeach()
foreach(layer ${troupe_layers})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${layer}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${layer}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
# The GPU ops (headers under kernels/cuda/, installed with kernels/) and NCCL's group (under
# comm/), which actors link where CUDA is built.
if(TARGET troupe_kernels_cuda)
  troupe_export(troupe_kernels_cuda kernels_cuda)
  troupe_export(troupe_comm_nccl comm_nccl)
endif()
install(TARGETS troupe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT troupeTargets NAMESPACE troupe:: DESTINATION ${TROUPE_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/troupeConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/troupeConfig.cmake INSTALL_DESTINATION ${TROUPE_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/troupeConfig.cmake ${PROJECT_BINARY_DIR}/troupeConfigVersion.cmake
        DESTINATION ${TROUPE_INSTALL_CMAKEDIR})
install(FILES ${CMAKE_CURRENT_LIST_DIR}/troupe_link_dependencies.cmake DESTINATION ${TROUPE_INSTALL_CMAKEDIR}
        RENAME troupeDependencies.cmake)

# Packaging beyond find_package(ordo): pkg-config files for each installed
# component, and a Debian package (cpack -G DEB) of the whole install.
# Included by the top-level CMakeLists.txt after the install rules.

# ---------------------------------------------------------------- pkg-config
# ordo.pc (ordo::core), ordo-io.pc, ordo-asio.pc, ordo-gpu.pc, ordo-dist.pc:
# each Requires ordo and lists what its static library needs, as the
# CMake targets do. The libraries are static, so a dependency a CMake target
# links PRIVATE goes in Libs / Requires here, not in the .private fields:
# `pkg-config --libs ordo-io` alone must link.
set(ORDO_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(ORDO_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")  # not relocatable then
else()
  file(RELATIVE_PATH _ordo_up /p/${ORDO_PC_DIR} /p)
  string(REGEX REPLACE "/$" "" _ordo_up "${_ordo_up}")
  set(ORDO_PC_PREFIX "\${pcfiledir}/${_ordo_up}")
endif()

function(ordo_pkg_config name description requires libs cflags)
  set(ORDO_PC_NAME ${name})
  set(ORDO_PC_DESCRIPTION "${description}")
  set(ORDO_PC_REQUIRES "")  # whole lines, left out when empty
  if(requires)
    string(JOIN " " ORDO_PC_REQUIRES ${requires})
    set(ORDO_PC_REQUIRES "Requires: ${ORDO_PC_REQUIRES}\n")
  endif()
  set(ORDO_PC_LIBS "")
  if(libs)
    set(ORDO_PC_LIBS "Libs: -L\${libdir} ${libs}\n")
  endif()
  set(ORDO_PC_CFLAGS "")
  foreach(flag IN LISTS cflags)
    string(APPEND ORDO_PC_CFLAGS " ${flag}")
  endforeach()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/ordo.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/${name}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/${name}.pc DESTINATION ${ORDO_PC_DIR})
endfunction()

ordo_pkg_config(ordo "ordo::core: the dependency engine and its coroutine layer" "" "-lordo_core -pthread" "")
if(TARGET ordo_io)
  set(_ordo_requires ordo)
  if(ORDO_IO_HAVE_URING)
    list(APPEND _ordo_requires liburing)
  endif()
  ordo_pkg_config(ordo-io "ordo::io: file and socket I/O as engine ops (io_uring or threads)"
                  "${_ordo_requires}" "-lordo_io" "")
endif()
if(TARGET ordo_asio)
  # What the ordo::asio target sets for clang (see there); harmless for g++.
  set(_ordo_cflags -DASIO_HAS_CO_AWAIT=1)
  if(NOT ORDO_ASIO_INCLUDE_DIR STREQUAL "/usr/include")
    list(APPEND _ordo_cflags -I${ORDO_ASIO_INCLUDE_DIR})
  endif()
  ordo_pkg_config(ordo-asio "ordo::asio: engine ops as standalone Asio asynchronous operations"
                  "ordo" "" "${_ordo_cflags}")
endif()
if(TARGET ordo_gpu)
  set(_ordo_libs -lordo_gpu)
  set(_ordo_cflags "")
  if(ORDO_HAVE_CUDA)
    # cudart from the toolkit this build found, with a run path: the
    # toolkit's lib64 is not on the loader's path by default.
    list(APPEND _ordo_libs -L${CUDAToolkit_LIBRARY_DIR} -Wl,-rpath,${CUDAToolkit_LIBRARY_DIR} -lcudart)
    set(_ordo_cflags -DORDO_GPU_HAVE_CUDA=1)
  endif()
  string(JOIN " " _ordo_libs ${_ordo_libs})
  ordo_pkg_config(ordo-gpu "ordo::gpu: CUDA streams and events as engine completions"
                  "ordo" "${_ordo_libs}" "${_ordo_cflags}")
endif()
if(TARGET ordo_dist)
  # The MPI libraries FindMPI found, by full path (any MPI, not only the
  # ones that ship a .pc file). The public header does not include <mpi.h>.
  set(_ordo_libs -lordo_dist ${MPI_CXX_LINK_FLAGS} ${MPI_CXX_LIBRARIES})
  string(JOIN " " _ordo_libs ${_ordo_libs})
  ordo_pkg_config(ordo-dist "ordo::dist: the engine across MPI ranks" "ordo" "${_ordo_libs}" "")
endif()

# ---------------------------------------------------------------- Debian package
# `cpack -G DEB` in the build directory writes ordo-dev_<version>_<arch>.deb:
# the headers, static libraries, CMake package and pkg-config files under
# /usr; `apt-get install ./ordo-dev_*.deb` installs it with what a consumer
# needs to build. Only for a top-level build: a project that embeds ordo
# packages itself.
if(NOT ORDO_TOP_LEVEL)
  return()
endif()
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ordo)
set(CPACK_PACKAGE_VENDOR "ordo")
set(CPACK_PACKAGE_CONTACT "ordo maintainers <ordo@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION} (C++20 headers, static libraries, CMake and pkg-config files)")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_PACKAGE_NAME ordo-dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libdevel)
# A consumer of ordo::core needs only a C++20 compiler; a component's
# dependency is what its .pc file and find_package(ordo COMPONENTS ...) look
# for: required for io (loaded by default), recommended for the others.
set(_ordo_depends "")
set(_ordo_recommends pkg-config)
if(ORDO_IO_HAVE_URING)
  set(_ordo_depends liburing-dev)
endif()
if(TARGET ordo_asio)
  list(APPEND _ordo_recommends libasio-dev)
endif()
if(TARGET ordo_dist)
  list(APPEND _ordo_recommends libopenmpi-dev)
endif()
list(JOIN _ordo_recommends ", " _ordo_recommends)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${_ordo_depends}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "${_ordo_recommends}")
include(CPack)

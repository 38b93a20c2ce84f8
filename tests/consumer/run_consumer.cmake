# Builds and runs tests/consumer against ordo the way a user's project takes
# it in, one way per run (MODE):
#   find_package   install the already-built ordo into a scratch prefix,
#                  then find_package(ordo) (the default)
#   subdirectory   add_subdirectory(<ordo source>) from the consumer project
#   fetchcontent   FetchContent_Declare(ordo SOURCE_DIR <ordo source>)
#   pkgconfig      install into a scratch prefix, then compile each consumer
#                  program with the compiler and `pkg-config --cflags --libs`,
#                  as a Make or Meson user would
#   deb            cpack -G DEB in the build directory, the package checked
#                  (name, fields, `apt-get install -s` where apt-get exists),
#                  extracted with dpkg -x into a scratch root (never installed
#                  on this machine), then find_package and pkg-config against it
#
#   -DORDO_BUILD_DIR=  -DORDO_SOURCE_DIR=  -DWORK_DIR=   (WORK_DIR is emptied)
#   -DCONSUMER_CXX=      the consumer's C++ compiler
#   -DCPACK=             cpack (deb)
#   -DGENERATOR=         the consumer's CMake generator
#   -DCOMPONENTS=a,b     components to require and run a consumer of (core always)
#   -DHEADERS=ON|OFF     compile every public header of those on its own (find_package)
#   -DHIDE_CUDA=ON|OFF   configure with CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON,
#                        and also without COMPONENTS (the README's form)
#   -DGPU_NEEDS_CUDA=ON  with HIDE_CUDA: ordo::gpu was built with CUDA, so
#                        requiring it must fail, saying why
#
# A skip prints "ORDO_CONSUMER_SKIPPED: <why>" (the test's skip expression).
cmake_minimum_required(VERSION 3.25)  # the policies of the project (IN_LIST in script mode)
if(NOT MODE)
  set(MODE find_package)
endif()
set(components_arg "${COMPONENTS}")  # commas: one command-line argument
string(REPLACE "," ";" COMPONENTS "${COMPONENTS}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# The caller returns after it: a skip, not a pass, with nothing run after.
function(skip why)
  message(STATUS "ORDO_CONSUMER_SKIPPED: ${why}")
endfunction()

# Runs the consumer programs built in `dir` (consumer_core, consumer_<component>).
function(run_programs dir)
  foreach(program IN ITEMS core ${COMPONENTS})
    run("consumer_${program}" ${dir}/consumer_${program} ${WORK_DIR})
    message(STATUS "  ${last_output}")
  endforeach()
endfunction()

# pkg-config: compiles each consumer program with CONSUMER_CXX and the
# flags of its .pc file, found under `pc_dir`, and runs it.
function(build_with_pkg_config pc_dir out_dir)
  find_program(pkg_config NAMES pkg-config pkgconf REQUIRED)
  file(MAKE_DIRECTORY ${out_dir})
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  foreach(program IN ITEMS core ${COMPONENTS})
    set(pc ordo-${program})
    if(program STREQUAL "core")
      set(pc ordo)
    endif()
    run("pkg-config ${pc}" ${pkg_config} --cflags --libs ${pc})
    string(STRIP "${last_output}" flags)
    message(STATUS "  ${flags}")
    separate_arguments(flags UNIX_COMMAND "${flags}")
    run("compiling consumer_${program} with pkg-config's flags"
        ${CONSUMER_CXX} -std=c++20 -Wall -Wextra -Werror ${ORDO_SOURCE_DIR}/tests/consumer/${program}.cpp
        ${flags} -o ${out_dir}/consumer_${program})
  endforeach()
  run_programs(${out_dir})
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(consumer_args -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CONSUMER_CXX})

if(MODE STREQUAL "find_package" OR MODE STREQUAL "pkgconfig")
  set(prefix ${WORK_DIR}/prefix)
  run("install of ordo" ${CMAKE_COMMAND} --install ${ORDO_BUILD_DIR} --prefix ${prefix})
  if(MODE STREQUAL "pkgconfig")
    # The .pc files sit in <libdir>/pkgconfig; libdir is lib or lib/<multiarch>.
    file(GLOB_RECURSE pc_files ${prefix}/*/pkgconfig/ordo.pc)
    if(NOT pc_files)
      message(FATAL_ERROR "no ordo.pc under ${prefix}")
    endif()
    get_filename_component(pc_dir "${pc_files}" DIRECTORY)
    build_with_pkg_config(${pc_dir} ${WORK_DIR}/pkgconfig)
    return()
  endif()
  list(APPEND consumer_args -DCMAKE_PREFIX_PATH=${prefix})
  if(HIDE_CUDA)
    list(APPEND consumer_args -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
  endif()
  run("configuring the consumer (components: core ${COMPONENTS})"
      ${CMAKE_COMMAND} -S ${ORDO_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build ${consumer_args}
      -DORDO_CONSUMER_COMPONENTS=${components_arg} -DORDO_CONSUMER_HEADERS=${HEADERS})
  run("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
  run_programs(${WORK_DIR}/build)

  execute_process(COMMAND ${CONSUMER_CXX} --version OUTPUT_VARIABLE version ERROR_QUIET)
  if("asio" IN_LIST COMPONENTS AND version MATCHES "clang")
    # consumer_asio got ASIO_HAS_CO_AWAIT from ordo::asio. Without the
    # target, <asio.hpp> included before <ordo/asio.hpp> must fail saying
    # what to define, not leave asio::awaitable out silently.
    file(WRITE ${WORK_DIR}/asio_first.cpp "#include <asio.hpp>\n#include <ordo/asio.hpp>\nint main() {}\n")
    execute_process(COMMAND ${CONSUMER_CXX} -std=c++20 -fsyntax-only -I${prefix}/include ${WORK_DIR}/asio_first.cpp
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "Define ASIO_HAS_CO_AWAIT=1")
      message(FATAL_ERROR "<asio.hpp> before <ordo/asio.hpp> with clang should fail naming ASIO_HAS_CO_AWAIT (${rc}):\n${out}")
    endif()
    message(STATUS "<asio.hpp> before <ordo/asio.hpp> without ASIO_HAS_CO_AWAIT fails as it should")
  endif()

  if(HIDE_CUDA)
    # find_package(ordo REQUIRED) without COMPONENTS: the same components load
    # (the consumers' targets then link to them); gpu is left out quietly.
    run("configuring the consumer without COMPONENTS"
        ${CMAKE_COMMAND} -S ${ORDO_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build-all ${consumer_args}
        -DORDO_CONSUMER_NO_COMPONENTS=ON -DORDO_CONSUMER_COMPONENTS=${components_arg} -DORDO_CONSUMER_HEADERS=OFF)
  endif()
  if(HIDE_CUDA AND GPU_NEEDS_CUDA)
    # Asking for the gpu component without the CUDA toolkit fails, naming it.
    execute_process(COMMAND ${CMAKE_COMMAND} -S ${ORDO_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build-gpu
                            ${consumer_args} -DORDO_CONSUMER_COMPONENTS=gpu -DORDO_CONSUMER_HEADERS=OFF
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "CUDAToolkit")
      message(FATAL_ERROR "find_package(ordo COMPONENTS gpu) without the CUDA toolkit should fail naming "
                          "CUDAToolkit (${rc}):\n${out}")
    endif()
    message(STATUS "find_package(ordo COMPONENTS gpu) without CUDA fails as it should")
  endif()

elseif(MODE STREQUAL "subdirectory" OR MODE STREQUAL "fetchcontent")
  # ordo compiled again, as part of the consumer, with the consumer's
  # compiler and no build type (no optimisation: the cheapest build).
  run("configuring the consumer (${MODE}; components: core ${COMPONENTS})"
      ${CMAKE_COMMAND} -S ${ORDO_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build ${consumer_args}
      -DCMAKE_BUILD_TYPE= -DORDO_CONSUMER_MODE=${MODE} -DORDO_CONSUMER_ORDO_SOURCE=${ORDO_SOURCE_DIR}
      -DORDO_CONSUMER_COMPONENTS=${components_arg} -DORDO_CONSUMER_HEADERS=OFF)
  # Only the consumer programs and what they link: ordo's other libraries
  # (gpu's simulated backend is always there) would double the cost.
  set(targets consumer_core)
  foreach(component IN LISTS COMPONENTS)
    list(APPEND targets consumer_${component})
  endforeach()
  execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2 --target ${targets}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "building the consumer with ordo inside (${MODE}) failed (${rc}):\n${out}")
  endif()
  message(STATUS "building the consumer with ordo inside: ok")
  run_programs(${WORK_DIR}/build)

elseif(MODE STREQUAL "deb")
  find_program(dpkg_deb dpkg-deb)
  if(NOT CPACK OR NOT dpkg_deb)
    skip("cpack or dpkg-deb not found")
    return()
  endif()
  run("cpack -G DEB" ${CPACK} -G DEB --config ${ORDO_BUILD_DIR}/CPackConfig.cmake -B ${WORK_DIR}/package)
  file(GLOB debs ${WORK_DIR}/package/ordo-dev_*.deb)
  list(LENGTH debs n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "cpack -G DEB should write one ordo-dev_*.deb, wrote: ${debs}")
  endif()
  run("dpkg-deb --field" ${dpkg_deb} --field ${debs} Package Version Section)
  if(NOT last_output MATCHES "Package: ordo-dev\nVersion: [0-9.]+\nSection: libdevel")
    message(FATAL_ERROR "the package's fields:\n${last_output}")
  endif()
  message(STATUS "  ${last_output}")
  find_program(apt_get apt-get)
  if(apt_get)
    # What `apt-get install ./ordo-dev_*.deb` would do, simulated (no root,
    # nothing installed): its dependencies resolve on this machine.
    run("apt-get install -s ./ordo-dev_*.deb" ${apt_get} install -s ${debs})
    if(NOT last_output MATCHES "Inst ordo-dev")
      message(FATAL_ERROR "apt-get would not install ordo-dev:\n${last_output}")
    endif()
  endif()
  set(root ${WORK_DIR}/root)
  run("dpkg -x into a scratch root" ${dpkg_deb} -x ${debs} ${root})
  if(NOT EXISTS ${root}/usr/include/ordo/ordo.hpp)
    message(FATAL_ERROR "the package has no /usr/include/ordo/ordo.hpp")
  endif()
  # find_package against <root>/usr, as against /usr after apt-get install
  # (ordo_DIR: never an ordo installed on this machine).
  file(GLOB_RECURSE config ${root}/usr/*/ordoConfig.cmake)
  get_filename_component(config_dir "${config}" DIRECTORY)
  run("configuring the consumer against the package (components: core ${COMPONENTS})"
      ${CMAKE_COMMAND} -S ${ORDO_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build ${consumer_args}
      -DCMAKE_PREFIX_PATH=${root}/usr -Dordo_DIR=${config_dir}
      -DORDO_CONSUMER_COMPONENTS=${components_arg} -DORDO_CONSUMER_HEADERS=OFF)
  run("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
  run_programs(${WORK_DIR}/build)
  # pkg-config against the package's .pc files (relocatable: found from
  # their own place).
  file(GLOB_RECURSE pc_files ${root}/usr/*/pkgconfig/ordo.pc)
  get_filename_component(pc_dir "${pc_files}" DIRECTORY)
  build_with_pkg_config(${pc_dir} ${WORK_DIR}/pkgconfig)
else()
  message(FATAL_ERROR "MODE: find_package, subdirectory, fetchcontent, pkgconfig or deb, not '${MODE}'")
endif()

# Installs the already-built ordo into a scratch prefix, then configures,
# builds and runs tests/consumer against it with find_package(ordo), as a
# user's project would.
#
#   -DORDO_BUILD_DIR=  -DORDO_SOURCE_DIR=  -DWORK_DIR=   (WORK_DIR is emptied)
#   -DCONSUMER_CXX=      the consumer's C++ compiler
#   -DGENERATOR=         the consumer's CMake generator
#   -DCOMPONENTS=a,b     components to require and run a consumer of (core always)
#   -DHEADERS=ON|OFF     compile every public header of those on its own
#   -DHIDE_CUDA=ON|OFF   configure with CMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON,
#                        and also without COMPONENTS (the README's form)
#   -DGPU_NEEDS_CUDA=ON  with HIDE_CUDA: ordo::gpu was built with CUDA, so
#                        requiring it must fail, saying why
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

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run("install of ordo" ${CMAKE_COMMAND} --install ${ORDO_BUILD_DIR} --prefix ${prefix})

set(consumer_args -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CONSUMER_CXX})
if(HIDE_CUDA)
  list(APPEND consumer_args -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
endif()
run("configuring the consumer (components: core ${COMPONENTS})"
    ${CMAKE_COMMAND} -S ${ORDO_SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/build ${consumer_args}
    -DORDO_CONSUMER_COMPONENTS=${components_arg} -DORDO_CONSUMER_HEADERS=${HEADERS})
run("building the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build --parallel 2)
foreach(program IN ITEMS core ${COMPONENTS})
  run("consumer_${program}" ${WORK_DIR}/build/consumer_${program} ${WORK_DIR})
  message(STATUS "  ${last_output}")
endforeach()

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

# kiln serve / loadgen end to end (tests/serve/*.sh): a server on a free loopback port driven by
# curl, a Python urllib client and kiln loadgen. The load test is not run under the sanitizers
# (10,000 requests); the others are.
file(GLOB SERVE_TESTS CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_*.sh)
foreach(t ${SERVE_TESTS})
  get_filename_component(name ${t} NAME_WE)
  add_test(NAME serve/${name} COMMAND ${t} $<TARGET_FILE:kiln> WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(serve/${name} PROPERTIES LABELS "serve;sanitize" TIMEOUT 300)
endforeach()
set_tests_properties(serve/test_load PROPERTIES LABELS "serve")

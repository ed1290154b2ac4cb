# dsa_add_test(name SOURCES a.cc b.cc [LABELS gpu slow] [LIBS extra])
# One GoogleTest binary per area; every test case is registered with ctest.
if(DSA_BUILD_TESTS)
  enable_testing()
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

function(dsa_add_test name)
  if(NOT DSA_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LABELS;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE dsa_testing GTest::gtest GTest::gtest_main ${ARG_LIBS})
  # Tests that read the shipped model or test data find it from the source tree.
  target_compile_definitions(${name} PRIVATE DSA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set(labels cpu)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  # A GPU test that skips itself (no device) is reported by ctest as skipped, not as passed.
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST TEST_LIST ${name}_TESTS
                       PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device"
                       DISCOVERY_TIMEOUT 60)
  # Labels are not passed through gtest_discover_tests: it writes PROPERTIES out unquoted, so a
  # second label ("cpu;slow") was read as a property name and lost. Instead ctest runs this file
  # after the discovery include (TEST_INCLUDE_FILES keeps the order) and sets the whole list on
  # the discovered tests. tests/labels checks that `ctest -L` keeps working.
  file(CONFIGURE OUTPUT "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake" CONTENT
       "if(NOT \"\${${name}_TESTS}\" STREQUAL \"\")
  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${labels}\")
endif()
" @ONLY)
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES
                                         "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake")
endfunction()

# dsa_add_bench(name SOURCES a.cc [LIBS extra]): a Google Benchmark binary, never a test.
function(dsa_add_bench name)
  if(NOT DSA_BUILD_BENCH)
    return()
  endif()
  find_package(benchmark REQUIRED)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE benchmark::benchmark ${ARG_LIBS})
endfunction()

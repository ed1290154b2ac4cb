# The engine's sampler (SPEC.md §6.2, §6.3): Philox-4x32-10 noise, position-keyed Gumbel-max
# sampling with temperature / top-k / top-p, and draft acceptance. Included by
# dsa/engine/CMakeLists.txt; paths are relative to this file so the include site does not matter.
add_library(dsa_sampler STATIC ${CMAKE_CURRENT_LIST_DIR}/sampler.cc
                               ${CMAKE_CURRENT_LIST_DIR}/acceptance.cc)
target_link_libraries(dsa_sampler PUBLIC dsa_core PRIVATE dsa_warnings)

dsa_add_test(sampler_test
             SOURCES ${CMAKE_CURRENT_LIST_DIR}/philox_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/sampler_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/sampler_distribution_test.cc
                     ${CMAKE_CURRENT_LIST_DIR}/acceptance_test.cc
             LIBS dsa_sampler)

# dsa_add_op(name SOURCES a.cc ... [LIBS ...] [CHECK_SOURCES a_check.cc ...]
#            [CUDA_SOURCES a.cu ...]): one static library per op (dsa_op_<name>), so an op's tests
# link only what they test; with nvcc, its CUDA kernels go into dsa_op_<name>_cuda. dsa_kernels
# (the op table) links them all.
# CHECK_SOURCES (the op's `dsa check` entries and the independent formulations they compare with)
# go into dsa_op_<name>_check, the one op library that links dsa_testing; dsa_kernels_check
# gathers them for the CLI and the tests, so production code never carries test code.
function(dsa_add_op name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;CHECK_SOURCES;CUDA_SOURCES" ${ARGN})
  add_library(dsa_op_${name} STATIC ${ARG_SOURCES})
  target_link_libraries(dsa_op_${name} PUBLIC dsa_core ${ARG_LIBS} PRIVATE dsa_warnings)
  set_property(GLOBAL APPEND PROPERTY DSA_OP_LIBRARIES dsa_op_${name})
  if(ARG_CHECK_SOURCES)
    add_library(dsa_op_${name}_check STATIC ${ARG_CHECK_SOURCES})
    target_link_libraries(dsa_op_${name}_check PUBLIC dsa_op_${name} dsa_testing
                          PRIVATE dsa_warnings)
    set_property(GLOBAL APPEND PROPERTY DSA_OP_CHECK_LIBRARIES dsa_op_${name}_check)
  endif()
  if(DSA_HAVE_CUDA AND ARG_CUDA_SOURCES)
    add_library(dsa_op_${name}_cuda STATIC ${ARG_CUDA_SOURCES})
    target_link_libraries(dsa_op_${name}_cuda PUBLIC dsa_op_${name} dsa_cuda)
    target_compile_options(dsa_op_${name}_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${DSA_CUDA_FLAGS}>)
    set_property(GLOBAL APPEND PROPERTY DSA_OP_CUDA_LIBRARIES dsa_op_${name}_cuda)
  endif()
endfunction()

# dsa_add_gpu_test(name SOURCES ... [LIBS ...]): a `gpu`-labelled GoogleTest binary, built only
# with nvcc; its tests skip with "SKIPPED: no CUDA device" when none is present.
function(dsa_add_gpu_test name)
  if(NOT DSA_HAVE_CUDA)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  dsa_add_test(${name} SOURCES ${ARG_SOURCES} LABELS gpu LIBS dsa_testing_gpu ${ARG_LIBS})
endfunction()

# dsa_add_cuda_bench(name SOURCES ... [LIBS ...]): a benchmark binary (never a test), CUDA builds.
function(dsa_add_cuda_bench name)
  if(NOT DSA_HAVE_CUDA OR NOT DSA_BUILD_BENCH)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE dsa_cuda dsa_testing ${ARG_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/bench)
endfunction()

# dsa_add_op(name SOURCES a.cc ...): one static library per op (dsa_op_<name>), so an op's tests
# link only what they test; dsa_kernels (the op table) links them all.
function(dsa_add_op name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_library(dsa_op_${name} STATIC ${ARG_SOURCES})
  target_link_libraries(dsa_op_${name} PUBLIC dsa_core ${ARG_LIBS} PRIVATE dsa_warnings)
  set_property(GLOBAL APPEND PROPERTY DSA_OP_LIBRARIES dsa_op_${name})
endfunction()

# The import picture as ctests (scripts/check_layers.sh): `layers_includes` reads every
# #include "dsa/..." of the tree, `layers_links` reads the link graph written here, so a
# production library that links dsa_testing fails a test, not a code review.

# Appends to `out` the build-system targets of `dir` and of every directory below it.
function(dsa_collect_targets dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    dsa_collect_targets(${sub} below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# dsa_write_link_graph(file): one line per target, "<target> <type> <dep>;<dep>;...", the deps as
# written in LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES (what CMake links, before generator
# expressions are evaluated). Call it after every target is declared.
function(dsa_write_link_graph file)
  dsa_collect_targets(${PROJECT_SOURCE_DIR} targets)
  set(graph "")
  foreach(target ${targets})
    get_target_property(type ${target} TYPE)
    set(deps "")
    foreach(property LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(value ${target} ${property})
      if(value)
        list(APPEND deps ${value})
      endif()
    endforeach()
    string(APPEND graph "${target} ${type} ${deps}\n")
  endforeach()
  file(WRITE ${file} "${graph}")
endfunction()

function(dsa_add_layer_tests)
  if(NOT DSA_BUILD_TESTS)
    return()
  endif()
  set(graph ${PROJECT_BINARY_DIR}/dsa_link_graph.txt)
  dsa_write_link_graph(${graph})
  set(script ${PROJECT_SOURCE_DIR}/scripts/check_layers.sh)
  add_test(NAME layers_includes COMMAND bash ${script} includes ${PROJECT_SOURCE_DIR})
  add_test(NAME layers_links COMMAND bash ${script} links ${graph})
  set_tests_properties(layers_includes layers_links PROPERTIES LABELS cpu)
endfunction()

# Warnings for every C++ target of the project. -Werror=switch-enum makes an enum switch that
# forgets a value a build error (SPEC.md §4.1, bug class 3).
add_library(dsa_warnings INTERFACE)
target_compile_options(dsa_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Werror=switch-enum -Werror=return-type>)

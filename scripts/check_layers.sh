#!/usr/bin/env bash
# Proves the import picture of docs/architecture.md; ctest runs both halves (label cpu).
#
#   check_layers.sh includes SOURCE_DIR   every #include "dsa/..." under SOURCE_DIR/dsa obeys:
#     1. Layers include only their own or lower layers:
#          cli > server > engine > model > dist > runtime > kernels > cuda > core.
#     2. dsa/testing (comparisons, random inputs, pools, the GPU skip) sits beside the layers. It is
#        included only by test-side files: *_test.cc, *_test_*.h (test utils, test cases),
#        *_bench.cc, and in kernels/ and runtime/ the check code: *_check.h, *_check.cc and the
#        check worlds *_world.h. dsa/testing itself includes only testing, core, cuda and
#        kernels/common (the cache layouts its pools fill).
#     3. Inside kernels/: kernels/common includes only kernels/common. A file of an op folder
#        kernels/<op>/ includes kernels/common, its own folder, and of another op folder only its
#        op headers -- a header that declares `Status validate(const <Op>Params&)`, the op's public
#        contract (an op built on another, e.g. moe_dispatch on linear; a test comparing two ops).
#        Kernels, internal formulas and check code of an op stay private to its folder. The op
#        table (kernels/op_table.*) may include every op header.
#     4. Every included file exists.
#
#   check_layers.sh links GRAPH_FILE      no production library reaches dsa_testing (or GoogleTest)
#     through its link dependencies. GRAPH_FILE is written at configure time by
#     dsa_write_link_graph (cmake/DsaLayers.cmake): one line per target, "<target> <type> <deps>",
#     deps as written in LINK_LIBRARIES and INTERFACE_LINK_LIBRARIES. Production libraries:
#     dsa_core, dsa_cuda, dsa_op_* (not dsa_op_*_check), dsa_kernels, dsa_runtime, dsa_dist,
#     dsa_model_io, dsa_model, dsa_engine, dsa_server (when built). Check libraries (dsa_op_*_check,
#     dsa_kernels_check, dsa_runtime_check) are linked only by the CLI and the tests.
#
# Each violation is printed (file and include, or the link chain); the exit status is 1 if any.
set -uo pipefail

declare -A kRank=([core]=0 [cuda]=1 [kernels]=2 [runtime]=3 [dist]=4 [model]=5 [engine]=6 [server]=7
                  [cli]=8)

is_test_side() {  # path relative to the source dir
  local path=$1 base=${1##*/}
  case $base in
    *_test.cc | *_test_*.h | *_bench.cc) return 0 ;;
  esac
  case $path in
    dsa/kernels/* | dsa/runtime/*)
      case $base in
        *_check.h | *_check.cc | *_world.h) return 0 ;;
      esac
      ;;
  esac
  return 1
}

declare -A op_header_cache
is_op_header() {  # path relative to the source dir
  if [[ -z ${op_header_cache[$1]+set} ]]; then
    op_header_cache[$1]=no
    [[ $1 == *.h ]] && grep -qE 'Status validate\(const [A-Za-z0-9_]+Params&' "$1" &&
      op_header_cache[$1]=yes
  fi
  [[ ${op_header_cache[$1]} == yes ]]
}

# Prints why `file` may not include `inc` (both relative to the source dir); nothing if it may.
include_violation() {
  local file=$1 inc=$2
  [[ -f $inc ]] || { echo "the included file does not exist"; return; }
  local src=${file#dsa/} dst=${inc#dsa/}
  src=${src%%/*} dst=${dst%%/*}
  if [[ $dst == testing ]]; then
    [[ $src == testing ]] || is_test_side "$file" ||
      echo "only tests, benches and check code may include dsa/testing"
    return
  fi
  if [[ $src == testing ]]; then
    case $inc in
      dsa/core/* | dsa/cuda/* | dsa/kernels/common/*) ;;
      *) echo "dsa/testing may include only core, cuda and kernels/common" ;;
    esac
    return
  fi
  [[ -n ${kRank[$dst]+set} ]] || { echo "'$dst' is not a layer"; return; }
  [[ -n ${kRank[$src]+set} ]] || { echo "'$src' is not a layer"; return; }
  if ((kRank[$dst] > kRank[$src])); then
    echo "$src may not include the higher layer $dst"
    return
  fi
  [[ $src == kernels && $dst == kernels ]] || return
  local src_dir=${file%/*} dst_dir=${inc%/*}
  [[ $src_dir == dsa/kernels ]] && return                 # the op table
  [[ $dst_dir == dsa/kernels/common ]] && return
  if [[ $src_dir == dsa/kernels/common ]]; then
    echo "kernels/common may include only kernels/common"
  elif [[ $dst_dir == dsa/kernels ]]; then
    echo "an op folder may not include the op table"
  elif [[ $dst_dir != "$src_dir" ]] && ! is_op_header "$inc"; then
    echo "another op folder is included only through its op headers (Status validate(...Params&))"
  fi
}

check_includes() {
  cd "$1" || exit 2
  local failures=0 count=0 file line inc why
  while IFS=: read -r file line inc; do
    inc=${inc#*\"}
    inc=${inc%%\"*}
    count=$((count + 1))
    why=$(include_violation "$file" "$inc")
    if [[ -n $why ]]; then
      echo "$file:$line: #include \"$inc\": $why"
      failures=$((failures + 1))
    fi
  done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]+"dsa/' dsa \
             --include='*.h' --include='*.cc' --include='*.cu' --include='*.cuh' | sort)
  if ((count == 0)); then
    echo "check_layers includes: no #include \"dsa/...\" found under $1/dsa"
    return 1
  fi
  if ((failures > 0)); then
    echo "check_layers includes: $failures of $count includes break the layer rules"
    return 1
  fi
  echo "check_layers includes: $count includes, all within the layer rules"
}

check_links() {
  local graph=$1
  [[ -f $graph ]] || { echo "check_layers links: no link graph at $graph"; return 2; }
  declare -A deps=()
  local target type list tok
  while read -r target type list; do
    deps[$target]=""
    for tok in ${list//;/ }; do
      tok=${tok//'$<LINK_ONLY:'/}
      tok=${tok//>/}
      [[ -z $tok || $tok == ::@* ]] && continue
      deps[$target]+=" $tok"
    done
  done <"$graph"

  local production=() required
  for required in dsa_core dsa_kernels dsa_runtime dsa_dist dsa_model_io dsa_model dsa_engine; do
    [[ -n ${deps[$required]+set} ]] ||
      { echo "check_layers links: production library $required is not in $graph"; return 1; }
  done
  for target in "${!deps[@]}"; do
    case $target in
      *_check) ;;
      dsa_core | dsa_cuda | dsa_op_* | dsa_kernels | dsa_runtime | dsa_dist | dsa_dist_nccl | \
        dsa_model_io | dsa_model | dsa_engine | dsa_server) production+=("$target") ;;
    esac
  done

  local failures=0 start node next queue
  for start in $(printf '%s\n' "${production[@]}" | sort); do
    declare -A parent=([$start]="")
    queue=("$start")
    while ((${#queue[@]} > 0)); do
      node=${queue[0]}
      queue=("${queue[@]:1}")
      if [[ $node == dsa_testing || $node == GTest::* ]]; then
        local chain=$node
        while [[ -n ${parent[$node]} ]]; do
          node=${parent[$node]}
          chain="$node -> $chain"
        done
        echo "production library $start links test code: $chain"
        failures=$((failures + 1))
        break
      fi
      for next in ${deps[$node]:-}; do
        [[ -n ${parent[$next]+set} ]] && continue
        parent[$next]=$node
        queue+=("$next")
      done
    done
    unset parent
  done
  if ((failures > 0)); then
    echo "check_layers links: $failures production libraries link dsa_testing or GoogleTest"
    return 1
  fi
  echo "check_layers links: ${#production[@]} production libraries, none links dsa_testing"
}

case ${1:-} in
  includes) check_includes "${2:?source dir}" ;;
  links) check_links "${2:?link graph file}" ;;
  *)
    echo "usage: check_layers.sh includes SOURCE_DIR | links GRAPH_FILE" >&2
    exit 2
    ;;
esac

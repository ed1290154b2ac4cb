#!/usr/bin/env bash
# clang-format every C++/CUDA source; --check reports unformatted files instead of fixing them.
set -euo pipefail
cd "$(dirname "$0")/.."
files=$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror $files
else
  clang-format -i $files
fi

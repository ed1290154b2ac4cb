#!/usr/bin/env bash
# Builds dsa and runs every test. GPU tests (label `gpu`) print SKIPPED without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
cd "${DSA_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)"

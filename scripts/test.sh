#!/usr/bin/env bash
# Builds dsa and runs every test. GPU tests (label `gpu`) print SKIPPED without a device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
cd "${DSA_BUILD_DIR:-build}"
# SPEC.md §1.3: tests run in checked mode (release builds of the CLI default to unchecked).
export DSA_CHECKED="${DSA_CHECKED:-1}"
ctest --output-on-failure -j "$(nproc)"

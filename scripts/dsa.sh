#!/usr/bin/env bash
# Builds dsa if needed, then runs `dsa <arguments>`, e.g. `scripts/dsa.sh check`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/build.sh" >/dev/null
exec "$root/${DSA_BUILD_DIR:-build}/dsa/cli/dsa" "$@"

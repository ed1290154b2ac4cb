#!/usr/bin/env bash
# Installs the Debian packages dsa builds with. Idempotent and quiet when everything is present.
set -euo pipefail

packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libbenchmark-dev
          libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev clang-format libpcre2-dev
          libcpp-httplib-dev prometheus-cpp-dev  # dsa serve: HTTP, /metrics
          python3 jq curl)  # tests/cli: python3 checks generate --json, jq perplexity --json;
                            # tests/server: curl

missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

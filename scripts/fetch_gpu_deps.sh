#!/usr/bin/env bash
# Unpacks Debian's libpcre2-dev into .deps/pcre2 for the lent GPU machine, whose image lacks it
# (it has no network). Run here before a device call that carries .deps.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps/pcre2
tmp=$(mktemp -d)
(cd "$tmp" && apt-get download libpcre2-dev >/dev/null)
dpkg -x "$tmp"/libpcre2-dev_*.deb .deps/pcre2
rm -rf "$tmp"

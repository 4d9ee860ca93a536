#!/usr/bin/env bash
# Puts tinyshakespeare.txt into DIR (default .colo-quickstart/data): copied from ../shared/data
# when this checkout has it, or from .colo-quickstart/data (the quick start's copy, which a
# machine without a network can be given), else downloaded from its public location; the sha256
# is checked either way and a mismatch leaves nothing behind.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${1:-$SRC/.colo-quickstart/data}
URL=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
SHA=86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed
OUT="$DIR/tinyshakespeare.txt"
mkdir -p "$DIR"
if [ -f "$OUT" ] && echo "$SHA  $OUT" | sha256sum -c --status; then
  echo "fetch-data: $OUT is present"
  exit 0
fi
if [ -f "$SRC/../shared/data/tinyshakespeare.txt" ]; then
  cp "$SRC/../shared/data/tinyshakespeare.txt" "$OUT.tmp"
elif [ -f "$SRC/.colo-quickstart/data/tinyshakespeare.txt" ]; then
  cp "$SRC/.colo-quickstart/data/tinyshakespeare.txt" "$OUT.tmp"
else
  echo "fetch-data: downloading $URL"
  if ! curl -fsSL --retry 2 -o "$OUT.tmp" "$URL"; then
    rm -f "$OUT.tmp"
    echo "fetch-data: cannot download $URL" >&2
    exit 1
  fi
fi
if ! echo "$SHA  $OUT.tmp" | sha256sum -c --status; then
  rm -f "$OUT.tmp"
  echo "fetch-data: checksum mismatch for tinyshakespeare.txt (expected $SHA)" >&2
  exit 1
fi
mv "$OUT.tmp" "$OUT"
echo "fetch-data: $OUT ($(wc -c <"$OUT") bytes, sha256 ok)"

#!/usr/bin/env bash
# The reference for colo's GGUF export, from the npm registry at a pinned version: llama.cpp itself,
# as node-llama-cpp ships it prebuilt for Linux x64 (its CPU build; no GPU and no compiler needed).
# Installs it once into COLO_GGUFREF (default ~/.cache/colo-test/ggufref-1) and prints that folder;
# exits 1, saying why, when node, npm or the registry is not there, and 2 when node is older
# than node-llama-cpp's 20 or the machine is not x86_64.
set -euo pipefail
REF=${COLO_GGUFREF:-${HOME:-/tmp}/.cache/colo-test/ggufref-1}
# the platform's prebuilt binaries are an optional dependency: named, and the others (CUDA,
# Vulkan, ARM: 650 MB) left out; no install scripts (node-llama-cpp's would look for a GPU build)
PKGS=(node-llama-cpp@3.21.1 @node-llama-cpp/linux-x64@3.21.1)
have() {
  [ -f "$REF/node_modules/node-llama-cpp/dist/index.js" ] &&
    [ -d "$REF/node_modules/@node-llama-cpp/linux-x64/bins" ]
}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "ggufref: no node and npm to run llama.cpp (node-llama-cpp)" >&2
  exit 1
fi
# node-llama-cpp needs node 20 or newer (Debian 12's nodejs is 18): exit 2, a machine that cannot
# run the reference rather than one that failed to fetch it
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ]; then
  echo "ggufref: node $(node --version 2>/dev/null) is older than the 20 that node-llama-cpp needs" >&2
  exit 2
fi
if [ "$(uname -m)" != x86_64 ]; then
  echo "ggufref: node-llama-cpp's prebuilt llama.cpp used here is for x86_64, not $(uname -m)" >&2
  exit 2
fi
if ! have; then
  mkdir -p "$REF"
  if ! out=$(npm install --prefix "$REF" --no-audit --no-fund --no-save --omit=optional --ignore-scripts \
    "${PKGS[@]}" 2>&1) || ! have; then
    echo "ggufref: npm install ${PKGS[*]}: ${out: -400}" >&2
    exit 1
  fi
fi
echo "$REF"

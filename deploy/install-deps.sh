#!/usr/bin/env bash
# Installs every build and test dependency of colo from Debian's packages.
# Idempotent and non-interactive: packages already present are left alone.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config git ca-certificates curl
  libuv1-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libsqlite3-dev sqlite3 libsystemd-dev systemd libyaml-dev libcjson-dev
  libopenblas-dev libssl-dev libgomp1 libpcre2-dev zlib1g-dev libzstd-dev
  # Unicode normalization (NFC) for tokenizers that ask for it (Qwen2's)
  libicu-dev
  # tests: zstd's own compressor, for prepare's *.zst inputs
  zstd
  # colod's Prometheus endpoint, and its job notifications (notify_url)
  libmicrohttpd-dev libcurl4-openssl-dev
  # tests: a third-party gRPC client, protoc for its Python messages
  python3 python3-grpcio python3-protobuf protobuf-compiler
  # tests: a third-party reader of colod's /metrics (Prometheus' own text-format parser)
  python3-prometheus-client
  # tests: the PyTorch reference for the engine
  python3-torch python3-numpy
  # tests: Unicode classes for the reference of GPT-2's pre-tokenizer
  python3-regex
  # tests: jinja2, the reference for colo's Jinja (chat templates)
  python3-jinja2
  procps iproute2 clang-format
  # deploy/tls-certs.sh, and the TLS tests
  openssl
)

# tests: node and npm, to run HuggingFace's tokenizers.js (fetched from npm by the test) as the
# reference for tokenizer.json; any node of 18 or later does, Debian's or another's already there
command -v node >/dev/null && command -v npm >/dev/null || PKGS+=(nodejs npm)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Certificates for colo's mutual TLS, made with openssl (ECDSA P-256):
#
#   deploy/tls-certs.sh ca DIR                   a cluster CA: DIR/ca.crt, DIR/ca.key
#   deploy/tls-certs.sh server DIR NAME [SAN...] DIR/NAME.crt and .key for colod, signed by the
#                                                CA, for the names and addresses colod is reached
#                                                at (DNS:host.example, IP:10.0.0.1; default:
#                                                DNS:localhost, IP:127.0.0.1 and this host's name)
#   deploy/tls-certs.sh worker DIR NODE          DIR/NODE.crt and .key for a node's worker: it
#                                                registers only as NODE
#   deploy/tls-certs.sh user DIR NAME            for a user of coloctl: jobs, logs, hosts
#   deploy/tls-certs.sh admin DIR NAME           for an operator: a user who may also cordon
#
# The role is the certificate's OU (colod's tls_roles, on by default, enforces it).
# colod:        tls_cert: DIR/colod.crt, tls_key: DIR/colod.key, tls_client_ca: DIR/ca.crt
# colo-workerd: --tls-ca DIR/ca.crt --tls-cert DIR/NODE.crt --tls-key DIR/NODE.key
# coloctl:      COLO_TLS_CA, COLO_TLS_CERT, COLO_TLS_KEY (or --tls-ca, --tls-cert, --tls-key)
#
# Keys are written 0600 and never overwritten: a name that exists already is an error.
set -euo pipefail

usage() {
  sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}
die() {
  echo "tls-certs.sh: $*" >&2
  exit 1
}
command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"
[ $# -ge 1 ] || usage
case "$1" in -h | --help) usage 0 ;; esac
[ $# -ge 2 ] || usage
cmd=$1 dir=$2
shift 2
DAYS=${COLO_TLS_DAYS:-825}

valid_name() { [[ "$1" =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] || die "bad name \"$1\" (letters, digits, . _ -)"; }
fresh() { # the files a command would write must not exist yet
  local f
  for f in "$@"; do [ ! -e "$f" ] || die "$f exists already; not overwritten"; done
}
new_key() { # path
  (umask 077 && openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null) ||
    die "cannot make a key at $1"
}
need_ca() {
  [ -f "$dir/ca.crt" ] && [ -f "$dir/ca.key" ] || die "no CA in $dir: run 'tls-certs.sh ca $dir' first"
}
# sign NAME ROLE EXTFILE: DIR/NAME.key's certificate, signed by the CA, with ROLE as its OU and
# the extensions in EXTFILE
sign() {
  local name=$1 role=$2 ext=$3 csr
  csr=$(mktemp)
  openssl req -new -key "$dir/$name.key" -subj "/CN=$name/O=colo/OU=$role" -out "$csr" 2>/dev/null ||
    die "cannot make a request for $name"
  openssl x509 -req -in "$csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
    -days "$DAYS" -sha256 -extfile "$ext" -out "$dir/$name.crt" 2>/dev/null ||
    die "cannot sign the certificate of $name"
  rm -f "$csr" "$ext"
}

case "$cmd" in
ca)
  mkdir -p "$dir"
  fresh "$dir/ca.crt" "$dir/ca.key"
  new_key "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -subj "/CN=colo cluster CA/O=colo" -days "$DAYS" \
    -sha256 -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.crt" 2>/dev/null || die "cannot make the CA certificate"
  echo "$dir/ca.crt"
  ;;
server | worker | user | admin)
  [ $# -ge 1 ] || usage
  name=$1
  shift
  valid_name "$name"
  need_ca
  fresh "$dir/$name.crt" "$dir/$name.key"
  ext=$(mktemp)
  if [ "$cmd" = server ]; then
    sans=("$@")
    [ ${#sans[@]} -gt 0 ] || sans=(DNS:localhost IP:127.0.0.1 "DNS:$(hostname)")
    for s in "${sans[@]}"; do
      [[ "$s" =~ ^(DNS|IP):[A-Za-z0-9.:*_-]+$ ]] || die "bad name \"$s\" (DNS:host or IP:address)"
    done
    san=$(IFS=,; echo "${sans[*]}")
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
      "$san" >"$ext"
  else
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\nsubjectAltName=DNS:%s\n' \
      "$name" >"$ext"
  fi
  new_key "$dir/$name.key"
  sign "$name" "$cmd" "$ext"
  echo "$dir/$name.crt"
  ;;
*) usage ;;
esac

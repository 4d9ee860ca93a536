/* TLS credentials from PEM files, for the server and the client (gRPC's SSL credentials, which
 * copy what they are given). */
#include "rpc.h"
#include "rpc_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>

#include "../common/error.h"

#define PEM_MAX (1u << 20)

static int set(const char *s) {
  return s && s[0];
}

/* The whole of a PEM file, NUL-terminated, or NULL with err filled in. */
static char *read_pem(const char *what, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errlen, "cannot read the TLS %s %s: %s", what, path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(PEM_MAX + 1);
  size_t n = buf ? fread(buf, 1, PEM_MAX + 1, f) : 0;
  int bad = !buf || ferror(f);
  fclose(f);
  if (bad) {
    snprintf(err, errlen, "cannot read the TLS %s %s", what, path);
  } else if (n > PEM_MAX) {
    snprintf(err, errlen, "the TLS %s %s is larger than 1 MiB", what, path);
    bad = 1;
  } else {
    buf[n] = '\0';
    if (!strstr(buf, "-----BEGIN ")) {
      snprintf(err, errlen, "the TLS %s %s is not a PEM file", what, path);
      bad = 1;
    }
  }
  if (bad) {
    free(buf);
    return NULL;
  }
  return buf;
}

typedef struct {
  char *ca, *cert, *key;
} pems_t;

static void pems_free(pems_t *p) {
  free(p->ca);
  free(p->cert);
  if (p->key) /* a private key: not left in freed memory */
    memset(p->key, 0, strlen(p->key));
  free(p->key);
}

static int pems_read(const colo_rpc_tls_t *t, int need_pair, pems_t *p, char *err, size_t errlen) {
  memset(p, 0, sizeof *p);
  if (set(t->cert) != set(t->key)) {
    snprintf(err, errlen, "a TLS certificate and its key go together: %s is set without %s",
             set(t->cert) ? "the certificate" : "the key",
             set(t->cert) ? "the key" : "the certificate");
    return COLO_EINVAL;
  }
  if (need_pair && !set(t->cert)) {
    snprintf(err, errlen, "TLS needs a certificate and its key");
    return COLO_EINVAL;
  }
  if ((set(t->ca) && !(p->ca = read_pem("CA certificate", t->ca, err, errlen))) ||
      (set(t->cert) && !(p->cert = read_pem("certificate", t->cert, err, errlen))) ||
      (set(t->key) && !(p->key = read_pem("key", t->key, err, errlen)))) {
    pems_free(p);
    return COLO_EIO;
  }
  return 0;
}

int colo_rpc_tls_enabled(const colo_rpc_tls_t *t) {
  return t && (set(t->ca) || set(t->cert) || set(t->key));
}

int colo_rpc_tls_from_env(colo_rpc_tls_t *t) {
  const char *v;
  if ((v = getenv("COLO_TLS_CA")) && v[0] && !set(t->ca))
    t->ca = v;
  if ((v = getenv("COLO_TLS_CERT")) && v[0] && !set(t->cert))
    t->cert = v;
  if ((v = getenv("COLO_TLS_KEY")) && v[0] && !set(t->key))
    t->key = v;
  if ((v = getenv("COLO_TLS_SERVER_NAME")) && v[0] && !set(t->server_name))
    t->server_name = v;
  return colo_rpc_tls_enabled(t);
}

int colo_rpc_tls_server_creds(const colo_rpc_tls_t *t, grpc_server_credentials **out, char *err,
                              size_t errlen) {
  pems_t p;
  int rc = pems_read(t, 1, &p, err, errlen);
  if (rc < 0)
    return rc;
  grpc_ssl_pem_key_cert_pair pair = {p.key, p.cert};
  *out = grpc_ssl_server_credentials_create_ex(
      p.ca, &pair, 1,
      p.ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
           : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
      NULL);
  pems_free(&p);
  if (!*out) {
    snprintf(err, errlen, "cannot make TLS server credentials from %s and %s", t->cert, t->key);
    return COLO_EINVAL;
  }
  return 0;
}

int colo_rpc_tls_channel_creds(const colo_rpc_tls_t *t, grpc_channel_credentials **out, char *err,
                               size_t errlen) {
  pems_t p;
  int rc = pems_read(t, 0, &p, err, errlen);
  if (rc < 0)
    return rc;
  grpc_ssl_pem_key_cert_pair pair = {p.key, p.cert};
  *out = grpc_ssl_credentials_create(p.ca, p.cert ? &pair : NULL, NULL, NULL);
  pems_free(&p);
  if (!*out) {
    snprintf(err, errlen, "cannot make TLS credentials");
    return COLO_EINVAL;
  }
  return 0;
}

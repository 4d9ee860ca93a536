/* TLS credentials from PEM files, for the server and the client (gRPC's SSL credentials, which
 * copy what they are given). */
#include "rpc.h"
#include "rpc_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/grpc_security.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

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

/* What gRPC would find only at a handshake: each file holds what it should, and the key is the
 * certificate's (OpenSSL, which gRPC uses too; its error queue is left empty). */
static int pems_check(const colo_rpc_tls_t *t, const pems_t *p, char *err, size_t errlen) {
  int rc = 0;
  X509 *x = NULL;
  EVP_PKEY *k = NULL;
  BIO *b;
  if (p->ca && (b = BIO_new_mem_buf(p->ca, -1))) {
    X509 *ca = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    if (!ca) {
      snprintf(err, errlen, "the TLS CA certificate %s holds no certificate", t->ca);
      rc = COLO_EINVAL;
    }
    X509_free(ca);
  }
  if (rc == 0 && p->cert && (b = BIO_new_mem_buf(p->cert, -1))) {
    x = PEM_read_bio_X509(b, NULL, NULL, NULL);
    BIO_free(b);
    if (!x) {
      snprintf(err, errlen, "the TLS certificate %s holds no certificate", t->cert);
      rc = COLO_EINVAL;
    }
  }
  if (rc == 0 && p->key && (b = BIO_new_mem_buf(p->key, -1))) {
    k = PEM_read_bio_PrivateKey(b, NULL, NULL, NULL);
    BIO_free(b);
    if (!k) {
      snprintf(err, errlen, "the TLS key %s holds no private key (or one locked with a passphrase)",
               t->key);
      rc = COLO_EINVAL;
    }
  }
  if (rc == 0 && x && k && X509_check_private_key(x, k) != 1) {
    snprintf(err, errlen, "the TLS key %s is not the key of the certificate %s", t->key, t->cert);
    rc = COLO_EINVAL;
  }
  X509_free(x);
  EVP_PKEY_free(k);
  ERR_clear_error();
  return rc;
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
  int rc = pems_check(t, p, err, errlen);
  if (rc < 0)
    pems_free(p);
  return rc;
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

/* The server's files, for gRPC's fetcher: the next config, taken by the next handshake. gRPC
 * calls the fetcher on its own threads, hence the mutex. */
struct colo_rpc_tls_reload_s {
  uv_mutex_t mu;
  grpc_ssl_server_certificate_config *next; /* NULL: unchanged */
  int has_ca;                               /* fixed at start: the client certificate request */
};

static int server_config(const colo_rpc_tls_t *t, grpc_ssl_server_certificate_config **out,
                         char *err, size_t errlen) {
  pems_t p;
  int rc = pems_read(t, 1, &p, err, errlen);
  if (rc < 0)
    return rc;
  grpc_ssl_pem_key_cert_pair pair = {p.key, p.cert};
  *out = grpc_ssl_server_certificate_config_create(p.ca, &pair, 1);
  pems_free(&p);
  if (!*out) {
    snprintf(err, errlen, "cannot make a TLS server config from %s and %s", t->cert, t->key);
    return COLO_EINVAL;
  }
  return 0;
}

static grpc_ssl_certificate_config_reload_status fetch(void *data,
                                                       grpc_ssl_server_certificate_config **cfg) {
  colo_rpc_tls_reload_t *r = data;
  uv_mutex_lock(&r->mu);
  grpc_ssl_certificate_config_reload_status st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_UNCHANGED;
  if (r->next) {
    *cfg = r->next; /* gRPC owns it now */
    r->next = NULL;
    st = GRPC_SSL_CERTIFICATE_CONFIG_RELOAD_NEW;
  }
  uv_mutex_unlock(&r->mu);
  return st;
}

int colo_rpc_tls_server_creds(const colo_rpc_tls_t *t, grpc_server_credentials **out,
                              colo_rpc_tls_reload_t **reload, char *err, size_t errlen) {
  colo_rpc_tls_reload_t *r = calloc(1, sizeof *r);
  if (!r) {
    snprintf(err, errlen, "out of memory");
    return COLO_ENOMEM;
  }
  int rc = server_config(t, &r->next, err, errlen);
  if (rc < 0) {
    free(r);
    return rc;
  }
  uv_mutex_init(&r->mu);
  r->has_ca = set(t->ca);
  grpc_ssl_server_credentials_options *o =
      grpc_ssl_server_credentials_create_options_using_config_fetcher(
          r->has_ca ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                    : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
          fetch, r);
  *out = o ? grpc_ssl_server_credentials_create_with_options(o) : NULL;
  if (!*out) {
    colo_rpc_tls_reload_free(r);
    snprintf(err, errlen, "cannot make TLS server credentials from %s and %s", t->cert, t->key);
    return COLO_EINVAL;
  }
  *reload = r;
  return 0;
}

int colo_rpc_tls_reload(colo_rpc_tls_reload_t *r, const colo_rpc_tls_t *t, char *err,
                        size_t errlen) {
  if (set(t->ca) != r->has_ca) {
    snprintf(err, errlen, "a client CA cannot be %s without a restart",
             r->has_ca ? "removed" : "added");
    return COLO_EINVAL;
  }
  grpc_ssl_server_certificate_config *cfg;
  int rc = server_config(t, &cfg, err, errlen);
  if (rc < 0)
    return rc;
  uv_mutex_lock(&r->mu);
  if (r->next)
    grpc_ssl_server_certificate_config_destroy(r->next);
  r->next = cfg;
  uv_mutex_unlock(&r->mu);
  return 0;
}

void colo_rpc_tls_reload_free(colo_rpc_tls_reload_t *r) {
  if (!r)
    return;
  if (r->next)
    grpc_ssl_server_certificate_config_destroy(r->next);
  uv_mutex_destroy(&r->mu);
  free(r);
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

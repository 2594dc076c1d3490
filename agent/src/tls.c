/* TLS for the link to kilnd (tls.h). */
#define _GNU_SOURCE
#include "tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(KILN_AGENT_TLS)

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <time.h>

struct agent_tls {
  SSL_CTX* ctx;
};

struct tls_conn {
  SSL* ssl;
  int wants_read;
};

int tls_available(void) { return 1; }

/* OpenSSL's reason for the last failure, or `fallback`. */
static void openssl_error(char* err, size_t err_len, const char* what) {
  unsigned long e = ERR_get_error();
  char reason[256];
  if (e)
    ERR_error_string_n(e, reason, sizeof reason);
  else
    snprintf(reason, sizeof reason, "%s", errno ? strerror(errno) : "no reason given");
  snprintf(err, err_len, "%s: %s", what, reason);
  ERR_clear_error();
}

agent_tls* tls_client_new(const char* ca_file, char* err, size_t err_len) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  if (!ctx) {
    openssl_error(err, err_len, "cannot make a TLS context");
    return NULL;
  }
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
  int loaded = ca_file ? SSL_CTX_load_verify_locations(ctx, ca_file, NULL)
                       : SSL_CTX_set_default_verify_paths(ctx);
  if (loaded != 1) {
    char what[512];
    snprintf(what, sizeof what, "cannot load the CA certificates %s",
             ca_file ? ca_file : "of the system");
    openssl_error(err, err_len, what);
    SSL_CTX_free(ctx);
    return NULL;
  }
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  agent_tls* t = malloc(sizeof *t);
  if (!t) {
    SSL_CTX_free(ctx);
    snprintf(err, err_len, "out of memory");
    return NULL;
  }
  t->ctx = ctx;
  return t;
}

void tls_client_free(agent_tls* t) {
  if (!t) return;
  SSL_CTX_free(t->ctx);
  free(t);
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

tls_conn* tls_connect(agent_tls* t, int fd, const char* server_name, int timeout_ms, char* err,
                      size_t err_len) {
  tls_conn* c = calloc(1, sizeof *c);
  SSL* ssl = c ? SSL_new(t->ctx) : NULL;
  if (!ssl) {
    free(c);
    openssl_error(err, err_len, "cannot start TLS");
    return NULL;
  }
  c->ssl = ssl;
  SSL_set_fd(ssl, fd);
  /* The name the certificate must hold: an IP address or a host name (then also SNI). */
  unsigned char ip[16];
  int is_ip = inet_pton(AF_INET, server_name, ip) == 1 || inet_pton(AF_INET6, server_name, ip) == 1;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, server_name) != 1
            : (SSL_set_tlsext_host_name(ssl, server_name) != 1 ||
               SSL_set1_host(ssl, server_name) != 1)) {
    openssl_error(err, err_len, "cannot set the name to check");
    tls_close(c);
    return NULL;
  }
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int rc = SSL_connect(ssl);
    if (rc == 1) return c;
    int e = SSL_get_error(ssl, rc);
    uint64_t now = now_ms();
    if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || now >= deadline) {
      long verify = SSL_get_verify_result(ssl);
      if (verify != X509_V_OK) {
        snprintf(err, err_len, "the server's certificate is not trusted: %s",
                 X509_verify_cert_error_string(verify));
        ERR_clear_error();
      } else if (now >= deadline) {
        snprintf(err, err_len, "no TLS handshake within %d ms", timeout_ms);
      } else {
        openssl_error(err, err_len, "the TLS handshake failed (is the server's port TLS?)");
      }
      tls_close(c);
      return NULL;
    }
    struct pollfd p = {fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, 0};
    poll(&p, 1, (int)(deadline - now));
  }
}

/* -1 and errno for an SSL call that moved nothing. */
static ssize_t failed(tls_conn* c, int rc) {
  int e = SSL_get_error(c->ssl, rc);
  c->wants_read = e == SSL_ERROR_WANT_READ;
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return 0;
  if (e != SSL_ERROR_SYSCALL || errno == 0) errno = EPROTO;
  ERR_clear_error();
  return -1;
}

ssize_t tls_read(tls_conn* c, void* buf, size_t n) {
  size_t got = 0;
  int rc = SSL_read_ex(c->ssl, buf, n, &got);
  return rc == 1 ? (ssize_t)got : failed(c, rc);
}

ssize_t tls_write(tls_conn* c, const void* buf, size_t n) {
  size_t put = 0;
  int rc = SSL_write_ex(c->ssl, buf, n, &put);
  return rc == 1 ? (ssize_t)put : failed(c, rc);
}

int tls_wants_read(const tls_conn* c) { return c->wants_read; }

int tls_pending(const tls_conn* c) { return SSL_has_pending(c->ssl); }

void tls_close(tls_conn* c) {
  if (!c) return;
  SSL_free(c->ssl);
  free(c);
}

#else /* no TLS in this build */

int tls_available(void) { return 0; }

agent_tls* tls_client_new(const char* ca_file, char* err, size_t err_len) {
  (void)ca_file;
  snprintf(err, err_len, "this kiln-agent was built without TLS (OpenSSL)");
  return NULL;
}
void tls_client_free(agent_tls* t) { (void)t; }
tls_conn* tls_connect(agent_tls* t, int fd, const char* server_name, int timeout_ms, char* err,
                      size_t err_len) {
  (void)t, (void)fd, (void)server_name, (void)timeout_ms;
  snprintf(err, err_len, "this kiln-agent was built without TLS (OpenSSL)");
  return NULL;
}
ssize_t tls_read(tls_conn* c, void* buf, size_t n) {
  (void)c, (void)buf, (void)n;
  errno = ENOTSUP;
  return -1;
}
ssize_t tls_write(tls_conn* c, const void* buf, size_t n) {
  (void)c, (void)buf, (void)n;
  errno = ENOTSUP;
  return -1;
}
int tls_wants_read(const tls_conn* c) {
  (void)c;
  return 0;
}
int tls_pending(const tls_conn* c) {
  (void)c;
  return 0;
}
void tls_close(tls_conn* c) { (void)c; }

#endif

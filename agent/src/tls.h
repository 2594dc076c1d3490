/* TLS for the link to kilnd (OpenSSL), in builds that have it (KILN_AGENT_TLS; the static
   aarch64 build has none, and says so when asked for TLS). The token's HMAC is proved inside
   TLS as without it: TLS keeps the link private and shows the agent that the server holds a
   certificate it trusts. */
#ifndef KILN_AGENT_TLS_H
#define KILN_AGENT_TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct agent_tls agent_tls; /* what the agent trusts */
typedef struct tls_conn tls_conn;   /* one connection */

/* 1 when this build can talk TLS. */
int tls_available(void);

/* Trusts the CA certificates in `ca_file` (PEM), or the system's when NULL. NULL with a
   message when the file cannot be used or this build has no TLS. */
agent_tls* tls_client_new(const char* ca_file, char* err, size_t err_len);
void tls_client_free(agent_tls* t);

/* The TLS handshake on a connected non-blocking socket within timeout_ms, checking that the
   server's certificate names `server_name` (a host name or an IP address). NULL with a
   message otherwise. */
tls_conn* tls_connect(agent_tls* t, int fd, const char* server_name, int timeout_ms, char* err,
                      size_t err_len);

/* As recv and send on a non-blocking socket: bytes moved; 0 from tls_read when the server
   closed; -1 with errno EAGAIN when the socket must become readable (tls_wants_read) or
   writable first, other errno values for a broken connection. */
ssize_t tls_read(tls_conn* c, void* buf, size_t n);
ssize_t tls_write(tls_conn* c, const void* buf, size_t n);
int tls_wants_read(const tls_conn* c);
/* 1 when bytes received are held in the TLS layer: read them before polling the socket. */
int tls_pending(const tls_conn* c);

void tls_close(tls_conn* c); /* frees; the socket stays the caller's */

#endif

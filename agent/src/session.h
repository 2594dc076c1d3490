/* One connection to kilnd: dial, prove the token (and check kilnd's proof), then serve
   heartbeats and measure jobs until the connection ends. */
#ifndef KILN_AGENT_SESSION_H
#define KILN_AGENT_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "artifact_cache.h"
#include "device.h"
#include "tls.h"

typedef struct {
  const char* host;
  const char* port;
  const char* agent_id;
  const char* key;
  const uint8_t* token;
  size_t token_len;
  int slots;                   /* jobs at once */
  size_t max_frame;            /* the largest frame accepted from kilnd */
  agent_tls* tls;              /* TLS to kilnd, or NULL */
  const char* tls_server_name; /* the name kilnd's certificate must hold */
  device_info device;
} agent_config;

/* How a session ended. */
typedef enum {
  SESSION_UNREACHABLE, /* could not connect */
  SESSION_REFUSED,     /* kilnd refused the agent (token, version): retrying will not help soon */
  SESSION_LOST,        /* the connection broke or fell silent after the agent was welcomed */
  SESSION_STOPPED,     /* SIGTERM or SIGINT */
} session_end;

/* Set by the signal handler: the session ends at the next turn of its loop. */
extern volatile int agent_stopping;

/* Runs one session. `welcomed` is set once kilnd accepted the agent. */
session_end session_run(const agent_config* cfg, artifact_cache* cache, int* welcomed);

#endif

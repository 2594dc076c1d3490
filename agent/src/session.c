/* One connection to kilnd (session.h). */
#define _GNU_SOURCE
#include "session.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cpu_measure.h"
#include "elf_loader.h"
#include "frame.h"
#include "jobs.h"
#include "kiln/runtime.h"
#include "kiln/sha256.h"
#include "log.h"
#include "measure.h"

volatile int agent_stopping = 0;

enum { NONCE = 32, HANDSHAKE_MS = 10000, CONNECT_MS = 5000, MAX_SLOTS = 64, MAX_PENDING = 256 };

static const char* const kAgentVersion = "kiln-agent 0.1.0";

static uint64_t now_ms(void) { return kiln_now_ns() / 1000000u; }

/* A TCP connection to host:port within CONNECT_MS, or -1 with a message. */
static int dial(const char* host, const char* port, char* err, size_t err_len) {
  struct addrinfo* list = NULL;
#if defined(KILN_AGENT_STATIC)
  /* A static binary takes numeric addresses only: glibc's resolver needs its shared libraries
     at run time. */
  struct sockaddr_in v4 = {0};
  struct addrinfo numeric = {0};
  v4.sin_family = AF_INET;
  v4.sin_port = htons((uint16_t)atoi(port));
  if (inet_pton(AF_INET, host, &v4.sin_addr) != 1) {
    snprintf(err, err_len, "%s: a static kiln-agent takes a numeric IPv4 address", host);
    return -1;
  }
  numeric.ai_family = AF_INET;
  numeric.ai_socktype = SOCK_STREAM;
  numeric.ai_addr = (struct sockaddr*)&v4;
  numeric.ai_addrlen = sizeof v4;
  list = &numeric;
#else
  struct addrinfo hints = {0};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, port, &hints, &list);
  if (rc != 0) {
    snprintf(err, err_len, "cannot resolve %s: %s", host, gai_strerror(rc));
    return -1;
  }
#endif
  int fd = -1;
  snprintf(err, err_len, "no address for %s", host);
  for (struct addrinfo* a = list; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      snprintf(err, err_len, "%s", strerror(errno));
      close(fd);
      fd = -1;
      continue;
    }
    struct pollfd p = {fd, POLLOUT, 0};
    int ready = poll(&p, 1, CONNECT_MS);
    int so_error = 0;
    socklen_t len = sizeof so_error;
    if (ready <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) != 0 || so_error) {
      snprintf(err, err_len, "%s",
               ready == 0 ? "timed out" : strerror(so_error ? so_error : errno));
      close(fd);
      fd = -1;
    }
  }
#if !defined(KILN_AGENT_STATIC)
  freeaddrinfo(list);
#endif
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  }
  return fd;
}

/* The connection (TLS over it, or not) and what has arrived on it. */
typedef struct {
  int fd;
  tls_conn* tls;
  frame_reader reader;
  uint64_t last_heard_ms;
} conn;

/* Bytes received and not yet read from the socket's TLS layer. */
static int conn_pending(const conn* l) { return l->tls && tls_pending(l->tls); }

static int send_bytes(conn* l, const uint8_t* bytes, size_t len) {
  for (size_t done = 0; done < len;) {
    ssize_t w = l->tls ? tls_write(l->tls, bytes + done, len - done)
                       : send(l->fd, bytes + done, len - done, MSG_NOSIGNAL);
    if (w > 0) {
      done += (size_t)w;
    } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      short want = l->tls && tls_wants_read(l->tls) ? POLLIN : POLLOUT;
      struct pollfd p = {l->fd, want, 0};
      if (poll(&p, 1, 30000) <= 0 && errno != EINTR) return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

static int send_frame(conn* l, const agent_frame* f) {
  size_t len = 0;
  uint8_t* bytes = frame_pack(f, &len);
  if (!bytes) return -1;
  int rc = send_bytes(l, bytes, len);
  free(bytes);
  return rc;
}

/* Reads what has arrived. 0, or -1 when the connection closed or sent too much. */
static int receive(conn* l, char* err, size_t err_len) {
  for (;;) {
    uint8_t chunk[1 << 16];
    ssize_t got = l->tls ? tls_read(l->tls, chunk, sizeof chunk)
                         : recv(l->fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (got > 0) {
      l->last_heard_ms = now_ms();
      if (frame_reader_feed(&l->reader, chunk, (size_t)got, err, err_len) != 0) return -1;
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
    snprintf(err, err_len, "%s", got == 0 ? "kilnd closed the connection" : strerror(errno));
    return -1;
  }
}

/* The next frame within timeout_ms: 1 with *out set, 0 on timeout, -1 on a broken connection. */
static int wait_frame(conn* l, int timeout_ms, agent_frame** out, char* err, size_t err_len) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  for (;;) {
    int got = frame_reader_next(&l->reader, out, err, err_len);
    if (got != 0) return got;
    uint64_t now = now_ms();
    if (now >= deadline || agent_stopping) {
      snprintf(err, err_len, "no answer from kilnd within %d ms", timeout_ms);
      return 0;
    }
    struct pollfd p = {l->fd, POLLIN, 0};
    int readable = conn_pending(l) || poll(&p, 1, (int)(deadline - now)) > 0;
    if (readable && receive(l, err, err_len) != 0) {
      /* kilnd may send its last frame (a refusal) and close at once: read that first. */
      char ignored[64];
      if (frame_reader_next(&l->reader, out, ignored, sizeof ignored) == 1) return 1;
      return -1;
    }
  }
}

/* HMAC-SHA256 keyed with the token over a label and its NUL, then each part preceded by its
   length as 4 bytes big-endian (agent.proto). */
static void mac_of(const agent_config* cfg, const char* label, const void* const* parts,
                   const size_t* lens, size_t n, uint8_t out[32]) {
  size_t total = strlen(label) + 1;
  for (size_t i = 0; i < n; ++i) total += 4 + lens[i];
  uint8_t* msg = malloc(total);
  if (!msg) {
    memset(out, 0, 32); /* a MAC that cannot match */
    return;
  }
  size_t at = strlen(label) + 1;
  memcpy(msg, label, at);
  for (size_t i = 0; i < n; ++i) {
    uint32_t len = (uint32_t)lens[i];
    uint8_t be[4] = {(uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8), (uint8_t)len};
    memcpy(msg + at, be, 4);
    memcpy(msg + at + 4, parts[i], lens[i]);
    at += 4 + lens[i];
  }
  kiln_hmac_sha256(cfg->token, cfg->token_len, msg, total, out);
  free(msg);
}

static Kiln__V1__Device* wire_device(const agent_config* cfg, Kiln__V1__Device* d,
                                     Kiln__V1__Gpu* gpus, Kiln__V1__Gpu** gpu_ptrs) {
  const device_info* i = &cfg->device;
  kiln__v1__device__init(d);
  d->key = (char*)cfg->key;
  d->triple = (char*)i->triple;
  d->cpu = (char*)i->cpu;
  d->features = (char*)i->features;
  d->cpu_model = (char*)i->cpu_model;
  d->cores = i->cores;
  d->threads = i->threads;
  d->memory_bytes = i->memory_bytes;
  d->l1d_bytes = i->l1d_bytes;
  d->l2_bytes = i->l2_bytes;
  d->l3_bytes = i->l3_bytes;
  d->agent_version = (char*)kAgentVersion;
  d->os = (char*)i->os;
  for (int g = 0; g < i->gpu_count; ++g) {
    kiln__v1__gpu__init(&gpus[g]);
    gpus[g].name = (char*)i->gpus[g].name;
    gpus[g].compute_major = i->gpus[g].compute_major;
    gpus[g].compute_minor = i->gpus[g].compute_minor;
    gpus[g].memory_bytes = i->gpus[g].memory_bytes;
    gpu_ptrs[g] = &gpus[g];
  }
  d->n_gpus = (size_t)i->gpu_count;
  d->gpus = gpu_ptrs;
  return d;
}

/* Challenge, Hello, Welcome. 0 once welcomed (heartbeat_ms set), else the session's end. */
static int handshake(const agent_config* cfg, artifact_cache* cache, conn* l, int* heartbeat_ms,
                     session_end* end) {
  char err[512];
  agent_frame* f = NULL;
  *end = SESSION_LOST;
  if (wait_frame(l, HANDSHAKE_MS, &f, err, sizeof err) != 1) {
    log_line(LOG_WARN, "no challenge from kilnd: %s", err);
    return -1;
  }
  if (f->kind_case != KILN__V1__AGENT_FRAME__KIND_CHALLENGE || f->challenge->nonce.len != NONCE) {
    log_line(LOG_ERROR, "kilnd's first frame is not a challenge: is this kilnd's agent port?");
    frame_free(f);
    *end = SESSION_REFUSED;
    return -1;
  }
  if (f->challenge->protocol_version != KILN__V1__AGENT_PROTOCOL__AGENT_PROTOCOL_VERSION) {
    log_line(LOG_ERROR, "kilnd speaks agent protocol version %u, this agent version %d",
             f->challenge->protocol_version, KILN__V1__AGENT_PROTOCOL__AGENT_PROTOCOL_VERSION);
    frame_free(f);
    *end = SESSION_REFUSED;
    return -1;
  }
  uint8_t server_nonce[NONCE], agent_nonce[NONCE];
  memcpy(server_nonce, f->challenge->nonce.data, NONCE);
  frame_free(f);
  if (getrandom(agent_nonce, NONCE, 0) != NONCE) {
    log_line(LOG_ERROR, "cannot get random bytes for a nonce: %s", strerror(errno));
    return -1;
  }

  uint8_t mac[32];
  const void* parts[] = {server_nonce, agent_nonce, cfg->agent_id, cfg->key, cfg->device.triple};
  size_t lens[] = {NONCE, NONCE, strlen(cfg->agent_id), strlen(cfg->key),
                   strlen(cfg->device.triple)};
  mac_of(cfg, "kiln-agent-hello", parts, lens, 5, mac);

  Kiln__V1__Hello hello;
  kiln__v1__hello__init(&hello);
  hello.protocol_version = KILN__V1__AGENT_PROTOCOL__AGENT_PROTOCOL_VERSION;
  hello.nonce = (ProtobufCBinaryData){NONCE, agent_nonce};
  hello.mac = (ProtobufCBinaryData){32, mac};
  hello.agent_id = (char*)cfg->agent_id;
  Kiln__V1__Device device;
  Kiln__V1__Gpu gpus[DEVICE_MAX_GPUS];
  Kiln__V1__Gpu* gpu_ptrs[DEVICE_MAX_GPUS];
  hello.device = wire_device(cfg, &device, gpus, gpu_ptrs);
  hello.slots = cfg->slots;
  char** held = calloc(cache->count ? cache->count : 1, sizeof(char*));
  for (size_t i = 0; held && i < cache->count; ++i)
    held[hello.n_artifacts++] = cache->items[i].sha256;
  hello.artifacts = held;
  Kiln__V1__AgentFrame out;
  kiln__v1__agent_frame__init(&out);
  out.kind_case = KILN__V1__AGENT_FRAME__KIND_HELLO;
  out.hello = &hello;
  int sent = send_frame(l, &out);
  free(held);
  if (sent != 0) {
    log_line(LOG_WARN, "cannot send hello: %s", strerror(errno));
    return -1;
  }

  if (wait_frame(l, HANDSHAKE_MS, &f, err, sizeof err) != 1) {
    log_line(LOG_WARN, "no welcome from kilnd: %s", err);
    return -1;
  }
  if (f->kind_case == KILN__V1__AGENT_FRAME__KIND_REFUSAL) {
    log_line(LOG_ERROR, "kilnd refused this agent: %s", f->refusal->reason);
    frame_free(f);
    *end = SESSION_REFUSED;
    return -1;
  }
  if (f->kind_case != KILN__V1__AGENT_FRAME__KIND_WELCOME || f->welcome->mac.len != 32) {
    log_line(LOG_ERROR, "kilnd answered hello with neither a welcome nor a refusal");
    frame_free(f);
    *end = SESSION_REFUSED;
    return -1;
  }
  const void* back[] = {agent_nonce, server_nonce};
  size_t back_lens[] = {NONCE, NONCE};
  mac_of(cfg, "kiln-agent-welcome", back, back_lens, 2, mac);
  if (!kiln_equal_32(mac, f->welcome->mac.data)) {
    log_line(LOG_ERROR,
             "the server could not prove it holds the token: not kilnd, or another "
             "token; no job will be taken from it");
    frame_free(f);
    *end = SESSION_REFUSED;
    return -1;
  }
  *heartbeat_ms = f->welcome->heartbeat_ms > 0 ? f->welcome->heartbeat_ms : 5000;
  log_line(LOG_INFO, "welcomed by %s as %s (key %s, %s %s, %d threads)", f->welcome->server_version,
           cfg->agent_id, cfg->key, cfg->device.triple, cfg->device.cpu, cfg->device.threads);
  frame_free(f);
  return 0;
}

/* A result the agent gives without running the job. */
static int answer(conn* l, uint64_t job_id, Kiln__V1__MeasureResult__Error error,
                  const char* message) {
  Kiln__V1__MeasureResult r;
  kiln__v1__measure_result__init(&r);
  r.job_id = job_id;
  r.error = error;
  r.message = (char*)message;
  Kiln__V1__AgentFrame f;
  kiln__v1__agent_frame__init(&f);
  f.kind_case = KILN__V1__AGENT_FRAME__KIND_RESULT;
  f.result = &r;
  return send_frame(l, &f);
}

typedef struct {
  running_job slots[MAX_SLOTS];
  int busy[MAX_SLOTS];
  int gpu_of[MAX_SLOTS];             /* a busy slot's GPU, or -1 for a CPU job */
  agent_frame* pending[MAX_PENDING]; /* jobs waiting for a slot, in order */
  size_t npending;
} workers;

/* kilnd cancelled job `id`: a running one's process is killed (its result, CANCELLED, goes up
   once it is reaped); a waiting one is dropped and answered CANCELLED now. An id the agent does
   not hold (answered already) is ignored. 0, or -1 when the answer cannot be sent. */
static int cancel_job(conn* l, workers* w, int slots, uint64_t id) {
  for (int s = 0; s < slots; ++s) {
    if (w->busy[s] && w->slots[s].job_id == id) {
      log_line(LOG_INFO, "job %llu cancelled by kilnd: killing it", (unsigned long long)id);
      job_cancel(&w->slots[s]);
      return 0;
    }
  }
  for (size_t i = 0; i < w->npending; ++i) {
    if (w->pending[i]->job->job_id != id) continue;
    frame_free(w->pending[i]);
    --w->npending;
    memmove(w->pending + i, w->pending + i + 1, (w->npending - i) * sizeof *w->pending);
    log_line(LOG_INFO, "job %llu cancelled by kilnd before it started", (unsigned long long)id);
    return answer(l, id, KILN__V1__MEASURE_RESULT__ERROR__CANCELLED,
                  "cancelled by kilnd (its request went away) before it started");
  }
  log_line(LOG_DEBUG, "kilnd cancelled job %llu, which is over", (unsigned long long)id);
  return 0;
}

/* Why this agent cannot run a job of `kind` on its device, in `why`: 0 when it can. */
static int unsupported(const char* kind, int gpu, const device_info* d, char* why, size_t len) {
  if (!kind || !kind[0] || !strcmp(kind, "shared-object") || !strcmp(kind, "model")) return 0;
  if (is_gpu_kind(kind)) {
    if (d->gpu_count == 0)
      snprintf(why, len, "a %s job needs a GPU, and this agent has none (%s)", kind, d->gpu_note);
    else if (gpu < 0 || gpu >= d->gpu_count)
      snprintf(why, len, "GPU %d: this agent has %d GPU%s", gpu, d->gpu_count,
               d->gpu_count == 1 ? "" : "s");
    else
      return 0;
    return 1;
  }
  snprintf(why, len,
           "artifact kind '%s' is not one this agent runs (shared-object, model, cubin, ptx)",
           kind);
  return 1;
}

/* Whether a job waits even with a slot free: a GPU job while another runs on its GPU, since
   two jobs on one GPU would skew each other's timings. */
static int must_wait(const workers* w, int slots, const measure_job* job) {
  if (!is_gpu_kind(job->artifact_kind)) return 0;
  for (int s = 0; s < slots; ++s)
    if (w->busy[s] && w->gpu_of[s] == job->gpu) return 1;
  return 0;
}

/* Starts `f`'s job in slot `s`, or answers it at once (a job for a device it lacks, a missing
   artifact, a load error). -1 when the answer cannot be sent. Frees f. */
static int start_job(const agent_config* cfg, artifact_cache* cache, conn* l, workers* w, int s,
                     agent_frame* f) {
  const measure_job* job = f->job;
  char err[512];
  const cached_artifact* a = NULL;
  int rc = 0;
  if (unsupported(job->artifact_kind, job->gpu, &cfg->device, err, sizeof err)) {
    rc = answer(l, job->job_id, KILN__V1__MEASURE_RESULT__ERROR__UNSUPPORTED, err);
  } else if (job->artifact.len > 0) {
    a = cache_put(cache, job->artifact_sha256, job->artifact.data, job->artifact.len, err,
                  sizeof err);
    if (!a) rc = answer(l, job->job_id, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB, err);
  } else {
    a = cache_find(cache, job->artifact_sha256);
    if (!a) {
      snprintf(err, sizeof err, "this agent does not hold artifact %s", job->artifact_sha256);
      rc = answer(l, job->job_id, KILN__V1__MEASURE_RESULT__ERROR__ARTIFACT_UNKNOWN, err);
    }
  }
  /* GPU code is the driver's to check, in the job's child. */
  if (a && !is_gpu_kind(job->artifact_kind) &&
      kiln_elf_check(a->code, a->len, agent_imports(), err, sizeof err) != 0) {
    rc = answer(l, job->job_id, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR, err);
    a = NULL;
  }
  if (a) {
    /* Jobs name GPUs by their place in the list this agent serves (--gpu); the child opens
       the driver's number for it. */
    int gpu = is_gpu_kind(job->artifact_kind) ? job->gpu : -1;
    if (gpu >= 0) f->job->gpu = cfg->device.gpus[gpu].ordinal;
    if (job_start(&w->slots[s], job, a->code, a->len, err, sizeof err) == 0) {
      w->busy[s] = 1;
      w->gpu_of[s] = gpu;
      log_line(LOG_DEBUG, "job %llu started (pid %d)", (unsigned long long)job->job_id,
               (int)w->slots[s].pid);
    } else {
      rc = answer(l, job->job_id, KILN__V1__MEASURE_RESULT__ERROR__RUNTIME_CRASH, err);
    }
  }
  frame_free(f);
  return rc;
}

session_end session_run(const agent_config* cfg, artifact_cache* cache, int* welcomed) {
  char err[512];
  *welcomed = 0;
  conn l = {dial(cfg->host, cfg->port, err, sizeof err), NULL, {0}, 0};
  if (l.fd < 0) {
    log_line(LOG_WARN, "cannot reach kilnd at %s:%s: %s", cfg->host, cfg->port, err);
    return SESSION_UNREACHABLE;
  }
  if (cfg->tls) {
    l.tls = tls_connect(cfg->tls, l.fd, cfg->tls_server_name, HANDSHAKE_MS, err, sizeof err);
    if (!l.tls) {
      log_line(LOG_WARN, "no TLS with kilnd at %s:%s: %s", cfg->host, cfg->port, err);
      close(l.fd);
      return SESSION_UNREACHABLE;
    }
  }
  frame_reader_init(&l.reader, cfg->max_frame);
  l.last_heard_ms = now_ms();
  session_end end = SESSION_LOST;
  int heartbeat_ms = 0;
  workers* w = calloc(1, sizeof *w);
  int slots = cfg->slots < 1 ? 1 : cfg->slots > MAX_SLOTS ? MAX_SLOTS : cfg->slots;
  if (!w || handshake(cfg, cache, &l, &heartbeat_ms, &end) != 0) goto done;
  *welcomed = 1;
  end = SESSION_LOST;

  uint64_t next_beat = now_ms() + (uint64_t)heartbeat_ms, sequence = 0;
  for (;;) {
    if (agent_stopping) {
      end = SESSION_STOPPED;
      break;
    }
    struct pollfd fds[MAX_SLOTS + 1];
    nfds_t n = 0;
    fds[n++] = (struct pollfd){l.fd, POLLIN, 0};
    int running = 0, exiting = 0;
    for (int s = 0; s < slots; ++s) {
      if (!w->busy[s]) continue;
      ++running;
      int fd = job_wait_fd(&w->slots[s]);
      if (fd >= 0) {
        fds[n++] = (struct pollfd){fd, POLLIN, 0};
      } else {
        ++exiting; /* its result is in; its exit is microseconds away (no pidfd to wait on) */
      }
    }
    uint64_t now = now_ms();
    int timeout = next_beat > now ? (int)(next_beat - now) : 0;
    if (running > 0 && timeout > 10) timeout = 10; /* deadlines and reaping */
    if (exiting > 0 && timeout > 1) timeout = 1;
    int pending = conn_pending(&l);
    int ready = poll(fds, n, pending ? 0 : timeout);
    if (ready < 0 && errno != EINTR) {
      log_line(LOG_ERROR, "poll: %s", strerror(errno));
      break;
    }
    int closed = 0;
    char closed_why[512] = "";
    if (pending || (ready > 0 && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))))
      closed = receive(&l, closed_why, sizeof closed_why) != 0;
    /* Frames that arrived (before a close, too: kilnd's last word may be a refusal). */
    agent_frame* f = NULL;
    int got;
    int broken = 0;
    while ((got = frame_reader_next(&l.reader, &f, err, sizeof err)) == 1) {
      switch (f->kind_case) {
        case KILN__V1__AGENT_FRAME__KIND_HEARTBEAT:
          frame_free(f);
          break;
        case KILN__V1__AGENT_FRAME__KIND_JOB: {
          int free_slot = -1;
          for (int s = 0; s < slots && free_slot < 0; ++s)
            if (!w->busy[s]) free_slot = s;
          if (free_slot >= 0 && !must_wait(w, slots, f->job)) {
            if (start_job(cfg, cache, &l, w, free_slot, f) != 0) broken = 1;
          } else if (w->npending < MAX_PENDING) {
            w->pending[w->npending++] = f;
          } else {
            broken |= answer(&l, f->job->job_id, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB,
                             "the agent has too many jobs waiting") != 0;
            frame_free(f);
          }
          break;
        }
        case KILN__V1__AGENT_FRAME__KIND_CANCEL:
          broken |= cancel_job(&l, w, slots, f->cancel->job_id) != 0;
          frame_free(f);
          break;
        case KILN__V1__AGENT_FRAME__KIND_REFUSAL:
          log_line(LOG_ERROR, "kilnd ends the session: %s", f->refusal->reason);
          frame_free(f);
          broken = 1;
          break;
        default:
          log_line(LOG_WARN, "ignoring an unexpected frame (kind %d) from kilnd", f->kind_case);
          frame_free(f);
          break;
      }
    }
    if (got < 0) {
      log_line(LOG_ERROR, "bad frame from kilnd: %s", err);
      broken = 1;
    }
    if (closed && !broken) log_line(LOG_WARN, "connection to kilnd lost: %s", closed_why);
    if (broken || closed) break;

    /* Jobs that ended. */
    now = now_ms();
    for (int s = 0; s < slots; ++s) {
      if (!w->busy[s] || !job_poll(&w->slots[s], kiln_now_ns())) continue;
      size_t len = 0;
      uint64_t id = w->slots[s].job_id;
      uint8_t* bytes = job_result(&w->slots[s], &len);
      w->busy[s] = 0;
      log_line(LOG_DEBUG, "job %llu done", (unsigned long long)id);
      if (!bytes || send_bytes(&l, bytes, len) != 0) {
        free(bytes);
        broken = 1;
        break;
      }
      free(bytes);
      /* The first waiting job that may start now. */
      for (size_t i = 0; i < w->npending; ++i) {
        if (must_wait(w, slots, w->pending[i]->job)) continue;
        agent_frame* next = w->pending[i];
        --w->npending;
        memmove(w->pending + i, w->pending + i + 1, (w->npending - i) * sizeof *w->pending);
        if (start_job(cfg, cache, &l, w, s, next) != 0) broken = 1;
        break;
      }
    }
    if (broken) {
      log_line(LOG_WARN, "cannot send to kilnd: %s", strerror(errno));
      break;
    }

    now = now_ms();
    if (now >= next_beat) {
      Kiln__V1__Heartbeat beat;
      kiln__v1__heartbeat__init(&beat);
      beat.sequence = ++sequence;
      beat.running_jobs = running;
      Kiln__V1__AgentFrame out;
      kiln__v1__agent_frame__init(&out);
      out.kind_case = KILN__V1__AGENT_FRAME__KIND_HEARTBEAT;
      out.heartbeat = &beat;
      if (send_frame(&l, &out) != 0) {
        log_line(LOG_WARN, "cannot send a heartbeat: %s", strerror(errno));
        break;
      }
      next_beat = now + (uint64_t)heartbeat_ms;
    }
    if (now - l.last_heard_ms > 3u * (uint64_t)heartbeat_ms) {
      log_line(LOG_WARN, "kilnd silent for %llu ms: the connection is taken as lost",
               (unsigned long long)(now - l.last_heard_ms));
      break;
    }
  }

done:
  if (w) {
    for (int s = 0; s < MAX_SLOTS; ++s)
      if (w->busy[s]) job_abandon(&w->slots[s]);
    for (size_t i = 0; i < w->npending; ++i) frame_free(w->pending[i]);
    free(w);
  }
  frame_reader_free(&l.reader);
  tls_close(l.tls);
  close(l.fd);
  return end;
}

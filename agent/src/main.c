/* kiln-agent: the device daemon (docs/agents.md). It dials kilnd's agent port, proves it holds
   the shared token, says what the device is, then runs measure jobs in forked children and
   sends back their timings; it reconnects with backoff whenever the connection ends.

   usage: kiln-agent --server HOST:PORT --key NAME --token-file FILE [--id ID] [--slots N]
                     [--tls] [--tls-ca FILE] [--tls-server-name NAME]
                     [--cpu NAME] [--features LIST] [--cache-mb N] [--max-frame-mb N]
                     [--gpu LIST] [--log-level debug|info|warning|error] [--once]
                     [--print-device] */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "artifact_cache.h"
#include "device.h"
#include "log.h"
#include "measure.h"
#include "session.h"
#include "tls.h"

static const char* const kUsage =
    "usage: kiln-agent --server HOST:PORT --key NAME --token-file FILE [--id ID] [--slots N]\n"
    "                  [--tls] [--tls-ca FILE] [--tls-server-name NAME]\n"
    "                  [--cpu NAME] [--features LIST] [--cache-mb N] [--max-frame-mb N]\n"
    "                  [--gpu LIST] [--log-level debug|info|warning|error] [--once]\n"
    "                  [--print-device] [--simulate-ms N]\n"
    "  --gpu LIST      serve only these GPUs (driver numbers, 0,2); jobs name them 0, 1, ...\n"
    "  --simulate-ms N run no kernel: answer every job with one round of N ms after N ms\n"
    "                  (a stand-in device for benchmarking kilnd's control plane)\n";

static void usage_error(const char* fmt, const char* what) {
  fprintf(stderr, "kiln-agent: ");
  fprintf(stderr, fmt, what);
  fprintf(stderr, "\n%s", kUsage);
  exit(2);
}

static long count_arg(const char* flag, const char* value, long lo, long hi) {
  char* end = NULL;
  errno = 0;
  long n = strtol(value, &end, 10);
  if (errno || !*value || *end || n < lo || n > hi) {
    fprintf(stderr, "kiln-agent: %s '%s': expected a whole number from %ld to %ld\n%s", flag, value,
            lo, hi, kUsage);
    exit(2);
  }
  return n;
}

/* The token: the file's bytes without trailing white space. */
static uint8_t* read_token(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "kiln-agent: --token-file %s: %s\n", path, strerror(errno));
    exit(2);
  }
  uint8_t* token = malloc(4096);
  size_t n = token ? fread(token, 1, 4096, f) : 0;
  int more = fgetc(f) != EOF;
  fclose(f);
  if (more) {
    fprintf(stderr, "kiln-agent: --token-file %s: longer than 4096 bytes\n", path);
    exit(2);
  }
  while (n > 0 && (token[n - 1] == '\n' || token[n - 1] == '\r' || token[n - 1] == ' ' ||
                   token[n - 1] == '\t'))
    --n;
  if (n == 0) {
    fprintf(stderr, "kiln-agent: --token-file %s: the file holds no token\n", path);
    exit(2);
  }
  *len = n;
  return token;
}

static void on_stop(int sig) {
  (void)sig;
  agent_stopping = 1;
}

/* Sleeps ms milliseconds, waking early when the agent is told to stop. */
static void pause_ms(uint64_t ms) {
  struct timespec t = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static void print_device(const agent_config* c) {
  const device_info* d = &c->device;
  printf("triple    %s\ncpu       %s\nfeatures  %s\ncpu model %s\nos        %s\n", d->triple,
         d->cpu[0] ? d->cpu : "(generic)", d->features[0] ? d->features : "(the CPU's own)",
         d->cpu_model, d->os);
  printf("cores     %d\nthreads   %d\nmemory    %llu MiB\n", d->cores, d->threads,
         (unsigned long long)(d->memory_bytes >> 20));
  printf("caches    L1d %llu KiB, L2 %llu KiB, L3 %llu KiB (0: not described)\n",
         (unsigned long long)(d->l1d_bytes >> 10), (unsigned long long)(d->l2_bytes >> 10),
         (unsigned long long)(d->l3_bytes >> 10));
  if (d->gpu_count == 0) printf("gpus      none (%s)\n", d->gpu_note);
  for (int g = 0; g < d->gpu_count; ++g)
    printf("gpu %d     %s, sm_%d%d, %llu MiB\n", g, d->gpus[g].name, d->gpus[g].compute_major,
           d->gpus[g].compute_minor, (unsigned long long)(d->gpus[g].memory_bytes >> 20));
}

int main(int argc, char** argv) {
  agent_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.slots = 1;
  cfg.max_frame = (size_t)1024 << 20;
  size_t cache_bytes = (size_t)256 << 20;
  const char *server = NULL, *token_file = NULL, *cpu = NULL, *features = NULL, *gpus = NULL;
  const char *tls_ca = NULL, *tls_server_name = NULL;
  int once = 0, show_device = 0, tls = 0;
  static char id[256], host_part[256];
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (!strcmp(a, "--once")) {
      once = 1;
      continue;
    }
    if (!strcmp(a, "--print-device")) {
      show_device = 1;
      continue;
    }
    if (!strcmp(a, "--tls")) {
      tls = 1;
      continue;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) usage_error("%s needs a value", a);
    const char* v = argv[++i];
    if (!strcmp(a, "--server"))
      server = v;
    else if (!strcmp(a, "--key"))
      cfg.key = v;
    else if (!strcmp(a, "--token-file"))
      token_file = v;
    else if (!strcmp(a, "--id"))
      snprintf(id, sizeof id, "%s", v);
    else if (!strcmp(a, "--slots"))
      cfg.slots = (int)count_arg(a, v, 1, 64);
    else if (!strcmp(a, "--simulate-ms"))
      measure_simulate_ms = (int)count_arg(a, v, 1, 600000);
    else if (!strcmp(a, "--tls-ca"))
      tls_ca = v, tls = 1;
    else if (!strcmp(a, "--tls-server-name"))
      tls_server_name = v, tls = 1;
    else if (!strcmp(a, "--cpu"))
      cpu = v;
    else if (!strcmp(a, "--features"))
      features = v;
    else if (!strcmp(a, "--gpu"))
      gpus = v;
    else if (!strcmp(a, "--cache-mb"))
      cache_bytes = (size_t)count_arg(a, v, 1, 1 << 20) << 20;
    else if (!strcmp(a, "--max-frame-mb"))
      cfg.max_frame = (size_t)count_arg(a, v, 1, 4095) << 20;
    else if (!strcmp(a, "--log-level")) {
      if (!strcmp(v, "debug"))
        log_threshold = LOG_DEBUG;
      else if (!strcmp(v, "info"))
        log_threshold = LOG_INFO;
      else if (!strcmp(v, "warning"))
        log_threshold = LOG_WARN;
      else if (!strcmp(v, "error"))
        log_threshold = LOG_ERROR;
      else
        usage_error("--log-level '%s': expected debug, info, warning or error", v);
    } else {
      usage_error("unknown option '%s'", a);
    }
  }

  device_detect(&cfg.device);
  if (cpu) {
    snprintf(cfg.device.cpu, sizeof cfg.device.cpu, "%s", cpu);
    if (!features) cfg.device.features[0] = '\0'; /* the named CPU's own */
  }
  if (features) snprintf(cfg.device.features, sizeof cfg.device.features, "%s", features);
  if (gpus) {
    char why[512];
    if (device_select_gpus(&cfg.device, gpus, why, sizeof why) != 0) usage_error("%s", why);
  }
  if (show_device) {
    print_device(&cfg);
    return 0;
  }
  if (!server) usage_error("%s", "--server HOST:PORT is required");
  if (!cfg.key || !cfg.key[0]) usage_error("%s", "--key NAME is required (a device class)");
  if (!token_file) usage_error("%s", "--token-file FILE is required: kilnd's agent token");
  const char* colon = strrchr(server, ':');
  if (!colon || colon == server || !colon[1])
    usage_error("--server '%s': expected HOST:PORT", server);
  snprintf(host_part, sizeof host_part, "%.*s", (int)(colon - server), server);
  if (host_part[0] == '[' && host_part[strlen(host_part) - 1] == ']') { /* [::1]:port */
    memmove(host_part, host_part + 1, strlen(host_part));
    host_part[strlen(host_part) - 1] = '\0';
  }
  cfg.host = host_part;
  cfg.port = colon + 1;
  cfg.token = read_token(token_file, &cfg.token_len);
  if (tls) {
    char err[512];
    cfg.tls = tls_client_new(tls_ca, err, sizeof err);
    if (!cfg.tls) {
      fprintf(stderr, "kiln-agent: --tls: %s\n", err);
      exit(2);
    }
    cfg.tls_server_name = tls_server_name ? tls_server_name : cfg.host;
  }
  if (!id[0] && gethostname(id, sizeof id) != 0) snprintf(id, sizeof id, "agent-%d", (int)getpid());
  cfg.agent_id = id;

  struct sigaction stop = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGTERM, &stop, NULL);
  sigaction(SIGINT, &stop, NULL);
  signal(SIGPIPE, SIG_IGN);

  log_line(LOG_INFO, "%s, key %s, %s %s%s%s, %d cores, %d GPUs: dialing %s%s", cfg.agent_id,
           cfg.key, cfg.device.triple, cfg.device.cpu[0] ? cfg.device.cpu : "generic",
           cfg.device.features[0] ? " " : "", cfg.device.features, cfg.device.cores,
           cfg.device.gpu_count, server, cfg.tls ? " over TLS" : "");

  artifact_cache cache;
  cache_init(&cache, cache_bytes);
  /* Backoff: 0.5 s doubling to 30 s, each wait jittered by up to a quarter either way so a
     fleet that lost kilnd at once does not come back at once; reset by a welcome. */
  uint64_t backoff_ms = 500;
  unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  int status = 0;
  for (;;) {
    int welcomed = 0;
    session_end end = session_run(&cfg, &cache, &welcomed);
    if (end == SESSION_STOPPED || agent_stopping) break;
    if (once) {
      status = end == SESSION_REFUSED ? 3 : 1;
      break;
    }
    if (welcomed) backoff_ms = 500;
    uint64_t jitter = backoff_ms / 4;
    uint64_t wait = backoff_ms - jitter + (jitter ? (uint64_t)rand_r(&seed) % (2 * jitter + 1) : 0);
    if (end == SESSION_REFUSED && wait < 5000) wait = 5000;
    log_line(LOG_INFO, "reconnecting in %llu ms", (unsigned long long)wait);
    pause_ms(wait);
    if (agent_stopping) break;
    backoff_ms = backoff_ms * 2 > 30000 ? 30000 : backoff_ms * 2;
  }
  log_line(LOG_INFO, "stopping");
  cache_free(&cache);
  tls_client_free(cfg.tls);
  free((void*)cfg.token);
  return status;
}

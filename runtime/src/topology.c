/* The thread plan: how many threads a pool gets and which CPU each is pinned to. */
#define _GNU_SOURCE

#include "topology.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kiln/runtime.h"

/* Parses a decimal CPU number at *text and advances past it; -1 when there is none or it is too
   big for a cpu_set_t. */
static int parse_cpu(const char** text) {
  if (**text < '0' || **text > '9') {
    return -1;
  }
  char* end = NULL;
  errno = 0;
  long value = strtol(*text, &end, 10);
  if (errno != 0 || value >= CPU_SETSIZE) {
    return -1;
  }
  *text = end;
  return (int)value;
}

int kiln_parse_cpu_list(const char* text, cpu_set_t* set) {
  CPU_ZERO(set);
  const char* at = text;
  for (;;) {
    int first = parse_cpu(&at);
    if (first < 0) {
      return KILN_ERR_ARGS;
    }
    int last = first;
    if (*at == '-') {
      at++;
      last = parse_cpu(&at);
      if (last < first) {
        return KILN_ERR_ARGS;
      }
    }
    for (int cpu = first; cpu <= last; cpu++) {
      CPU_SET(cpu, set);
    }
    if (*at != ',') {
      break;
    }
    at++;
  }
  /* sysfs files end with a newline. */
  while (*at == '\n' || *at == ' ') {
    at++;
  }
  return *at == '\0' ? KILN_OK : KILN_ERR_ARGS;
}

/* The CPUs sharing cpu's physical core (cpu included); KILN_ERR_ARGS when sysfs does not say. */
static int read_siblings(int cpu, cpu_set_t* siblings) {
  char path[96];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
  FILE* file = fopen(path, "r");
  if (file == NULL) {
    return KILN_ERR_ARGS;
  }
  char line[4096];
  int status =
      fgets(line, sizeof line, file) != NULL ? kiln_parse_cpu_list(line, siblings) : KILN_ERR_ARGS;
  fclose(file);
  return status;
}

/* The calling thread's affinity mask, or every configured CPU when the kernel will not say. */
static void read_allowed(cpu_set_t* allowed) {
  if (sched_getaffinity(0, sizeof *allowed, allowed) == 0 && CPU_COUNT(allowed) > 0) {
    return;
  }
  CPU_ZERO(allowed);
  long configured = sysconf(_SC_NPROCESSORS_CONF);
  for (long cpu = 0; cpu < configured && cpu < CPU_SETSIZE; cpu++) {
    CPU_SET((int)cpu, allowed);
  }
  if (configured < 1) {
    CPU_SET(0, allowed);
  }
}

/* Keeps one allowed CPU per physical core, the lowest-numbered: a hyperthread sibling shares
   the core's vector units and caches, so a second thread there mostly slows the first. */
static void keep_one_per_core(const cpu_set_t* allowed, cpu_set_t* cores) {
  CPU_ZERO(cores);
  for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
    if (!CPU_ISSET(cpu, allowed)) {
      continue;
    }
    cpu_set_t siblings;
    int first_of_core = 1;
    if (read_siblings(cpu, &siblings) == KILN_OK) {
      for (int other = 0; other < cpu; other++) {
        if (CPU_ISSET(other, &siblings) && CPU_ISSET(other, allowed)) {
          first_of_core = 0;
          break;
        }
      }
    }
    if (first_of_core) {
      CPU_SET(cpu, cores);
    }
  }
}

/* A positive thread count from the environment, or 0 when the variable is unset or malformed. */
static int env_thread_count(const char* name) {
  const char* text = getenv(name);
  if (text == NULL || *text < '0' || *text > '9') {
    return 0;
  }
  char* end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value < 1) {
    return 0;
  }
  return value > KILN_MAX_THREADS ? KILN_MAX_THREADS : (int)value;
}

void kiln_plan_threads(int requested, kiln_thread_plan* plan) {
  read_allowed(&plan->allowed);

  /* KILN_CPUS names the CPUs outright; it is not checked against the mask here, so that a CPU
     the process may not use makes the pool fall back to unpinned rather than silently move. */
  cpu_set_t candidates;
  const char* named = getenv("KILN_CPUS");
  int named_ok = named != NULL && kiln_parse_cpu_list(named, &candidates) == KILN_OK;
  const char* pin = getenv("KILN_PIN");
  /* Pinned only when asked: CPUs named, or KILN_PIN=1. Two processes that each pinned their
     threads to "their" CPUs would pick the same ones and stack there while other CPUs idle;
     unpinned, the kernel spreads them. */
  int pinning = named_ok || (pin != NULL && strcmp(pin, "1") == 0);
  if (!named_ok) {
    const char* hyperthreads = getenv("KILN_USE_HYPERTHREADS");
    if (hyperthreads != NULL && strcmp(hyperthreads, "1") == 0) {
      candidates = plan->allowed;
    } else {
      keep_one_per_core(&plan->allowed, &candidates);
    }
  }

  int ncandidates = 0;
  int nthreads = requested > 0 ? requested : env_thread_count("KILN_NUM_THREADS");
  if (nthreads == 0) {
    nthreads = CPU_COUNT(&candidates);
  }
  if (nthreads < 1) {
    nthreads = 1;
  }
  if (nthreads > KILN_MAX_THREADS) {
    nthreads = KILN_MAX_THREADS;
  }
  plan->nthreads = nthreads;
  for (int i = 0; i < nthreads; i++) {
    plan->cpu[i] = -1;
  }
  for (int cpu = 0; pinning && cpu < CPU_SETSIZE && ncandidates < nthreads; cpu++) {
    if (CPU_ISSET(cpu, &candidates)) {
      /* The first candidate is the launching thread's. */
      plan->cpu[ncandidates++] = cpu;
    }
  }
}

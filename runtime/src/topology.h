/* Which CPUs the pool's threads run on: the process's affinity mask, one CPU per physical core,
   and the environment's overrides. Include after defining _GNU_SOURCE (for cpu_set_t). */
#ifndef KILN_TOPOLOGY_H
#define KILN_TOPOLOGY_H

#include <sched.h>

/* The most threads a pool has, and the most CPUs kiln can name (a cpu_set_t's size). */
enum { KILN_MAX_THREADS = 1024 };

typedef struct kiln_thread_plan {
  int nthreads;              /* >= 1, the calling thread included */
  int cpu[KILN_MAX_THREADS]; /* thread i's CPU, or -1 to leave it unpinned; cpu[0] is the
                                launching thread's. All -1 unless pinning was asked for
                                (KILN_CPUS or KILN_PIN=1). */
  cpu_set_t allowed;         /* the process's affinity mask when the plan was made */
} kiln_thread_plan;

/* Plans a pool of `requested` threads; 0 asks for the default (KILN_NUM_THREADS, else one per
   CPU of the candidate list: KILN_CPUS, else one allowed CPU per physical core). */
void kiln_plan_threads(int requested, kiln_thread_plan* plan);

/* Parses a Linux CPU list ("0-3,8,10-11", as in sysfs) into set. Returns KILN_OK, or
   KILN_ERR_ARGS for malformed text or a CPU number a cpu_set_t cannot hold. */
int kiln_parse_cpu_list(const char* text, cpu_set_t* set);

#endif /* KILN_TOPOLOGY_H */

/* What else the host ran while a job ran: other processes' CPU time (the host's busy time in
   /proc/stat, steal included, less the job's own) and the time some task waited for a CPU
   (/proc/pressure/cpu), between the job's start and its end. kilnd keeps both with the
   measurement, so a record says whether it was taken on a quiet host. */
#ifndef KILN_AGENT_HOST_LOAD_H
#define KILN_AGENT_HOST_LOAD_H

#include <stdint.h>

#include "kiln/v1/agent.pb-c.h"

typedef struct {
  uint64_t wall_ns;
  double busy_s;  /* every CPU's busy time since boot; < 0: /proc/stat unreadable */
  double stall_s; /* /proc/pressure/cpu's "some" total; < 0: no pressure information */
} host_load_sample;

void host_load_sample_now(host_load_sample* s);

/* The load between two samples, given the CPU time the job itself used in between: each figure
   -1 where a sample lacks it. */
void host_load_between(const host_load_sample* before, const host_load_sample* after,
                       double job_cpu_s, Kiln__V1__HostLoad* out);

#endif

/* The host's load during a measurement (host_load.h). */
#define _GNU_SOURCE
#include "host_load.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kiln/runtime.h"

/* The busy time of every CPU, in seconds: user, nice, system, irq, softirq and steal of the
   first line of /proc/stat (guest time is inside user). -1 when unreadable. */
static double busy_seconds(void) {
  FILE* f = fopen("/proc/stat", "re");
  if (!f) return -1;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle,
                 &iowait, &irq, &softirq, &steal);
  fclose(f);
  long hz = sysconf(_SC_CLK_TCK);
  if (n < 4 || hz <= 0) return -1;
  return (double)(user + nice + system + irq + softirq + steal) / (double)hz;
}

/* The time, in seconds, during which at least one task waited for a CPU; -1 without PSI (a
   kernel before 4.20, or one started with psi=0). */
static double stall_seconds(void) {
  FILE* f = fopen("/proc/pressure/cpu", "re");
  if (!f) return -1;
  char line[256];
  double out = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long long total = 0;
    const char* at = strstr(line, "total=");
    if (strncmp(line, "some ", 5) == 0 && at && sscanf(at, "total=%llu", &total) == 1)
      out = (double)total * 1e-6;
  }
  fclose(f);
  return out;
}

void host_load_sample_now(host_load_sample* s) {
  s->busy_s = busy_seconds();
  s->stall_s = stall_seconds();
  s->wall_ns = kiln_now_ns();
}

void host_load_between(const host_load_sample* before, const host_load_sample* after,
                       double job_cpu_s, Kiln__V1__HostLoad* out) {
  kiln__v1__host_load__init(out);
  double wall = (double)(after->wall_ns - before->wall_ns) * 1e-9;
  out->window_ms = wall * 1e3;
  out->other_cpus = -1;
  out->cpu_pressure = -1;
  if (wall <= 0) return;
  /* /proc/stat counts in clock ticks (10 ms), each CPU's count off by up to a tick at either
     end: over a window shorter than ten ticks the figure would be mostly that error. */
  long hz = sysconf(_SC_CLK_TCK);
  if (hz > 0 && wall >= 10.0 / (double)hz && before->busy_s >= 0 && after->busy_s >= 0) {
    /* The job's time is exact and the host's is in ticks: a window may come out a little
       below zero. */
    double others = (after->busy_s - before->busy_s) - job_cpu_s;
    out->other_cpus = others > 0 ? others / wall : 0;
  }
  if (before->stall_s >= 0 && after->stall_s >= 0) {
    double share = (after->stall_s - before->stall_s) / wall;
    out->cpu_pressure = share < 0 ? 0 : share > 1 ? 1 : share;
  }
}

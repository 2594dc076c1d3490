/* One measure job in the child (measure.h): the CPU or the GPU path. */
#define _POSIX_C_SOURCE 200809L
#include "measure.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_measure.h"
#include "gpu_measure.h"

int is_gpu_kind(const char* kind) {
  return kind && (!strcmp(kind, "cubin") || !strcmp(kind, "ptx"));
}

int measure_simulate_ms = 0;

void measure_run(const measure_job* job, const uint8_t* code, size_t code_len, measure_result* r) {
  if (measure_simulate_ms > 0) {
    struct timespec t = {measure_simulate_ms / 1000, (long)(measure_simulate_ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {
    }
    r->job_id = job->job_id;
    r->round_ms = malloc(sizeof(double));
    if (r->round_ms) {
      r->round_ms[0] = measure_simulate_ms;
      r->n_round_ms = 1;
    }
    return;
  }
  if (is_gpu_kind(job->artifact_kind))
    gpu_measure_run(job, code, code_len, r);
  else
    cpu_measure_run(job, code, code_len, r);
}

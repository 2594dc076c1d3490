/* One measure job in the child (measure.h): the CPU or the GPU path. */
#include "measure.h"

#include <string.h>

#include "cpu_measure.h"
#include "gpu_measure.h"

int is_gpu_kind(const char* kind) {
  return kind && (!strcmp(kind, "cubin") || !strcmp(kind, "ptx"));
}

void measure_run(const measure_job* job, const uint8_t* code, size_t code_len, measure_result* r) {
  if (is_gpu_kind(job->artifact_kind))
    gpu_measure_run(job, code, code_len, r);
  else
    cpu_measure_run(job, code, code_len, r);
}

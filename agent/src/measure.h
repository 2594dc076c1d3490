/* One measure job, run in the child process the agent forked for it: the artifact loaded,
   the arguments made, the kernel called and timed as TVM's time evaluator times it. The CPU or
   GPU path (cpu_measure.h, gpu_measure.h) is chosen here, and only here. */
#ifndef KILN_AGENT_MEASURE_H
#define KILN_AGENT_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "job_args.h"

/* Whether an artifact kind is GPU code ("cubin", "ptx"). */
int is_gpu_kind(const char* kind);

/* > 0: no kernel is run. Each job sleeps this many ms and answers one round of that time: the
   agent stands in for a device when the control plane is what is measured (--simulate-ms,
   tests/bench/run.sh scale). */
extern int measure_simulate_ms;

/* Runs `job` on the artifact `code` in this process and fills `r` (job_id, error and message,
   rounds, outputs). Everything it allocates lives until the process exits: it runs in a child
   that exits after sending `r`. */
void measure_run(const measure_job* job, const uint8_t* code, size_t code_len, measure_result* r);

#endif

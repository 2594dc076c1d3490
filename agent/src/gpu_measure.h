/* GPU measure jobs (artifact kind "cubin" or "ptx"), run in the job's child process: the
   module loaded through libcuda (dlopen'ed by the runtime's kiln/cuda_driver.h), the buffers
   copied to the device, the job's launches run in order and timed with CUDA events. */
#ifndef KILN_AGENT_GPU_MEASURE_H
#define KILN_AGENT_GPU_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "job_args.h"

/* Runs a GPU job and fills `r` as measure_run does. A fault on the device is RUNTIME_CRASH,
   with the driver's error; it leaves the process's CUDA unusable, which is why it runs in the
   job's child. */
void gpu_measure_run(const measure_job* job, const uint8_t* code, size_t code_len,
                     measure_result* r);

#endif

/* CPU measure jobs (artifact kind "shared-object"), run in the job's child process: the
   artifact loaded by kiln's ELF loader against the agent's imports, the kernel called and timed
   (time_evaluator.h). */
#ifndef KILN_AGENT_CPU_MEASURE_H
#define KILN_AGENT_CPU_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "elf_loader.h"
#include "job_args.h"

/* What an artifact may import from the agent: the runtime's functions and the libm functions
   LLVM may call. Ends with a NULL name. */
const kiln_symbol* agent_imports(void);

/* Runs a CPU job and fills `r` as measure_run does. */
void cpu_measure_run(const measure_job* job, const uint8_t* code, size_t code_len,
                     measure_result* r);

#endif

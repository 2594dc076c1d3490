/* One measure job, run in the child process the agent forked for it: the artifact loaded,
   the arguments made, the kernel called and timed as TVM's time evaluator times it. */
#ifndef KILN_AGENT_MEASURE_H
#define KILN_AGENT_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "elf_loader.h"
#include "kiln/v1/agent.pb-c.h"

typedef Kiln__V1__MeasureJob measure_job;
typedef Kiln__V1__MeasureResult measure_result;
typedef Kiln__V1__MeasureSettings measure_settings;

/* A job's settings: its own, or every default when it sent none. */
const measure_settings* job_settings(const measure_job* job);

/* What an artifact may import from the agent: the runtime's functions and the libm functions
   LLVM may call. Ends with a NULL name. */
const kiln_symbol* agent_imports(void);

/* Runs `job` on the artifact `code` in this process and fills `r` (job_id, error and message,
   rounds, outputs). Everything it allocates lives until the process exits: it runs in a child
   that exits after sending `r`. */
void measure_run(const measure_job* job, const uint8_t* code, size_t code_len, measure_result* r);

/* The message of a result, printf-style, kept in a buffer of its own. */
void result_error(measure_result* r, Kiln__V1__MeasureResult__Error error, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

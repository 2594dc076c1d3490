/* One measure job, run in the child process the agent forked for it: the artifact loaded,
   the arguments made, the kernel called and timed as TVM's time evaluator times it. */
#ifndef KILN_AGENT_MEASURE_H
#define KILN_AGENT_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "elf_loader.h"
#include "kiln/runtime.h"
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

/* A job's arguments on the host: params' values, and buffers allocated and filled (inputs with
   the job's data or seeded-random values, outputs with zeros). Shared by the CPU and GPU paths. */
typedef struct {
  size_t n;           /* job->n_arguments */
  kiln_value* values; /* a param's value, a buffer's host pointer */
  size_t* counts;     /* a buffer's elements */
  size_t* bytes;      /* a buffer's bytes */
  size_t n_outputs;
} host_arguments;

/* 0, or -1 with r's error set. */
int host_arguments_make(const measure_job* job, host_arguments* h, measure_result* r);
/* r->outputs from the host buffers: checksums, and the bytes when the job asks. */
int host_arguments_report(const measure_job* job, const host_arguments* h, measure_result* r);
/* One round of `number` runs of a job's kernels: the milliseconds one run took on average, or
   a negative number when a run failed (ctx keeps why). */
typedef double (*measure_round_fn)(void* ctx, int number);
/* TVM's time evaluator after the job's first run, for CPU and GPU jobs alike: the rest of the
   warm-up runs, then `number` runs a round (grown, up to max_number, until a round lasts
   min_repeat_ms when the job gives no number), then `repeat` rounds with cooldown_ms between
   them, into r->number and r->round_ms. 0; -1 when a round failed; -2 with r's error set. */
int measure_rounds(const measure_settings* m, int max_number, measure_round_fn round, void* ctx,
                   measure_result* r);
/* r's error for a kernel that returned `status`. */
void kernel_failed(measure_result* r, int32_t status);
size_t element_size(Kiln__V1__ElementType t);

/* The message of a result, printf-style, kept in a buffer of its own. */
void result_error(measure_result* r, Kiln__V1__MeasureResult__Error error, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

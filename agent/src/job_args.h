/* A measure job's arguments on the host, and what its result says went wrong: what the CPU
   and GPU paths (cpu_measure.h, gpu_measure.h) share. */
#ifndef KILN_AGENT_JOB_ARGS_H
#define KILN_AGENT_JOB_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "kiln/runtime.h"
#include "kiln/v1/agent.pb-c.h"

typedef Kiln__V1__MeasureJob measure_job;
typedef Kiln__V1__MeasureResult measure_result;
typedef Kiln__V1__MeasureSettings measure_settings;

/* A job's settings: its own, or every default when it sent none. */
const measure_settings* job_settings(const measure_job* job);

/* A job's arguments on the host: params' values, and buffers allocated and filled (inputs with
   the job's data or seeded-random values, outputs with zeros). */
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
size_t element_size(Kiln__V1__ElementType t);

/* r's error for a kernel that returned `status`. */
void kernel_failed(measure_result* r, int32_t status);
/* The message of a result, printf-style, kept in a buffer of its own. */
void result_error(measure_result* r, Kiln__V1__MeasureResult__Error error, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif

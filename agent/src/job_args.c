/* A measure job's arguments on the host, and its result's errors (job_args.h). */
#include "job_args.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef Kiln__V1__JobArgument job_argument;

const measure_settings* job_settings(const measure_job* job) {
  static measure_settings defaults = KILN__V1__MEASURE_SETTINGS__INIT;
  return job->settings ? job->settings : &defaults;
}

void result_error(measure_result* r, Kiln__V1__MeasureResult__Error error, const char* fmt, ...) {
  static char message[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt, ap);
  va_end(ap);
  r->error = error;
  r->message = message;
}

size_t element_size(Kiln__V1__ElementType t) {
  switch (t) {
    case KILN__V1__ELEMENT_TYPE__ELEMENT_BOOL:
      return 1;
    case KILN__V1__ELEMENT_TYPE__ELEMENT_I32:
    case KILN__V1__ELEMENT_TYPE__ELEMENT_F32:
      return 4;
    case KILN__V1__ELEMENT_TYPE__ELEMENT_I64:
    case KILN__V1__ELEMENT_TYPE__ELEMENT_F64:
      return 8;
    default:
      return 0;
  }
}

static uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Seeded-random values: uniform in [-1, 1) for floats, [0, 8) for integers, 0 or 1 for bool. */
static void fill_random(void* data, size_t count, Kiln__V1__ElementType t, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = splitmix64(&state);
    double unit = (double)(bits >> 11) * 0x1.0p-53; /* [0, 1) */
    switch (t) {
      case KILN__V1__ELEMENT_TYPE__ELEMENT_BOOL:
        ((uint8_t*)data)[i] = (uint8_t)(bits >> 63);
        break;
      case KILN__V1__ELEMENT_TYPE__ELEMENT_I32:
        ((int32_t*)data)[i] = (int32_t)(bits >> 61);
        break;
      case KILN__V1__ELEMENT_TYPE__ELEMENT_I64:
        ((int64_t*)data)[i] = (int64_t)(bits >> 61);
        break;
      case KILN__V1__ELEMENT_TYPE__ELEMENT_F32:
        ((float*)data)[i] = (float)(2 * unit - 1);
        break;
      default:
        ((double*)data)[i] = 2 * unit - 1;
        break;
    }
  }
}

static double checksum(const void* data, size_t count, Kiln__V1__ElementType t) {
  double sum = 0;
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case KILN__V1__ELEMENT_TYPE__ELEMENT_BOOL:
        sum += ((const uint8_t*)data)[i];
        break;
      case KILN__V1__ELEMENT_TYPE__ELEMENT_I32:
        sum += ((const int32_t*)data)[i];
        break;
      case KILN__V1__ELEMENT_TYPE__ELEMENT_I64:
        sum += (double)((const int64_t*)data)[i];
        break;
      case KILN__V1__ELEMENT_TYPE__ELEMENT_F32:
        sum += ((const float*)data)[i];
        break;
      default:
        sum += ((const double*)data)[i];
        break;
    }
  }
  return sum;
}

void kernel_failed(measure_result* r, int32_t status) {
  r->status = status;
  if (status == KILN_ERR_ALLOC)
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY,
                 "the kernel could not allocate a temporary (status %d)", status);
  else
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__KERNEL_ERROR,
                 "the kernel returned status %d%s", status,
                 status >= KILN_ERR_CHECK   ? " (a check of the artifact's `checks` failed)"
                 : status == KILN_ERR_ARGS  ? " (the argument count is wrong)"
                 : status == KILN_ERR_ARITH ? " (an integer division by zero)"
                                            : " (not a status kiln's kernels return)");
}

int host_arguments_make(const measure_job* job, host_arguments* h, measure_result* r) {
  size_t n = job->n_arguments;
  h->n = n;
  h->n_outputs = 0;
  h->values = calloc(n ? n : 1, sizeof(kiln_value));
  h->counts = calloc(n ? n : 1, sizeof(size_t));
  h->bytes = calloc(n ? n : 1, sizeof(size_t));
  if (!h->values || !h->counts || !h->bytes) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the arguments");
    return -1;
  }
  for (size_t i = 0; i < n; ++i) {
    const job_argument* a = job->arguments[i];
    if (!a->is_buffer) {
      h->values[i].i64 = a->value;
      continue;
    }
    size_t size = element_size(a->type);
    if (size == 0) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB, "buffer %s has no element type",
                   a->name);
      return -1;
    }
    size_t count = 1;
    for (size_t d = 0; d < a->n_shape; ++d) {
      if (a->shape[d] < 0 || (a->shape[d] > 0 && count > SIZE_MAX / 16 / (size_t)a->shape[d])) {
        result_error(r, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB,
                     "buffer %s: extent %lld of dimension %zu is negative or too large", a->name,
                     (long long)a->shape[d], d);
        return -1;
      }
      count *= (size_t)a->shape[d];
    }
    size_t bytes = count * size;
    void* data = kiln_alloc(bytes, 64);
    if (!data) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY,
                   "cannot allocate buffer %s of %zu bytes", a->name, bytes);
      return -1;
    }
    if (a->output) {
      memset(data, 0, bytes);
      ++h->n_outputs;
    } else if (a->data.len > 0) {
      if (a->data.len != bytes) {
        result_error(r, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB,
                     "input %s: %zu bytes given for %zu elements of %zu bytes", a->name,
                     a->data.len, count, size);
        return -1;
      }
      memcpy(data, a->data.data, bytes);
    } else {
      fill_random(data, count, a->type, job->seed * 0x100000001b3ull + i);
    }
    h->values[i].ptr = data;
    h->counts[i] = count;
    h->bytes[i] = bytes;
  }
  return 0;
}

int host_arguments_report(const measure_job* job, const host_arguments* h, measure_result* r) {
  r->outputs = calloc(h->n_outputs ? h->n_outputs : 1, sizeof *r->outputs);
  if (!r->outputs) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the outputs");
    return -1;
  }
  for (size_t i = 0; i < h->n; ++i) {
    const job_argument* a = job->arguments[i];
    if (!a->is_buffer || !a->output) continue;
    Kiln__V1__OutputValues* o = malloc(sizeof *o);
    if (!o) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the outputs");
      return -1;
    }
    kiln__v1__output_values__init(o);
    o->name = a->name;
    o->type = a->type;
    o->n_shape = a->n_shape;
    o->shape = a->shape; /* the job's, which outlives the result */
    o->checksum = checksum(h->values[i].ptr, h->counts[i], a->type);
    if (job->return_outputs) {
      o->data.data = malloc(h->bytes[i] ? h->bytes[i] : 1);
      if (!o->data.data) {
        result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY,
                     "no memory to return output %s", a->name);
        return -1;
      }
      memcpy(o->data.data, h->values[i].ptr, h->bytes[i]);
      o->data.len = h->bytes[i];
    }
    r->outputs[r->n_outputs++] = o;
  }
  return 0;
}

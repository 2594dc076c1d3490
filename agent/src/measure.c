/* One measure job in the child (measure.h). */
#define _GNU_SOURCE
#include "measure.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_measure.h"
#include "kiln/runtime.h"

typedef Kiln__V1__JobArgument job_argument;

/* A function pointer as the loader's address: POSIX lets the two share a representation. */
static void* address_of(void (*fn)(void)) {
  void* p;
  memcpy(&p, &fn, sizeof p);
  return p;
}

const kiln_symbol* agent_imports(void) {
  static kiln_symbol table[64];
  if (table[0].name) return table;
  size_t n = 0;
  for (const kiln_runtime_symbol* s = kiln_runtime_symbols(); s->name && n < 40; ++s)
    table[n++] = (kiln_symbol){s->name, address_of(s->address)};
#define LIBM(f) table[n++] = (kiln_symbol){#f, address_of((void (*)(void))f)}
  LIBM(expf);
  LIBM(exp);
  LIBM(logf);
  LIBM(log);
  LIBM(sinf);
  LIBM(sin);
  LIBM(cosf);
  LIBM(cos);
  LIBM(powf);
  LIBM(pow);
  LIBM(sqrtf);
  LIBM(sqrt);
  LIBM(floorf);
  LIBM(floor);
  LIBM(ceilf);
  LIBM(ceil);
  LIBM(fabsf);
  LIBM(fabs);
#undef LIBM
  table[n] = (kiln_symbol){NULL, NULL};
  return table;
}

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

static double now_ms(void) { return (double)kiln_now_ns() * 1e-6; }

static void sleep_ms(int ms) {
  if (ms <= 0) return;
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

typedef struct {
  kiln_entry_fn entry;
  kiln_value* args;
  int32_t nargs;
  /* the buffers, for flushing */
  size_t nbuf;
  void** buf;
  size_t* bytes;
  int flush;
} call_site;

/* One call (flushing first when asked), its time in *ms; the kernel's status. */
static int32_t call(const call_site* c, double* ms) {
  if (c->flush)
    for (size_t i = 0; i < c->nbuf; ++i) kiln_cache_flush(c->buf[i], c->bytes[i]);
  uint64_t t0 = kiln_now_ns();
  int32_t status = c->entry(c->args, c->nargs);
  *ms = (double)(kiln_now_ns() - t0) * 1e-6;
  return status;
}

/* A round of `number` calls: its time per call, or -1 with *status set by a failing call. */
static double round_per_call(const call_site* c, int number, int32_t* status) {
  double total = 0;
  if (!c->flush) {
    uint64_t t0 = kiln_now_ns();
    for (int i = 0; i < number; ++i)
      if ((*status = c->entry(c->args, c->nargs)) != KILN_OK) return -1;
    total = (double)(kiln_now_ns() - t0) * 1e-6;
  } else {
    for (int i = 0; i < number; ++i) {
      double ms = 0;
      if ((*status = call(c, &ms)) != KILN_OK) return -1;
      total += ms;
    }
  }
  return total / number;
}

/* A CPU job's rounds (measure_rounds): the call site, and the status of a call that failed. */
typedef struct {
  const call_site* c;
  int32_t status;
} cpu_rounds;

static double cpu_round(void* ctx, int number) {
  cpu_rounds* x = ctx;
  return round_per_call(x->c, number, &x->status);
}

int measure_rounds(const measure_settings* m, int max_number, measure_round_fn round, void* ctx,
                   measure_result* r) {
  for (int i = 1; i < (m->warmup > 0 ? m->warmup : 1); ++i)
    if (round(ctx, 1) < 0) return -1;
  /* `number` runs a round; grown until a round lasts min_repeat_ms when not given. */
  int number = m->number > 0 ? m->number : 1;
  double min_ms = m->min_repeat_ms > 0 ? m->min_repeat_ms : 0;
  if (m->number <= 0 && min_ms > 0) {
    for (;;) {
      double per_run = round(ctx, number);
      if (per_run < 0) return -1;
      if (per_run * number >= min_ms || number >= max_number) break;
      /* Aim past min_repeat_ms at once, growing at least 1.6 times. */
      double want = per_run > 0 ? min_ms / per_run * 1.1 : number * 10.0;
      double grown = fmax(want, number * 1.6);
      number = grown > max_number ? max_number : (int)ceil(grown);
    }
  }
  int repeat = m->repeat > 0 ? m->repeat : 3;
  r->number = number;
  r->round_ms = calloc((size_t)repeat, sizeof(double));
  if (!r->round_ms) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for %d rounds",
                 repeat);
    return -2;
  }
  for (int k = 0; k < repeat; ++k) {
    if (k > 0) sleep_ms(m->cooldown_ms);
    double per_run = round(ctx, number);
    if (per_run < 0) return -1;
    r->round_ms[r->n_round_ms++] = per_run;
  }
  return 0;
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

void measure_run(const measure_job* job, const uint8_t* code, size_t code_len, measure_result* r) {
  if (is_gpu_kind(job->artifact_kind)) {
    gpu_measure_run(job, code, code_len, r);
    return;
  }
  double start = now_ms();
  const measure_settings* m = job_settings(job);
  r->job_id = job->job_id;
  char err[512];
  kiln_elf* elf = kiln_elf_load(code, code_len, agent_imports(), err, sizeof err);
  if (!elf) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR, "%s", err);
    return;
  }
  kiln_entry_fn entry = NULL;
  void* sym = kiln_elf_symbol(elf, job->entry);
  if (!sym) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR,
                 "the artifact has no entry point '%s'", job->entry);
    return;
  }
  memcpy(&entry, &sym, sizeof entry);

  host_arguments h;
  if (host_arguments_make(job, &h, r) != 0) return;
  size_t n = h.n;
  call_site c = {entry,
                 h.values,
                 (int32_t)n,
                 0,
                 calloc(n ? n : 1, sizeof(void*)),
                 calloc(n ? n : 1, sizeof(size_t)),
                 m->flush_cache};
  if (!c.buf || !c.bytes) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the arguments");
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!job->arguments[i]->is_buffer) continue;
    c.buf[c.nbuf] = h.values[i].ptr;
    c.bytes[c.nbuf++] = h.bytes[i];
  }

  r->threads = kiln_runtime_set_threads(m->threads > 0 ? m->threads : 0);

  /* The first call runs on fresh buffers: its outputs are the ones reported (a kernel may
     accumulate into its outputs, so later calls' would differ). It is the first warm-up. */
  double ms = 0;
  int32_t status = call(&c, &ms);
  if (status != KILN_OK) {
    kernel_failed(r, status);
    return;
  }
  if (host_arguments_report(job, &h, r) != 0) return;

  cpu_rounds rounds = {&c, KILN_OK};
  int rc = measure_rounds(m, 1 << 30, cpu_round, &rounds, r);
  if (rc == -1) kernel_failed(r, rounds.status);
  if (rc != 0) return;
  r->wall_ms = now_ms() - start;
}

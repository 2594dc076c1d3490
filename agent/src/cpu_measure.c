/* CPU measure jobs (cpu_measure.h). */
#include "cpu_measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"
#include "time_evaluator.h"

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

static double now_ms(void) { return (double)kiln_now_ns() * 1e-6; }

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

/* A whole model's job (kind "model"): the model the loaded shared object and the job's weights
   make, called through the kernel ABI as one entry whose arguments are its inputs, then its
   outputs. A measure child runs one job: the model is the child's. */
static kiln_model* the_model;
static int32_t the_model_inputs;
static const void** the_model_in;
static void** the_model_out;

static int32_t model_entry(const kiln_value* args, int32_t nargs) {
  int32_t outputs = kiln_model_num_outputs(the_model);
  if (nargs != the_model_inputs + outputs) return KILN_ERR_ARGS;
  for (int32_t i = 0; i < the_model_inputs; ++i) the_model_in[i] = args[i].ptr;
  for (int32_t i = 0; i < outputs; ++i) the_model_out[i] = args[the_model_inputs + i].ptr;
  return kiln_model_run(the_model, the_model_in, the_model_out);
}

/* The model in `elf` with the job's weights as the_model, and model_entry in *entry; 0, or -1
   with the load error in r. */
static int open_model(const measure_job* job, kiln_elf* elf, kiln_entry_fn* entry,
                      measure_result* r) {
  const char* plan = kiln_elf_symbol(elf, "kiln_model_plan");
  void* table = kiln_elf_symbol(elf, "kiln_model_kernels");
  if (!plan || !table) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR,
                 "the artifact is not a kiln model: it has no kiln_model_plan or "
                 "kiln_model_kernels");
    return -1;
  }
  char err[1024];
  the_model = kiln_model_from_image(plan, (kiln_entry_fn const*)table, job->weights.data,
                                    job->weights.len, err, sizeof err);
  if (!the_model) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR, "%s", err);
    return -1;
  }
  the_model_inputs = kiln_model_num_inputs(the_model);
  int32_t outputs = kiln_model_num_outputs(the_model);
  the_model_in = calloc((size_t)the_model_inputs + 1, sizeof *the_model_in);
  the_model_out = calloc((size_t)outputs + 1, sizeof *the_model_out);
  if (!the_model_in || !the_model_out) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the model");
    return -1;
  }
  *entry = model_entry;
  return 0;
}

void cpu_measure_run(const measure_job* job, const uint8_t* code, size_t code_len,
                     measure_result* r) {
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
  if (job->artifact_kind && !strcmp(job->artifact_kind, "model")) {
    if (open_model(job, elf, &entry, r) != 0) return;
  } else {
    void* sym = kiln_elf_symbol(elf, job->entry);
    if (!sym) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR,
                   "the artifact has no entry point '%s'", job->entry);
      return;
    }
    memcpy(&entry, &sym, sizeof entry);
  }

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

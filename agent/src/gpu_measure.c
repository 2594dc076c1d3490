/* GPU measure jobs (gpu_measure.h). */
#define _GNU_SOURCE
#include "gpu_measure.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kiln/cuda_driver.h"
#include "time_evaluator.h"

#if defined(KILN_AGENT_STATIC)

void gpu_measure_run(const measure_job* job, const uint8_t* code, size_t code_len,
                     measure_result* r) {
  (void)code;
  (void)code_len;
  r->job_id = job->job_id;
  result_error(r, KILN__V1__MEASURE_RESULT__ERROR__UNSUPPORTED,
               "a static kiln-agent does not load libcuda: it runs no GPU job");
}

#else

typedef struct {
  kiln_cuda* cuda;
  size_t nlaunch;
  void** fns;
  const Kiln__V1__GpuLaunch* const* launches;
  void** args; /* cuLaunchKernel's: one pointer per kernel parameter */
  uint64_t status;
} gpu_site;

static double wall_ms(void) { return (double)kiln_now_ns() * 1e-6; }

/* Launches every kernel once, in order. */
static int launch_all(gpu_site* g, char* err, size_t len) {
  for (size_t k = 0; k < g->nlaunch; ++k) {
    const Kiln__V1__GpuLaunch* l = g->launches[k];
    unsigned grid[3] = {l->grid[0], l->grid[1], l->grid[2]};
    unsigned block[3] = {l->block[0], l->block[1], l->block[2]};
    if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) continue; /* an empty launch */
    if (kiln_cuda_launch(g->cuda, g->fns[k], grid, block, 0, g->args, err, len) != 0) return -1;
  }
  return 0;
}

/* A round of `number` runs of all the kernels, timed on the device: ms per run, or -1. */
static double round_ms(gpu_site* g, int number, char* err, size_t len) {
  if (kiln_cuda_mark(g->cuda, err, len) != 0) return -1;
  for (int i = 0; i < number; ++i)
    if (launch_all(g, err, len) != 0) return -1;
  float ms = 0;
  if (kiln_cuda_elapsed_ms(g->cuda, &ms, err, len) != 0) return -1;
  return (double)ms / number;
}

/* A GPU job's rounds (measure_rounds): the launch site, and the driver's error of a round that
   failed. */
typedef struct {
  gpu_site* g;
  char err[512];
} gpu_rounds;

static double gpu_round(void* ctx, int number) {
  gpu_rounds* x = ctx;
  return round_ms(x->g, number, x->err, sizeof x->err);
}

static void device_failed(measure_result* r, const char* err) {
  result_error(r, KILN__V1__MEASURE_RESULT__ERROR__RUNTIME_CRASH,
               "the kernel failed on the GPU: %s", err);
}

/* The status word the kernels write: 0, or the first failing check's code. */
static int read_status(gpu_site* g, int32_t* status, char* err, size_t len) {
  return kiln_cuda_copy_to_host(g->cuda, status, g->status, sizeof *status, err, len);
}

void gpu_measure_run(const measure_job* job, const uint8_t* code, size_t code_len,
                     measure_result* r) {
  double start = wall_ms();
  const measure_settings* m = job_settings(job);
  r->job_id = job->job_id;
  char err[512];
  gpu_site g = {0};
  g.cuda = kiln_cuda_open(job->gpu, err, sizeof err);
  if (!g.cuda) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__UNSUPPORTED, "GPU %d: %s", job->gpu, err);
    return;
  }
  const kiln_cuda_info* info = kiln_cuda_device(g.cuda);
  /* PTX is text: the driver wants it NUL-terminated. */
  uint8_t* image = malloc(code_len + 1);
  if (!image) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the module");
    return;
  }
  memcpy(image, code, code_len);
  image[code_len] = 0;
  void* module = NULL;
  if (kiln_cuda_load(g.cuda, image, &module, err, sizeof err) != 0) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR, "%s on %s (sm_%d%d)", err,
                 info->name, info->compute_major, info->compute_minor);
    return;
  }
  g.nlaunch = job->n_launches;
  g.launches = (const Kiln__V1__GpuLaunch* const*)job->launches;
  g.fns = calloc(g.nlaunch ? g.nlaunch : 1, sizeof(void*));
  if (!g.fns) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the launches");
    return;
  }
  for (size_t k = 0; k < g.nlaunch; ++k) {
    const Kiln__V1__GpuLaunch* l = job->launches[k];
    if (l->n_grid != 3 || l->n_block != 3) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB,
                   "launch %s: a grid and a block have 3 extents each", l->kernel);
      return;
    }
    long long threads = (long long)l->block[0] * l->block[1] * l->block[2];
    if (threads > info->max_threads_per_block ||
        (int)l->shared_bytes > info->max_shared_per_block) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR,
                   "kernel %s needs %lld threads and %u bytes of shared memory per block; %s "
                   "allows %d and %d",
                   l->kernel, threads, l->shared_bytes, info->name, info->max_threads_per_block,
                   info->max_shared_per_block);
      return;
    }
    if (kiln_cuda_function(g.cuda, module, l->kernel, &g.fns[k], err, sizeof err) != 0) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR, "%s", err);
      return;
    }
  }

  host_arguments h;
  if (host_arguments_make(job, &h, r) != 0) return;
  size_t nparams = job->n_arguments + job->n_temp_bytes + 1;
  g.args = calloc(nparams, sizeof(void*));
  uint64_t* device = calloc(job->n_arguments + job->n_temp_bytes + 1, sizeof(uint64_t));
  if (!g.args || !device) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for the arguments");
    return;
  }
  size_t p = 0;
  for (size_t i = 0; i < h.n; ++i) {
    if (!job->arguments[i]->is_buffer) {
      g.args[p++] = &h.values[i].i64;
      continue;
    }
    if (kiln_cuda_alloc(g.cuda, h.bytes[i], &device[i], err, sizeof err) != 0 ||
        kiln_cuda_copy_to_device(g.cuda, device[i], h.values[i].ptr, h.bytes[i], err, sizeof err) !=
            0) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "buffer %s: %s",
                   job->arguments[i]->name, err);
      return;
    }
    g.args[p++] = &device[i];
  }
  for (size_t t = 0; t < job->n_temp_bytes; ++t) {
    uint64_t* d = &device[h.n + t];
    if (kiln_cuda_alloc(g.cuda, job->temp_bytes[t], d, err, sizeof err) != 0 ||
        kiln_cuda_zero(g.cuda, *d, job->temp_bytes[t], err, sizeof err) != 0) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY,
                   "a device temporary of %llu bytes: %s", (unsigned long long)job->temp_bytes[t],
                   err);
      return;
    }
    g.args[p++] = d;
  }
  /* Buffers the kernels read from constant memory: copied into the module once. */
  for (size_t k = 0; k < job->n_constants; ++k) {
    const Kiln__V1__GpuConstantCopy* c = job->constants[k];
    if (c->argument >= h.n || !job->arguments[c->argument]->is_buffer) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__BAD_JOB,
                   "constant %s: argument %u is not a buffer of the job", c->symbol, c->argument);
      return;
    }
    if (kiln_cuda_copy_to_global(g.cuda, module, c->symbol, device[c->argument],
                                 h.bytes[c->argument], err, sizeof err) != 0) {
      result_error(r, KILN__V1__MEASURE_RESULT__ERROR__LOAD_ERROR,
                   "buffer %s into constant memory: %s", job->arguments[c->argument]->name, err);
      return;
    }
  }
  if (kiln_cuda_alloc(g.cuda, sizeof(int32_t), &g.status, err, sizeof err) != 0 ||
      kiln_cuda_zero(g.cuda, g.status, sizeof(int32_t), err, sizeof err) != 0) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "the status word: %s", err);
    return;
  }
  g.args[p++] = &g.status;

  /* The first run, on the inputs as sent: its outputs are the ones reported. */
  int32_t status = 0;
  if (launch_all(&g, err, sizeof err) != 0 || kiln_cuda_sync(g.cuda, err, sizeof err) != 0 ||
      read_status(&g, &status, err, sizeof err) != 0) {
    device_failed(r, err);
    return;
  }
  if (status != 0) {
    kernel_failed(r, status);
    return;
  }
  for (size_t i = 0; i < h.n; ++i) {
    if (!job->arguments[i]->is_buffer || !job->arguments[i]->output) continue;
    if (kiln_cuda_copy_to_host(g.cuda, h.values[i].ptr, device[i], h.bytes[i], err, sizeof err) !=
        0) {
      device_failed(r, err);
      return;
    }
  }
  if (host_arguments_report(job, &h, r) != 0) return;

  gpu_rounds rounds = {&g, {0}};
  int rc = measure_rounds(m, 1 << 20, gpu_round, &rounds, r);
  if (rc == -1) device_failed(r, rounds.err);
  if (rc != 0) return;
  if (read_status(&g, &status, err, sizeof err) != 0) {
    device_failed(r, err);
    return;
  }
  if (status != 0) {
    kernel_failed(r, status);
    return;
  }
  r->wall_ms = wall_ms() - start;
}

#endif

/* kiln's C runtime: what generated kernels, the JIT and agents call at run time. */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The packed-argument ABI every kernel entry point has. args: the run-time
   params (i64) first, in declaration order, then one pointer per buffer
   argument (inputs and outputs), in declaration order. Returns 0, or a
   nonzero error code: KILN_ERR_ARGS when nargs is wrong, KILN_ERR_ALLOC when a
   temporary cannot be allocated, KILN_ERR_ARITH for an integer division by zero
   (or of the smallest integer by -1) outside any one computation, and
   KILN_ERR_CHECK + k when the kernel's own check k fails: an input breaking its
   value spec, a division in a known computation (the artifact's "checks" say
   which). Outputs are not to be used after a nonzero status. */
typedef union kiln_value {
  void* ptr;
  int64_t i64;
  double f64;
} kiln_value;
typedef int32_t (*kiln_entry_fn)(const kiln_value* args, int32_t nargs);
enum {
  KILN_OK = 0,
  KILN_ERR_ARGS = 1,
  KILN_ERR_ALLOC = 2,
  KILN_ERR_ARITH = 3,
  KILN_ERR_CHECK = 16
};

/* Runs fn(begin, end, closure) over [0, n) split into one contiguous share per thread of the pool
   (the calling thread's is the first), each run in chunks; a thread whose share is done takes
   chunks of the others'. A call made from inside a task runs serially in that task,
   and so does a call made while another thread's launch holds the pool, and, for a while, a
   call made when the pool found the host short of CPUs (kiln_pool_stats). A thread waits for
   the end of a launch only for the chunks taken, not for a worker that has not come. Returns
   KILN_OK once every index has run, KILN_ERR_ARGS when fn is NULL or n < 0. */
typedef void (*kiln_task_fn)(int64_t begin, int64_t end, void* closure);
int32_t kiln_parallel_launch(kiln_task_fn fn, void* closure, int64_t n);

/* Threads a launch uses (>= 1), the calling thread included. */
int kiln_runtime_threads(void);

/* The threads a pool would have by default (KILN_NUM_THREADS, else one per physical core allowed
   to the process), without making one: for a program that runs no kernel itself. */
int kiln_runtime_default_threads(void);

/* Replaces the pool with one of n threads (0 = the default: KILN_NUM_THREADS, else one per
   physical core allowed to the process). Returns the count in effect. Must not be called while
   a launch runs; called from inside a task it changes nothing. */
int kiln_runtime_set_threads(int n);

/* 1 when every worker the pool planned a CPU for is pinned to it, 0 when pinning was not
   allowed (the pool then runs unpinned) or there is no worker to pin. */
int kiln_runtime_pinned(void);

/* What the pool did since the process started: launches run on several threads and, because
   the host was short of CPUs (another process busy beside the kernel), on the launching thread
   alone; how often a thread of the pool found it was off its CPU while the host had more
   runnable threads than CPUs (contended); waits for a launch begun spinning, and those cut
   short because the spinning thread was off its CPU; the spin budget. For tests and
   benchmarks. */
typedef struct {
  uint64_t parallel_launches, alone_launches, contended, spins, spins_cut, spin_budget_ns;
} kiln_pool_stats;
void kiln_runtime_pool_stats(kiln_pool_stats* out);

/* Nanoseconds from CLOCK_MONOTONIC. */
uint64_t kiln_now_ns(void);

/* Writes back and evicts every cache line of [p, p + bytes) from all cache levels, then fences:
   clflushopt (or clflush) on x86-64, dc civac on aarch64, a fence only elsewhere. */
void kiln_cache_flush(const void* p, size_t bytes);

/* An aligned buffer (align 0 means 64; smaller alignments are raised to 64; align must be a
   power of two) of at least bytes bytes, or NULL. Free it with kiln_free. */
void* kiln_alloc(size_t bytes, size_t align);
void kiln_free(void* p);

/* Every function generated code may call, by name, for a JIT to define them in its symbol
   table. Ends with an entry whose name is NULL. The address has a generic function type (ISO C
   converts function pointers only to other function pointer types): cast it back, or to an
   integer address, before use. */
typedef void (*kiln_runtime_fn)(void);
typedef struct kiln_runtime_symbol {
  const char* name;
  kiln_runtime_fn address;
} kiln_runtime_symbol;
const kiln_runtime_symbol* kiln_runtime_symbols(void);

/* A whole model compiled by kiln (`kiln compile model.onnx`): a shared object holding every
   kernel and the plan that runs them in order, and the weights blob beside it, whose size and
   SHA-256 the plan names. The program that loads one links kiln's runtime and exports its
   symbols, where the model's kernels find them: -Wl,--whole-archive libkiln_runtime.a
   -Wl,--no-whole-archive -rdynamic (docs/models.md). */
typedef struct kiln_model kiln_model;

/* One input or output of a model: its name, element type ("f32", "f64", "i32", "i64", "bool"),
   shape (rank extents, row-major) and size in bytes. Valid while the model is open. A batched
   one (a model with a run-time batch, kiln_model_batch) is one sample: shape and bytes are a
   sample's, and kiln_model_run_batch takes n of them one after the other. */
typedef struct kiln_model_tensor {
  const char* name;
  const char* dtype;
  int32_t rank;
  const int64_t* shape;
  size_t bytes;
  int32_t batched;
} kiln_model_tensor;

/* Loads the model in so_path and its weights (weights_path, or NULL for the file beside it:
   so_path with ".so" replaced by ".weights"), checks the weights' size and SHA-256, and
   allocates the memory its intermediate tensors share. Returns NULL, with why in error (at most
   error_size bytes, NUL included; error may be NULL), when the file cannot be loaded, is not a
   kiln model, or the weights are missing or not the model's. */
kiln_model* kiln_model_open(const char* so_path, const char* weights_path, char* error,
                            size_t error_size);
void kiln_model_close(kiln_model* m); /* NULL is fine */

/* The same from a model already in memory, as a loader of its own (the agent's, which loads
   shared objects without dlopen) has it: the shared object's `kiln_model_plan` and
   `kiln_model_kernels`, and the weights' bytes, which are copied and checked as
   kiln_model_open checks a file. The kernels must stay loaded while the model is open. */
kiln_model* kiln_model_from_image(const char* plan, kiln_entry_fn const* kernels,
                                  const void* weights, size_t weights_bytes, char* error,
                                  size_t error_size);

const char* kiln_model_name(const kiln_model* m);
int32_t kiln_model_num_inputs(const kiln_model* m);
int32_t kiln_model_num_outputs(const kiln_model* m);
const kiln_model_tensor* kiln_model_input(const kiln_model* m, int32_t i);  /* NULL past the end */
const kiln_model_tensor* kiln_model_output(const kiln_model* m, int32_t i); /* NULL past the end */
size_t kiln_model_arena_bytes(const kiln_model* m);   /* the intermediate tensors' memory */
size_t kiln_model_weights_bytes(const kiln_model* m); /* the weights' */

/* Runs the model once: inputs[i] points at input i's bytes (kiln_model_input(m, i)->bytes, in
   its dtype, row-major), outputs[i] at room for output i's. Returns KILN_OK, KILN_ERR_ARGS for a
   missing pointer, or the first failing kernel's status (kiln_model_error says which call). The
   intermediate tensors live in the model: runs on one model must not overlap (open it once per
   thread that runs it). Kernels run on the runtime's thread pool. */
int32_t kiln_model_run(kiln_model* m, const void* const* inputs, void* const* outputs);
/* The name of the model's run-time batch (the leading symbolic dimension of its inputs, as
   "batch"), or NULL for a model of static shapes. Such a model is compiled for one sample and
   was shown, when kiln imported it, to keep the samples of a batch apart. */
const char* kiln_model_batch(const kiln_model* m);
/* Runs the model on a batch of n samples: each batched input and every output holds n samples
   one after the other (n times its kiln_model_tensor bytes), an input that is not batched is
   the same for every sample. n must be 1 for a model without a run-time batch. The samples run
   one after the other, each as kiln_model_run runs one; the first failure stops the run and
   kiln_model_error names the sample. */
int32_t kiln_model_run_batch(kiln_model* m, int64_t n, const void* const* inputs,
                             void* const* outputs);
/* Why the last kiln_model_run failed ("" after one that succeeded). */
const char* kiln_model_error(const kiln_model* m);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_H */

/* The CUDA driver, opened at run time: what runs kiln's GPU kernels (the agent's GPU jobs,
   `kiln run` on a GPU target, the GPU tests and benchmark). libcuda.so.1 is loaded with dlopen,
   so every program that links this starts, and reports "no GPU", on a machine without it. No
   CUDA header is needed to build it. Every call returns 0 on success, else -1 with what failed
   in err ("cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was
   encountered)"). A kernel fault is sticky: no CUDA call of the process succeeds after it, not
   even on a handle opened anew, so whatever may run a faulting kernel runs it in a process it
   can discard (the agent's child per job). */
#ifndef KILN_CUDA_DRIVER_H
#define KILN_CUDA_DRIVER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kiln_cuda kiln_cuda;

/* What a kernel may ask of the device: launches beyond these are refused before they run. */
typedef struct {
  char name[256];
  int compute_major, compute_minor;
  int multiprocessors;
  int max_threads_per_block;
  int max_block_dim[3];
  int max_grid_dim[3];
  int max_shared_per_block; /* bytes, without opting in to more */
  int max_registers_per_block;
  uint64_t memory_bytes;
} kiln_cuda_info;

/* Opens GPU `ordinal` through libcuda.so.1 and makes its primary context current on the
   calling thread. NULL, with why in err, when there is no driver or no such GPU. */
kiln_cuda* kiln_cuda_open(int ordinal, char* err, size_t len);
void kiln_cuda_close(kiln_cuda* c);
const kiln_cuda_info* kiln_cuda_device(const kiln_cuda* c);

/* Loads a module from a cubin or from PTX text (NUL-terminated), and finds a kernel in it. */
int kiln_cuda_load(kiln_cuda* c, const void* image, void** module, char* err, size_t len);
int kiln_cuda_function(kiln_cuda* c, void* module, const char* name, void** fn, char* err,
                       size_t len);
void kiln_cuda_unload(kiln_cuda* c, void* module);

int kiln_cuda_alloc(kiln_cuda* c, size_t bytes, uint64_t* dptr, char* err, size_t len);
void kiln_cuda_free(kiln_cuda* c, uint64_t dptr);
int kiln_cuda_copy_to_device(kiln_cuda* c, uint64_t dst, const void* src, size_t bytes, char* err,
                             size_t len);
int kiln_cuda_copy_to_host(kiln_cuda* c, void* dst, uint64_t src, size_t bytes, char* err,
                           size_t len);
int kiln_cuda_zero(kiln_cuda* c, uint64_t dst, size_t bytes, char* err, size_t len);
/* Copies `bytes` of device memory at src into the module's global `name` (a __constant__
   array), which must be exactly that large. */
int kiln_cuda_copy_to_global(kiln_cuda* c, void* module, const char* name, uint64_t src,
                             size_t bytes, char* err, size_t len);

/* Launches fn on the default stream; args as cuLaunchKernel takes them (one pointer per
   kernel parameter). Asynchronous: errors of the kernel itself show at kiln_cuda_sync. */
int kiln_cuda_launch(kiln_cuda* c, void* fn, const unsigned grid[3], const unsigned block[3],
                     unsigned shared_bytes, void** args, char* err, size_t len);
int kiln_cuda_sync(kiln_cuda* c, char* err, size_t len);

/* Device time with CUDA events: mark, run work, then kiln_cuda_elapsed_ms waits for it and
   gives the milliseconds since the mark. */
int kiln_cuda_mark(kiln_cuda* c, char* err, size_t len);
int kiln_cuda_elapsed_ms(kiln_cuda* c, float* ms, char* err, size_t len);

#ifdef __cplusplus
}
#endif

#endif

/* The CUDA driver API through dlopen (kiln/cuda_driver.h). The few types and constants used are
   declared here with the driver's values, so no CUDA header is needed. */
#define _POSIX_C_SOURCE 200809L

#include "kiln/cuda_driver.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int cu_result; /* CUresult: 0 is CUDA_SUCCESS */
typedef int cu_device;
typedef void* cu_context;
typedef void* cu_module;
typedef void* cu_function;
typedef void* cu_stream;
typedef void* cu_event;
typedef unsigned long long cu_ptr;

enum { /* CUdevice_attribute */
       ATTR_MAX_THREADS_PER_BLOCK = 1,
       ATTR_MAX_BLOCK_DIM_X = 2,
       ATTR_MAX_GRID_DIM_X = 5,
       ATTR_MAX_SHARED_PER_BLOCK = 8,
       ATTR_MAX_REGISTERS_PER_BLOCK = 12,
       ATTR_MULTIPROCESSORS = 16,
       ATTR_COMPUTE_MAJOR = 75,
       ATTR_COMPUTE_MINOR = 76
};

typedef struct {
  cu_result (*init)(unsigned);
  cu_result (*device_count)(int*);
  cu_result (*device_get)(cu_device*, int);
  cu_result (*device_name)(char*, int, cu_device);
  cu_result (*device_attribute)(int*, int, cu_device);
  cu_result (*device_memory)(size_t*, cu_device);
  cu_result (*primary_retain)(cu_context*, cu_device);
  cu_result (*primary_release)(cu_device);
  cu_result (*set_current)(cu_context);
  cu_result (*module_load)(cu_module*, const void*);
  cu_result (*module_unload)(cu_module);
  cu_result (*module_function)(cu_function*, cu_module, const char*);
  cu_result (*module_global)(cu_ptr*, size_t*, cu_module, const char*);
  cu_result (*mem_alloc)(cu_ptr*, size_t);
  cu_result (*mem_free)(cu_ptr);
  cu_result (*copy_htod)(cu_ptr, const void*, size_t);
  cu_result (*copy_dtoh)(void*, cu_ptr, size_t);
  cu_result (*copy_dtod)(cu_ptr, cu_ptr, size_t);
  cu_result (*memset8)(cu_ptr, unsigned char, size_t);
  cu_result (*launch)(cu_function, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                      unsigned, cu_stream, void**, void**);
  cu_result (*synchronize)(void);
  cu_result (*event_create)(cu_event*, unsigned);
  cu_result (*event_destroy)(cu_event);
  cu_result (*event_record)(cu_event, cu_stream);
  cu_result (*event_synchronize)(cu_event);
  cu_result (*event_elapsed)(float*, cu_event, cu_event);
  cu_result (*error_name)(cu_result, const char**);
  cu_result (*error_string)(cu_result, const char**);
} driver;

struct kiln_cuda {
  void* library;
  driver d;
  cu_device device;
  cu_context context;
  cu_event start, stop;
  kiln_cuda_info info;
};

static void say(char* err, size_t len, const char* fmt, ...) {
  if (!err || len == 0) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, len, fmt, ap);
  va_end(ap);
}

/* 0 for success, else -1 with "call: NAME (what it means)" in err. */
static int check(const kiln_cuda* c, cu_result r, const char* call, char* err, size_t len) {
  if (r == 0) return 0;
  const char* name = NULL;
  const char* text = NULL;
  if (c->d.error_name) c->d.error_name(r, &name);
  if (c->d.error_string) c->d.error_string(r, &text);
  if (name)
    say(err, len, "%s: %s (%s)", call, name, text ? text : "no description");
  else
    say(err, len, "%s: CUDA error %d", call, r);
  return -1;
}

/* The first of `names` the library exports. */
static void* symbol(void* library, const char* const* names) {
  for (; *names; ++names) {
    void* s = dlsym(library, *names);
    if (s) return s;
  }
  return NULL;
}

#define BIND(field, ...)                                                                       \
  do {                                                                                         \
    static const char* const names_[] = {__VA_ARGS__, NULL};                                   \
    *(void**)&c->d.field = symbol(c->library, names_);                                         \
    if (!c->d.field) {                                                                         \
      say(err, len, "libcuda.so.1 lacks %s: a driver too old for kiln's GPU path", names_[0]); \
      return -1;                                                                               \
    }                                                                                          \
  } while (0)

static int bind(kiln_cuda* c, char* err, size_t len) {
  BIND(init, "cuInit");
  BIND(device_count, "cuDeviceGetCount");
  BIND(device_get, "cuDeviceGet");
  BIND(device_name, "cuDeviceGetName");
  BIND(device_attribute, "cuDeviceGetAttribute");
  BIND(device_memory, "cuDeviceTotalMem_v2");
  BIND(primary_retain, "cuDevicePrimaryCtxRetain");
  BIND(primary_release, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease");
  BIND(set_current, "cuCtxSetCurrent");
  BIND(module_load, "cuModuleLoadData");
  BIND(module_unload, "cuModuleUnload");
  BIND(module_function, "cuModuleGetFunction");
  BIND(module_global, "cuModuleGetGlobal_v2");
  BIND(mem_alloc, "cuMemAlloc_v2");
  BIND(mem_free, "cuMemFree_v2");
  BIND(copy_htod, "cuMemcpyHtoD_v2");
  BIND(copy_dtoh, "cuMemcpyDtoH_v2");
  BIND(copy_dtod, "cuMemcpyDtoD_v2");
  BIND(memset8, "cuMemsetD8_v2");
  BIND(launch, "cuLaunchKernel");
  BIND(synchronize, "cuCtxSynchronize");
  BIND(event_create, "cuEventCreate");
  BIND(event_destroy, "cuEventDestroy_v2", "cuEventDestroy");
  BIND(event_record, "cuEventRecord");
  BIND(event_synchronize, "cuEventSynchronize");
  BIND(event_elapsed, "cuEventElapsedTime_v2", "cuEventElapsedTime");
  BIND(error_name, "cuGetErrorName");
  BIND(error_string, "cuGetErrorString");
  return 0;
}

static int attribute(kiln_cuda* c, int which) {
  int v = 0;
  c->d.device_attribute(&v, which, c->device);
  return v;
}

kiln_cuda* kiln_cuda_open(int ordinal, char* err, size_t len) {
  kiln_cuda* c = calloc(1, sizeof *c);
  if (!c) {
    say(err, len, "out of memory");
    return NULL;
  }
  c->library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!c->library) {
    say(err, len, "no GPU driver: libcuda.so.1 cannot be loaded (%s)", dlerror());
    free(c);
    return NULL;
  }
  int count = 0;
  if (bind(c, err, len) != 0 || check(c, c->d.init(0), "cuInit", err, len) != 0 ||
      check(c, c->d.device_count(&count), "cuDeviceGetCount", err, len) != 0) {
    dlclose(c->library);
    free(c);
    return NULL;
  }
  if (ordinal < 0 || ordinal >= count) {
    say(err, len, "no GPU %d: the driver reports %d GPU%s", ordinal, count, count == 1 ? "" : "s");
    dlclose(c->library);
    free(c);
    return NULL;
  }
  if (check(c, c->d.device_get(&c->device, ordinal), "cuDeviceGet", err, len) != 0 ||
      check(c, c->d.primary_retain(&c->context, c->device), "cuDevicePrimaryCtxRetain", err, len) !=
          0) {
    dlclose(c->library);
    free(c);
    return NULL;
  }
  if (check(c, c->d.set_current(c->context), "cuCtxSetCurrent", err, len) != 0 ||
      check(c, c->d.event_create(&c->start, 0), "cuEventCreate", err, len) != 0 ||
      check(c, c->d.event_create(&c->stop, 0), "cuEventCreate", err, len) != 0) {
    kiln_cuda_close(c);
    return NULL;
  }
  kiln_cuda_info* i = &c->info;
  if (c->d.device_name(i->name, (int)sizeof i->name, c->device) != 0) strcpy(i->name, "?");
  i->compute_major = attribute(c, ATTR_COMPUTE_MAJOR);
  i->compute_minor = attribute(c, ATTR_COMPUTE_MINOR);
  i->multiprocessors = attribute(c, ATTR_MULTIPROCESSORS);
  i->max_threads_per_block = attribute(c, ATTR_MAX_THREADS_PER_BLOCK);
  for (int d = 0; d < 3; ++d) {
    i->max_block_dim[d] = attribute(c, ATTR_MAX_BLOCK_DIM_X + d);
    i->max_grid_dim[d] = attribute(c, ATTR_MAX_GRID_DIM_X + d);
  }
  i->max_shared_per_block = attribute(c, ATTR_MAX_SHARED_PER_BLOCK);
  i->max_registers_per_block = attribute(c, ATTR_MAX_REGISTERS_PER_BLOCK);
  size_t bytes = 0;
  if (c->d.device_memory(&bytes, c->device) == 0) i->memory_bytes = bytes;
  return c;
}

void kiln_cuda_close(kiln_cuda* c) {
  if (!c) return;
  if (c->start) c->d.event_destroy(c->start);
  if (c->stop) c->d.event_destroy(c->stop);
  if (c->context) c->d.primary_release(c->device);
  /* The library stays loaded: the driver keeps threads of its own that would be left running
     code that dlclose unmapped. */
  free(c);
}

const kiln_cuda_info* kiln_cuda_device(const kiln_cuda* c) { return &c->info; }

int kiln_cuda_load(kiln_cuda* c, const void* image, void** module, char* err, size_t len) {
  cu_module m = NULL;
  if (check(c, c->d.module_load(&m, image), "cuModuleLoadData", err, len) != 0) return -1;
  *module = m;
  return 0;
}

int kiln_cuda_function(kiln_cuda* c, void* module, const char* name, void** fn, char* err,
                       size_t len) {
  cu_function f = NULL;
  char call[320];
  snprintf(call, sizeof call, "cuModuleGetFunction(%s)", name);
  if (check(c, c->d.module_function(&f, module, name), call, err, len) != 0) return -1;
  *fn = f;
  return 0;
}

void kiln_cuda_unload(kiln_cuda* c, void* module) {
  if (module) c->d.module_unload(module);
}

int kiln_cuda_alloc(kiln_cuda* c, size_t bytes, uint64_t* dptr, char* err, size_t len) {
  cu_ptr p = 0;
  /* A zero-size buffer still gets an address, so that every kernel parameter is valid. */
  if (check(c, c->d.mem_alloc(&p, bytes ? bytes : 1), "cuMemAlloc", err, len) != 0) return -1;
  *dptr = p;
  return 0;
}

int kiln_cuda_copy_to_global(kiln_cuda* c, void* module, const char* name, uint64_t src,
                             size_t bytes, char* err, size_t len) {
  cu_ptr dst = 0;
  size_t size = 0;
  char call[320];
  snprintf(call, sizeof call, "cuModuleGetGlobal(%s)", name);
  if (check(c, c->d.module_global(&dst, &size, module, name), call, err, len) != 0) return -1;
  if (size != bytes) {
    say(err, len, "%s holds %zu bytes in the module, not the %zu of its buffer", name, size, bytes);
    return -1;
  }
  if (bytes == 0) return 0;
  return check(c, c->d.copy_dtod(dst, src, bytes), "cuMemcpyDtoD", err, len);
}

void kiln_cuda_free(kiln_cuda* c, uint64_t dptr) {
  if (dptr) c->d.mem_free(dptr);
}

int kiln_cuda_copy_to_device(kiln_cuda* c, uint64_t dst, const void* src, size_t bytes, char* err,
                             size_t len) {
  if (bytes == 0) return 0;
  return check(c, c->d.copy_htod(dst, src, bytes), "cuMemcpyHtoD", err, len);
}

int kiln_cuda_copy_to_host(kiln_cuda* c, void* dst, uint64_t src, size_t bytes, char* err,
                           size_t len) {
  if (bytes == 0) return 0;
  return check(c, c->d.copy_dtoh(dst, src, bytes), "cuMemcpyDtoH", err, len);
}

int kiln_cuda_zero(kiln_cuda* c, uint64_t dst, size_t bytes, char* err, size_t len) {
  if (bytes == 0) return 0;
  return check(c, c->d.memset8(dst, 0, bytes), "cuMemsetD8", err, len);
}

int kiln_cuda_launch(kiln_cuda* c, void* fn, const unsigned grid[3], const unsigned block[3],
                     unsigned shared_bytes, void** args, char* err, size_t len) {
  return check(c,
               c->d.launch(fn, grid[0], grid[1], grid[2], block[0], block[1], block[2],
                           shared_bytes, NULL, args, NULL),
               "cuLaunchKernel", err, len);
}

int kiln_cuda_sync(kiln_cuda* c, char* err, size_t len) {
  return check(c, c->d.synchronize(), "cuCtxSynchronize", err, len);
}

int kiln_cuda_mark(kiln_cuda* c, char* err, size_t len) {
  return check(c, c->d.event_record(c->start, NULL), "cuEventRecord", err, len);
}

int kiln_cuda_elapsed_ms(kiln_cuda* c, float* ms, char* err, size_t len) {
  if (check(c, c->d.event_record(c->stop, NULL), "cuEventRecord", err, len) != 0 ||
      check(c, c->d.event_synchronize(c->stop), "cuEventSynchronize", err, len) != 0)
    return -1;
  return check(c, c->d.event_elapsed(ms, c->start, c->stop), "cuEventElapsedTime", err, len);
}

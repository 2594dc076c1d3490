/* What this device is, as the agent tells kilnd at hello (kiln.v1.Device): the target kilnd
   compiles for, the CPU, cores, memory and GPUs. */
#ifndef KILN_AGENT_DEVICE_H
#define KILN_AGENT_DEVICE_H

#include <stddef.h>
#include <stdint.h>

enum { DEVICE_TEXT = 256, DEVICE_FEATURES = 2048, DEVICE_MAX_GPUS = 16 };

typedef struct {
  char name[DEVICE_TEXT];
  int ordinal; /* the driver's number for it; jobs name GPUs by their place in the list */
  int compute_major, compute_minor;
  uint64_t memory_bytes;
} device_gpu;

typedef struct {
  char triple[DEVICE_TEXT];
  char cpu[DEVICE_TEXT];          /* LLVM's CPU name; "" the triple's generic CPU */
  char features[DEVICE_FEATURES]; /* LLVM's feature string; "" the CPU's own */
  char cpu_model[DEVICE_TEXT];    /* as /proc/cpuinfo names it */
  char os[DEVICE_TEXT];           /* "Linux 6.1.0" */
  int cores;                      /* physical cores this process may use */
  int threads;                    /* the runtime pool's default thread count */
  uint64_t memory_bytes;
  uint64_t l1d_bytes, l2_bytes, l3_bytes; /* a core's caches, 0 when Linux does not say */
  int gpu_count;
  device_gpu gpus[DEVICE_MAX_GPUS];
  char gpu_note[DEVICE_TEXT]; /* why there are none: "no libcuda.so.1" */
} device_info;

/* Detects this machine. The CPU name is LLVM's generic level for what the CPU offers
   (x86-64-v2/v3/v4 on x86-64; "generic" on aarch64) and the features those of what
   /proc/cpuinfo lists that the level does not imply, so code compiled for them runs here; --cpu and
   --features on the command line replace them. GPUs are found through libcuda, opened with dlopen:
   none when it is missing. */
void device_detect(device_info* d);

/* Keeps only the GPUs whose driver ordinals `list` names ("1" or "0,2", in that order), for an
   agent that serves some of a machine's GPUs. 0, or -1 with why in `err`. */
int device_select_gpus(device_info* d, const char* list, char* err, size_t len);

#endif

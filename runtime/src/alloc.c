/* Aligned buffers for kernel arguments and temporaries. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>

#include "kiln/runtime.h"

/* A cache line: two buffers never share one, and vector loads never split one at the start. */
enum { KILN_MIN_ALIGN = 64 };

void* kiln_alloc(size_t bytes, size_t align) {
  if (align == 0 || align < KILN_MIN_ALIGN) {
    align = KILN_MIN_ALIGN;
  }
  if ((align & (align - 1)) != 0) {
    return NULL;
  }
  /* A zero-byte request still gets a distinct pointer, so NULL always means failure. */
  void* p = NULL;
  if (posix_memalign(&p, align, bytes == 0 ? 1 : bytes) != 0) {
    return NULL;
  }
  return p;
}

void kiln_free(void* p) { free(p); }

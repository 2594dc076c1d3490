/* The monotonic clock kernels are timed with. */
#define _POSIX_C_SOURCE 200809L

#include <time.h>

#include "kiln/runtime.h"

uint64_t kiln_now_ns(void) {
  struct timespec now;
  if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) {
    return 0;
  }
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

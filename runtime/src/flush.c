/* Cache flush before a timed run, so each measurement starts from memory, not from cache. */
#include <stdatomic.h>
#include <stdint.h>

#include "kiln/runtime.h"

#if defined(__x86_64__)
#include <cpuid.h>

/* CPUID.1:EBX[15:8] is the clflush line size in 8-byte units; CPUID.7.0:EBX[23] is
   clflushopt, which flushes lines in parallel where clflush serializes them. */
static size_t flush_line_bytes(int* has_clflushopt) {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  size_t line = 64;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) && ((ebx >> 8) & 0xff) != 0) {
    line = ((ebx >> 8) & 0xff) * 8;
  }
  *has_clflushopt = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (ebx & (1u << 23)) != 0;
  return line;
}

/* first and last are line-aligned, first <= last; both lines are flushed. */
static void flush_lines(uintptr_t first, uintptr_t last, size_t line, int has_clflushopt) {
  for (uintptr_t a = first;; a += line) {
    if (has_clflushopt) {
      __asm__ __volatile__("clflushopt %0" : "+m"(*(volatile char*)a));
    } else {
      __asm__ __volatile__("clflush %0" : "+m"(*(volatile char*)a));
    }
    if (a == last) {
      break;
    }
  }
  /* clflushopt is ordered only by a fence; mfence orders it against later loads too. */
  __asm__ __volatile__("mfence" ::: "memory");
}

#elif defined(__aarch64__)

/* CTR_EL0.DminLine (bits 19:16) is log2 of the smallest data cache line, in 4-byte words.
   Linux lets user space read it (or emulates the read). */
static size_t flush_line_bytes(int* unused) {
  (void)unused;
  uint64_t ctr = 0;
  __asm__ __volatile__("mrs %0, ctr_el0" : "=r"(ctr));
  return (size_t)4 << ((ctr >> 16) & 0xf);
}

static void flush_lines(uintptr_t first, uintptr_t last, size_t line, int unused) {
  (void)unused;
  for (uintptr_t a = first;; a += line) {
    __asm__ __volatile__("dc civac, %0" ::"r"(a) : "memory");
    if (a == last) {
      break;
    }
  }
  __asm__ __volatile__("dsb ish" ::: "memory");
}

#else

/* No user-space cache maintenance instruction kiln knows of: the flush is only a fence. */
static size_t flush_line_bytes(int* unused) {
  (void)unused;
  return 64;
}

static void flush_lines(uintptr_t first, uintptr_t last, size_t line, int unused) {
  (void)first;
  (void)last;
  (void)line;
  (void)unused;
}

#endif

/* Read once: 0 until the first flush, then the line size (a power of two). */
static _Atomic size_t g_line_bytes;
static atomic_int g_has_clflushopt;

void kiln_cache_flush(const void* p, size_t bytes) {
  if (p == NULL || bytes == 0) {
    atomic_thread_fence(memory_order_seq_cst);
    return;
  }
  size_t line = atomic_load_explicit(&g_line_bytes, memory_order_acquire);
  if (line == 0) {
    int has_clflushopt = 0;
    line = flush_line_bytes(&has_clflushopt);
    if (line == 0 || (line & (line - 1)) != 0) {
      line = 64;
    }
    atomic_store_explicit(&g_has_clflushopt, has_clflushopt, memory_order_relaxed);
    atomic_store_explicit(&g_line_bytes, line, memory_order_release);
  }
  uintptr_t begin = (uintptr_t)p;
  /* The last byte, clamped so a range running past the end of the address space cannot wrap. */
  uintptr_t last = bytes - 1 > UINTPTR_MAX - begin ? UINTPTR_MAX : begin + (bytes - 1);
  uintptr_t mask = ~(uintptr_t)(line - 1);
  flush_lines(begin & mask, last & mask, line,
              atomic_load_explicit(&g_has_clflushopt, memory_order_relaxed));
}

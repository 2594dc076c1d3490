/* Kernels that misbehave, for the agent's fault tests (fleet_faults_test.cpp): each entry has
   kiln's kernel signature and is shipped to a real kiln-agent as an artifact would be. Built
   freestanding, without a C library, so they import only what a kernel may (kiln_alloc):

     cc -std=c11 -O1 -fPIC -shared -nostdlib -Wl,-z,now -o fault_kernels.so fault_kernels.c */
#include <stddef.h>
#include <stdint.h>

#include "kiln/runtime.h"

/* The first argument, an f32 buffer of at least one element, set to 42: a kernel that works. */
int32_t fault_ok(const kiln_value* args, int32_t nargs) {
  if (nargs != 1) return KILN_ERR_ARGS;
  *(float*)args[0].ptr = 42.0f;
  return KILN_OK;
}

/* A store through a null pointer: SIGSEGV. */
int32_t fault_segv(const kiln_value* args, int32_t nargs) {
  (void)args;
  volatile int* volatile nowhere = NULL;
  *nowhere = nargs;
  return KILN_OK;
}

/* What abort() does, without a C library: SIGABRT sent to itself. */
static long raw_syscall2(long number, long a, long b) {
  long ret;
#if defined(__x86_64__)
  __asm__ volatile("syscall" : "=a"(ret) : "a"(number), "D"(a), "S"(b) : "rcx", "r11", "memory");
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = number;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1) : "memory");
  ret = x0;
#else
#error "fault_kernels.c: no system call sequence for this architecture"
#endif
  return ret;
}

int32_t fault_abort(const kiln_value* args, int32_t nargs) {
  (void)args;
  (void)nargs;
#if defined(__x86_64__)
  enum { SYS_GETPID = 39, SYS_KILL = 62 };
#else
  enum { SYS_GETPID = 172, SYS_KILL = 129 };
#endif
  enum { SIGNAL_ABRT = 6 };
  raw_syscall2(SYS_KILL, raw_syscall2(SYS_GETPID, 0, 0), SIGNAL_ABRT);
  return KILN_OK;
}

/* Never returns. */
int32_t fault_spin(const kiln_value* args, int32_t nargs) {
  (void)args;
  (void)nargs;
  for (;;) __asm__ volatile("" ::: "memory");
}

/* Allocates 64 MiB at a time, touching every page, and never frees: runs until an allocation
   fails (KILN_ERR_ALLOC, as a kernel's temporary would) or the process is killed. */
int32_t fault_hog(const kiln_value* args, int32_t nargs) {
  (void)args;
  (void)nargs;
  for (;;) {
    volatile char* block = kiln_alloc((size_t)64 << 20, 64);
    if (!block) return KILN_ERR_ALLOC;
    for (size_t i = 0; i < ((size_t)64 << 20); i += 4096) block[i] = 1;
  }
}

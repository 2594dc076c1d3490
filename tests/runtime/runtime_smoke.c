/* A C program that exercises the whole runtime once: launches, a nested launch, the cache flush,
   the timer and aligned buffers. Built for the host and cross-built for aarch64 (run under
   qemu-aarch64). Prints one line per failed check and a summary; exits nonzero on failure. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime.h"

static int g_checks;
static int g_failures;

static void check(int ok, const char* what) {
  g_checks++;
  if (!ok) {
    g_failures++;
    printf("FAIL  %s\n", what);
  }
}

/* Counts how many times each index ran. */
typedef struct coverage {
  atomic_uchar* hits;
  int64_t n;
} coverage;

static void count_hits(int64_t begin, int64_t end, void* closure) {
  coverage* c = closure;
  for (int64_t i = begin; i < end; i++) {
    atomic_fetch_add_explicit(&c->hits[i], 1, memory_order_relaxed);
  }
}

static int covers_once(const coverage* c) {
  for (int64_t i = 0; i < c->n; i++) {
    if (atomic_load_explicit(&c->hits[i], memory_order_relaxed) != 1) {
      return 0;
    }
  }
  return 1;
}

static int launch_covers(int64_t n) {
  coverage c = {calloc(n > 0 ? (size_t)n : 1, sizeof(atomic_uchar)), n};
  if (c.hits == NULL) {
    return 0;
  }
  int ok = kiln_parallel_launch(count_hits, &c, n) == KILN_OK && covers_once(&c);
  free(c.hits);
  return ok;
}

/* Each outer index launches an inner loop over its own row of a rows x cols grid. */
typedef struct grid {
  coverage cells;
  int64_t cols;
  atomic_int inner_failures;
} grid;

typedef struct row {
  grid* g;
  int64_t r;
} row;

static void count_cell(int64_t begin, int64_t end, void* closure) {
  row* rw = closure;
  for (int64_t j = begin; j < end; j++) {
    atomic_fetch_add_explicit(&rw->g->cells.hits[rw->r * rw->g->cols + j], 1, memory_order_relaxed);
  }
}

static void launch_rows(int64_t begin, int64_t end, void* closure) {
  grid* g = closure;
  for (int64_t r = begin; r < end; r++) {
    row rw = {g, r};
    if (kiln_parallel_launch(count_cell, &rw, g->cols) != KILN_OK) {
      atomic_fetch_add(&g->inner_failures, 1);
    }
  }
}

static int nested_launch_covers(int64_t rows, int64_t cols) {
  grid g = {{calloc((size_t)(rows * cols), sizeof(atomic_uchar)), rows * cols}, cols, 0};
  if (g.cells.hits == NULL) {
    return 0;
  }
  int ok = kiln_parallel_launch(launch_rows, &g, rows) == KILN_OK &&
           atomic_load(&g.inner_failures) == 0 && covers_once(&g.cells);
  free(g.cells.hits);
  return ok;
}

int main(void) {
  int threads = kiln_runtime_threads();
  check(threads >= 1, "kiln_runtime_threads() >= 1");

  const int64_t sizes[] = {0, 1, 2, threads - 1, threads, threads + 1, 1000, 100003};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char what[64];
    snprintf(what, sizeof what, "launch covers [0, %lld) once", (long long)sizes[i]);
    check(launch_covers(sizes[i]), what);
  }
  int repeated_ok = 1;
  for (int i = 0; i < 1000 && repeated_ok; i++) {
    repeated_ok = launch_covers(37);
  }
  check(repeated_ok, "1000 repeated launches cover every index once");
  check(nested_launch_covers(16, 33), "nested launches cover every index once");
  check(kiln_parallel_launch(NULL, NULL, 4) == KILN_ERR_ARGS, "a NULL task is KILN_ERR_ARGS");
  check(kiln_parallel_launch(count_hits, NULL, -1) == KILN_ERR_ARGS, "n < 0 is KILN_ERR_ARGS");

  check(kiln_runtime_set_threads(2) == 2, "set_threads(2)");
  check(launch_covers(100003), "two threads cover every index once");
  check(kiln_runtime_set_threads(1) == 1, "set_threads(1)");
  check(launch_covers(100003), "one thread covers every index once");
  check(kiln_runtime_set_threads(0) == threads, "set_threads(0) restores the default");

  uint64_t t0 = kiln_now_ns();
  uint64_t t1 = kiln_now_ns();
  check(t0 > 0 && t1 >= t0, "the timer is monotonic");

  const size_t aligns[] = {0, 64, 128, 4096};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    size_t align = aligns[i] == 0 ? 64 : aligns[i];
    unsigned char* p = kiln_alloc(1000, aligns[i]);
    char what[64];
    snprintf(what, sizeof what, "kiln_alloc(1000, %zu) is %zu-aligned", aligns[i], align);
    check(p != NULL && (uintptr_t)p % align == 0, what);
    if (p != NULL) {
      memset(p, 0x5a, 1000);
      kiln_cache_flush(p, 1000);
      kiln_cache_flush(p + 3, 61);
      kiln_cache_flush(p + 1, 0);
      check(p[0] == 0x5a && p[999] == 0x5a, "a flushed buffer keeps its contents");
    }
    kiln_free(p);
  }
  check(kiln_alloc(64, 96) == NULL, "a non-power-of-two alignment is refused");

  printf("runtime_smoke: %d checks, %d failed (%d threads, %s)\n", g_checks, g_failures, threads,
         kiln_runtime_pinned() ? "pinned" : "unpinned");
  return g_failures == 0 ? 0 : 1;
}

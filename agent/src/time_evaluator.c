/* TVM's time evaluator (time_evaluator.h). */
#define _GNU_SOURCE
#include "time_evaluator.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

static void sleep_ms(int ms) {
  if (ms <= 0) return;
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

int measure_rounds(const measure_settings* m, int max_number, measure_round_fn round, void* ctx,
                   measure_result* r) {
  for (int i = 1; i < (m->warmup > 0 ? m->warmup : 1); ++i)
    if (round(ctx, 1) < 0) return -1;
  /* `number` runs a round; grown until a round lasts min_repeat_ms when not given. */
  int number = m->number > 0 ? m->number : 1;
  double min_ms = m->min_repeat_ms > 0 ? m->min_repeat_ms : 0;
  if (m->number <= 0 && min_ms > 0) {
    int confirmed = 0;
    for (;;) {
      double per_run = round(ctx, number);
      if (per_run < 0) return -1;
      if (number >= max_number) break;
      if (per_run * number >= min_ms) {
        /* One run that lasts min_repeat_ms may have been a cold one (its pages faulted in, the
           pool's threads woken, the allocator growing): it is timed once more before one run a
           round is settled on. */
        if (number > 1 || confirmed) break;
        confirmed = 1;
        continue;
      }
      /* Aim past min_repeat_ms at once, growing at least 1.6 times. */
      double want = per_run > 0 ? min_ms / per_run * 1.1 : number * 10.0;
      double grown = fmax(want, number * 1.6);
      number = grown > max_number ? max_number : (int)ceil(grown);
    }
  }
  int repeat = m->repeat > 0 ? m->repeat : 3;
  r->number = number;
  r->round_ms = calloc((size_t)repeat, sizeof(double));
  if (!r->round_ms) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for %d rounds",
                 repeat);
    return -2;
  }
  for (int k = 0; k < repeat; ++k) {
    if (k > 0) sleep_ms(m->cooldown_ms);
    double per_run = round(ctx, number);
    if (per_run < 0) return -1;
    r->round_ms[r->n_round_ms++] = per_run;
    if (k == 0 && m->stop_above_ms > 0 && per_run > m->stop_above_ms) {
      r->stopped_early = 1; /* far slower than what the tuner has: one round tells it so */
      break;
    }
  }
  return 0;
}

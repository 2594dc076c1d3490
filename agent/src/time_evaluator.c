/* TVM's time evaluator (time_evaluator.h). */
#define _GNU_SOURCE
#include "time_evaluator.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

/* At most this many times `repeat` rounds when min_total_ms asks for more. */
enum { kMaxRoundsPerRepeat = 10 };

static void sleep_ms(int ms) {
  if (ms <= 0) return;
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

/* Appends one timed round's time per run to r (its room made by the caller). */
static void keep_round(measure_result* r, double per_run) {
  r->round_ms[r->n_round_ms++] = per_run;
}

int measure_rounds(const measure_settings* m, int max_number, measure_round_fn round, void* ctx,
                   measure_result* r) {
  for (int i = 1; i < (m->warmup > 0 ? m->warmup : 1); ++i)
    if (round(ctx, 1) < 0) return -1;
  int repeat = m->repeat > 0 ? m->repeat : 3;
  /* Rounds past `repeat` while the timed rounds last less than min_total_ms in all: a short
     kernel gets more rounds for the same time, a long one no more than it asked for. */
  size_t most = (size_t)(m->min_total_ms > 0 ? repeat * kMaxRoundsPerRepeat : repeat);
  r->round_ms = calloc((size_t)most, sizeof(double));
  if (!r->round_ms) {
    result_error(r, KILN__V1__MEASURE_RESULT__ERROR__OUT_OF_MEMORY, "no memory for %zu rounds",
                 most);
    return -2;
  }
  /* `number` runs a round; grown until a round lasts min_repeat_ms when not given. The round
     that settles it ran warm at that number (a run came before it): it is the first timed round,
     not thrown away. */
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
        if (number > 1 || confirmed) {
          keep_round(r, per_run);
          break;
        }
        confirmed = 1;
        continue;
      }
      /* Aim past min_repeat_ms at once, growing at least 1.6 times. */
      double want = per_run > 0 ? min_ms / per_run * 1.1 : number * 10.0;
      double grown = fmax(want, number * 1.6);
      number = grown > max_number ? max_number : (int)ceil(grown);
    }
  }
  r->number = number;
  double total_ms = 0;
  for (size_t k = 0; k < r->n_round_ms; ++k) total_ms += r->round_ms[k] * number;
  for (;;) {
    if (r->n_round_ms >= (size_t)repeat && (r->n_round_ms >= most || total_ms >= m->min_total_ms))
      break;
    if (r->n_round_ms == 1 && m->stop_above_ms > 0 && r->round_ms[0] > m->stop_above_ms) {
      r->stopped_early = 1; /* far slower than what the tuner has: one round tells it so */
      break;
    }
    if (r->n_round_ms > 0) sleep_ms(m->cooldown_ms);
    double per_run = round(ctx, number);
    if (per_run < 0) return -1;
    keep_round(r, per_run);
    total_ms += per_run * number;
  }
  return 0;
}

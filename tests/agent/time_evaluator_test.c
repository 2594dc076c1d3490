/* The agent's time evaluator (agent/src/time_evaluator.h) on a simulated kernel: how `number`
   grows, which rounds are timed, how many rounds min_total_ms adds for a short kernel and a long
   one, where stop_above_ms ends the rounds, and a failing round.

   usage: time_evaluator_test      exit 0 when every case passes; else prints each failing case */
#include "time_evaluator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define EXPECT_EQ(what, got, want)                                           \
  do {                                                                       \
    long long g_ = (long long)(got), w_ = (long long)(want);                 \
    if (g_ != w_) {                                                          \
      ++failures;                                                            \
      printf("FAIL %s: %s\n  got  %lld\n  want %lld\n", name, what, g_, w_); \
    }                                                                        \
  } while (0)

/* A kernel whose every run takes `run_ms`, the first `cold` runs `cold_ms` instead; `fail_at`
   (> 0): the call of that number fails. Counts runs and calls. */
typedef struct {
  double run_ms, cold_ms;
  int cold, fail_at;
  int runs, calls;
} kernel;

static double round_of(void* ctx, int number) {
  kernel* k = ctx;
  if (++k->calls == k->fail_at) return -1;
  double total = 0;
  for (int i = 0; i < number; ++i, ++k->runs) total += k->runs < k->cold ? k->cold_ms : k->run_ms;
  return total / number;
}

static measure_settings settings(int repeat, int min_repeat_ms, int min_total_ms) {
  measure_settings m;
  kiln__v1__measure_settings__init(&m);
  m.repeat = repeat;
  m.min_repeat_ms = min_repeat_ms;
  m.min_total_ms = min_total_ms;
  return m;
}

static measure_result run(const measure_settings* m, kernel* k, int* rc) {
  measure_result r;
  kiln__v1__measure_result__init(&r);
  *rc = measure_rounds(m, 1 << 30, round_of, k, &r);
  return r;
}

static void done(measure_result* r) { free(r->round_ms); }

/* A 4 ms kernel with 5 ms rounds: one probe run, then two runs a round; the round that settled
   the number is the first of the three timed. */
static void settled_round_is_timed(void) {
  const char* name = "settled_round_is_timed";
  kernel k = {4, 4, 0, 0, 0, 0};
  measure_settings m = settings(3, 5, 0);
  int rc;
  measure_result r = run(&m, &k, &rc);
  EXPECT_EQ("status", rc, 0);
  EXPECT_EQ("number", r.number, 2);
  EXPECT_EQ("timed rounds", r.n_round_ms, 3);
  EXPECT_EQ("runs", k.runs, 1 + 3 * 2);
  done(&r);
}

/* A run longer than a round: one run a round, settled only by a second run (the first may be
   cold), which is then the first timed round. */
static void long_run_is_confirmed(void) {
  const char* name = "long_run_is_confirmed";
  kernel k = {30, 90, 1, 0, 0, 0};
  measure_settings m = settings(3, 5, 0);
  int rc;
  measure_result r = run(&m, &k, &rc);
  EXPECT_EQ("status", rc, 0);
  EXPECT_EQ("number", r.number, 1);
  EXPECT_EQ("timed rounds", r.n_round_ms, 3);
  EXPECT_EQ("runs", k.runs, 1 + 3);
  for (size_t i = 0; i < r.n_round_ms; ++i) EXPECT_EQ("a timed round is warm", r.round_ms[i], 30);
  done(&r);
}

/* min_total_ms: a short kernel gets rounds past `repeat` until they last that long in all, a
   long one only `repeat`; both at most 10 x repeat. */
static void min_total_adapts_to_length(void) {
  const char* name = "min_total_adapts_to_length";
  int rc;
  kernel shorter = {1, 1, 0, 0, 0, 0};
  measure_settings m = settings(3, 5, 40);
  measure_result r = run(&m, &shorter, &rc);
  EXPECT_EQ("status", rc, 0);
  EXPECT_EQ("short kernel: number", r.number, 6);
  EXPECT_EQ("short kernel: rounds of 6 ms until 40 ms", r.n_round_ms, 7);
  done(&r);

  kernel longer = {25, 25, 0, 0, 0, 0};
  r = run(&m, &longer, &rc);
  EXPECT_EQ("long kernel: rounds", r.n_round_ms, 3);
  done(&r);

  kernel tiny = {1, 1, 0, 0, 0, 0};
  measure_settings fixed = settings(2, 0, 1000);
  fixed.number = 1;
  r = run(&fixed, &tiny, &rc);
  EXPECT_EQ("at most 10 x repeat rounds", r.n_round_ms, 20);
  done(&r);

  kernel plain = {1, 1, 0, 0, 0, 0};
  measure_settings none = settings(4, 0, 0);
  r = run(&none, &plain, &rc);
  EXPECT_EQ("no min_total_ms: repeat rounds", r.n_round_ms, 4);
  EXPECT_EQ("no min_repeat_ms: one run a round", r.number, 1);
  done(&r);
}

/* stop_above_ms: a kernel slower than that per run is timed for one round. */
static void stop_above_ends_after_one_round(void) {
  const char* name = "stop_above_ends_after_one_round";
  int rc;
  kernel slow = {8, 8, 0, 0, 0, 0};
  measure_settings m = settings(3, 5, 40);
  m.stop_above_ms = 6;
  measure_result r = run(&m, &slow, &rc);
  EXPECT_EQ("rounds", r.n_round_ms, 1);
  EXPECT_EQ("stopped early", r.stopped_early, 1);
  done(&r);

  kernel fast = {4, 4, 0, 0, 0, 0};
  r = run(&m, &fast, &rc);
  EXPECT_EQ("a faster one is not stopped", r.stopped_early, 0);
  done(&r);

  kernel once = {8, 8, 0, 0, 0, 0};
  measure_settings single = settings(1, 5, 0);
  single.stop_above_ms = 6;
  r = run(&single, &once, &rc);
  EXPECT_EQ("one round asked for: not stopped early", r.stopped_early, 0);
  EXPECT_EQ("one round asked for: one round", r.n_round_ms, 1);
  done(&r);
}

/* A round that fails ends the measurement with -1. */
static void failing_round(void) {
  const char* name = "failing_round";
  int rc;
  kernel k = {4, 4, 0, 3, 0, 0};
  measure_settings m = settings(3, 5, 0);
  measure_result r = run(&m, &k, &rc);
  EXPECT_EQ("status", rc, -1);
  done(&r);
}

int main(void) {
  settled_round_is_timed();
  long_run_is_confirmed();
  min_total_adapts_to_length();
  stop_above_ends_after_one_round();
  failing_round();
  if (failures) printf("%d failure(s)\n", failures);
  return failures ? 1 : 0;
}

/* How a job's kernels are timed, for CPU and GPU jobs alike: TVM's time evaluator. */
#ifndef KILN_AGENT_TIME_EVALUATOR_H
#define KILN_AGENT_TIME_EVALUATOR_H

#include "job_args.h"

/* One round of `number` runs of a job's kernels: the milliseconds one run took on average, or
   a negative number when a run failed (ctx keeps why). */
typedef double (*measure_round_fn)(void* ctx, int number);
/* After the job's first run: the rest of the warm-up runs, then `number` runs a round (grown,
   up to max_number, until a round lasts min_repeat_ms when the job gives no number: the round
   that settles it is the first timed one), then `repeat` rounds in all with cooldown_ms between
   them, and more while they last less than min_total_ms in all (at most 10 x repeat), into
   r->number and r->round_ms (only the first when it passes stop_above_ms per run and more would
   follow: r->stopped_early). 0; -1 when a round failed; -2 with r's error set. */
int measure_rounds(const measure_settings* m, int max_number, measure_round_fn round, void* ctx,
                   measure_result* r);

#endif

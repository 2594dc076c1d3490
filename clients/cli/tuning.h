// `kiln tune` and `kiln records` (docs/tuning.md, docs/records.md): kilnd's
// tuning jobs and its tuning-record database.
#pragma once

#include "kiln/compile.h"
#include "kiln/ir.h"
#include "options.h"
#include "remote.h"

namespace kiln::cli {

// The knobs of a graph's tasks (`kiln tasks`: its operators after the graph passes with `c`)
// from their best records on o.key in kilnd's database, a line printed for each task: its best,
// or that it has none and keeps its knobs' defaults.
WorkloadKnobs best_knobs(Remote& remote, const Options& o, const ir::Graph& g,
                         const CompileOptions& c);

int run_tune(const Options& o);     // kiln tune FILE --key KEY | --resume JOB | --cancel JOB
int run_records(const Options& o);  // kiln records jobs|query|best|export|plot

}  // namespace kiln::cli

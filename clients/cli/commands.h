// The commands of the kiln command line. Each takes parsed options,
// calls the compiler library, prints its results and returns the exit status
// (0 ok, 1 a compile error or a failed check).
#pragma once

#include "kiln/compile.h"
#include "options.h"

namespace kiln::cli {

int run_check(const Options& o);    // kiln check
int run_emit(const Options& o);     // kiln emit --stage ...
int run_interp(const Options& o);   // kiln interp [--check] [--json]
int run_run(const Options& o);      // kiln run [--check] [--bench] [--json]
int run_compile(const Options& o);  // kiln compile [--target TRIPLE] [-o FILE]
int run_agents(const Options& o);   // kiln agents [--json]: kilnd's agents
int run_measure(const Options& o);  // kiln measure --key KEY: timed on an agent
int run_tasks(const Options& o);    // kiln tasks MODEL [--bench] [--json]: a model's tasks

// The compile options the command line gives: the target (target_of), the opt level, the
// pass options and their printing.
CompileOptions compile_options(const Options& o);

}  // namespace kiln::cli

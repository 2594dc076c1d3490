// The commands of the kiln command line. Each takes parsed options,
// calls the compiler library, prints its results and returns the exit status
// (0 ok, 1 a compile error or a failed check).
#pragma once

#include "options.h"

namespace kiln::cli {

int run_check(const Options& o);    // kiln check
int run_emit(const Options& o);     // kiln emit --stage ...
int run_interp(const Options& o);   // kiln interp [--check] [--json]
int run_run(const Options& o);      // kiln run [--check] [--bench] [--json]
int run_compile(const Options& o);  // kiln compile [--target TRIPLE] [-o FILE]
int run_agents(const Options& o);   // kiln agents [--json]: kilnd's agents
int run_measure(const Options& o);  // kiln measure --key KEY: timed on an agent

}  // namespace kiln::cli

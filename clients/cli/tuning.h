// `kiln tune` and `kiln records` (docs/tuning.md, docs/records.md): kilnd's
// tuning jobs and its tuning-record database.
#pragma once

#include "options.h"

namespace kiln::cli {

int run_tune(const Options& o);     // kiln tune FILE --key KEY | --resume JOB | --cancel JOB
int run_records(const Options& o);  // kiln records jobs|query|best|export|plot

}  // namespace kiln::cli

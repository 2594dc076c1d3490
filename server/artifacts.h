// kilnd's compiled artifacts: a request compiled through the compile cache
// (compile_cache.h) under the admission of workers (admission.h). What
// Compile and Measure answer with, and the Builder (kiln/measure.h) every
// tuning job builds its points with.
#pragma once

#include "admission.h"
#include "compile_cache.h"
#include "kiln/compile.h"
#include "kiln/measure.h"
#include "status.h"

namespace kiln::server {

class Artifacts final : public tuner::Builder {
 public:
  Artifacts(CompileCache& cache, Admission& admission);

  // The Compile response of `r` (output Artifact), from the cache or
  // compiled holding a worker; throws what the pipeline and the admission
  // throw (request.h's status_of says what each means).
  v1::CompileResponse compile(const CompileRequest& r, const CallOptions& call);

  // A point, through compile(): its failures as values. Stops between stages
  // once input.options.limits says it is cancelled.
  tuner::Outcome<tuner::Build> build(const tuner::BuildInput& input) override;
  int parallelism() const override;

 private:
  CompileCache& cache_;
  Admission& admission_;
};

}  // namespace kiln::server

// kilnd's compiled artifacts (artifacts.h).
#include "artifacts.h"

#include <memory>
#include <new>
#include <optional>

#include "kiln/limits.h"
#include "kiln/v1/service.pb.h"
#include "request.h"
#include "wire.h"

namespace kiln::server {

Artifacts::Artifacts(CompileCache& cache, Admission& admission)
    : cache_(cache), admission_(admission) {}

int Artifacts::parallelism() const { return admission_.workers(); }

v1::CompileResponse Artifacts::compile(const CompileRequest& r, const CallOptions& call) {
  std::string key = cache_key(r);
  // A hit needs no worker: it never waits behind compilations.
  if (std::optional<v1::CompileResponse> cached = cache_.find(key)) {
    cached->set_cache_hit(true);
    return std::move(*cached);
  }
  auto ticket = admission_.enter(call);
  CompileResult result = kiln::compile(r);
  v1::CompileResponse response;
  to_wire(*result.artifact, response.mutable_artifact());
  add_times(result.times, response.mutable_times());
  add_notes(result.notes, response.mutable_notes());
  response.set_compiler_version(compiler_version());
  v1::CompileResponse cached = response;
  cached.clear_times();
  cache_.add(key, cached);
  return response;
}

tuner::Outcome<tuner::Build> Artifacts::build(const tuner::BuildInput& input) {
  using Kind = tuner::Failure::Kind;
  auto failure = [](Kind kind, std::string message, std::optional<ErrorStage> stage = {}) {
    return tuner::Failure{kind, stage, std::move(message)};
  };
  // Errors without a position of their own are about the func's file.
  if (!input.func)
    return failure(Kind::Internal, "a point was built without its func (a bug in kiln)");
  std::string file = input.func->where.file.empty() ? "<request>" : input.func->where.file;
  try {
    CompileRequest r{.func = *input.func,
                     .overrides = ir::Overrides(input.point.begin(), input.point.end()),
                     .options = input.options,
                     .output = CompileOutput::Artifact};
    CallOptions call{input.options.limits.deadline, input.options.limits.cancelled};
    v1::CompileResponse response = compile(r, call);
    tuner::Build b;
    b.artifact = std::make_shared<const codegen::Artifact>(artifact_of(response.artifact()));
    for (const v1::StageTime& t : response.times()) b.compile_ms += t.ms();
    b.cache_hit = response.cache_hit();
    b.compiler_version = response.compiler_version();
    for (const v1::Diagnostic& d : response.notes()) b.notes.push_back(d.message());
    return b;
  } catch (const Busy& b) {
    return failure(Kind::Busy, b.status.message);
  } catch (const Refusal& r) {  // the admission's deadline or cancel
    return failure(Kind::Stopped, r.status.message);
  } catch (const Cancelled& c) {
    return failure(Kind::Stopped, c.located(file));
  } catch (const DeadlineExceeded& d) {
    return failure(Kind::Stopped, d.located(file));
  } catch (const CompileError& e) {
    return failure(Kind::Compile, e.located(file), e.stage());
  } catch (const std::bad_alloc&) {
    return failure(Kind::Compile, "kilnd ran out of memory for this request");
  } catch (const std::exception& e) {
    return failure(Kind::Internal,
                   std::string("internal error: ") + e.what() + " (this is a bug in kiln)");
  }
}

}  // namespace kiln::server

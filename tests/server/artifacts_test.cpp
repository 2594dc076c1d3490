// kilnd's side of the tuning seam: the Builder over the compile cache
// (server/artifacts.h) answers every point with an artifact or a Failure
// whose kind and stage say what went wrong (an illegal schedule, a refused
// compile, a full queue), an artifact read back from its wire form launches
// exactly as the one compiled (server/wire.h), and kilnd's statuses and the
// tuner's failures map onto each other (server/outcome.h).
#include "artifacts.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "admission.h"
#include "compile_cache.h"
#include "fleet_runner.h"
#include "kiln/compile.h"
#include "kiln/cuda.h"
#include "kiln/library.h"
#include "kiln/v1/service.pb.h"
#include "outcome.h"
#include "programs.h"
#include "wire.h"

namespace kiln::testing {
namespace {

using tuner::Failure;

std::shared_ptr<const ir::Func> func_of(const std::string& example) {
  return std::make_shared<const ir::Func>(parse_one(read_example(example)));
}

TEST(ArtifactsBuilder, APointIsBuiltOnceAndThenServedFromTheCache) {
  server::CompileCache cache(size_t{64} << 20, "");
  server::Admission admission(1, 4);
  server::Artifacts artifacts(cache, admission);
  tuner::BuildInput in{func_of("matmul"), {{"TI", 16}, {"TJ", 32}}, CompileOptions{}};
  tuner::Outcome<tuner::Build> first = artifacts.build(in);
  ASSERT_TRUE(first.ok()) << first.failure().message;
  EXPECT_FALSE(first.value().cache_hit);
  EXPECT_GT(first.value().compile_ms, 0);
  EXPECT_EQ(first.value().compiler_version, compiler_version());
  // The artifact is the pipeline's, under the key the pipeline gives the point.
  CompileRequest r{.func = *in.func,
                   .overrides = ir::Overrides(in.point.begin(), in.point.end()),
                   .output = CompileOutput::Artifact};
  CompileResult offline = kiln::compile(r);
  const codegen::Artifact& a = *first.value().artifact;
  EXPECT_EQ(a.key, cache_key(r));
  EXPECT_EQ(a.code, offline.artifact->code);
  EXPECT_EQ(a.entry, offline.artifact->entry);
  EXPECT_EQ(a.args.size(), offline.artifact->args.size());

  tuner::Outcome<tuner::Build> again = artifacts.build(in);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value().cache_hit);
  EXPECT_EQ(again.value().compile_ms, 0);
  EXPECT_EQ(again.value().artifact->code, a.code);
}

TEST(ArtifactsBuilder, AnIllegalScheduleIsALegalityFailureNotAMessageToMatch) {
  server::CompileCache cache(0, "");
  server::Admission admission(1, 4);
  server::Artifacts artifacts(cache, admission);
  auto f = func_of("matmul");
  // The data's matmul with its init after the updates: C_init.after(C, root).
  auto bad = std::make_shared<const ir::Func>(
      parse_one(read_source("tests/data/illegal/init_after_update.kiln")));
  tuner::Outcome<tuner::Build> illegal = artifacts.build({bad, {}, CompileOptions{}});
  ASSERT_FALSE(illegal.ok());
  EXPECT_EQ(illegal.failure().kind, Failure::Kind::Compile);
  ASSERT_TRUE(illegal.failure().stage);
  EXPECT_EQ(*illegal.failure().stage, ErrorStage::Legality);
  EXPECT_TRUE(illegal.failure().illegal());
  EXPECT_TRUE(illegal.failure().points_fault());

  EXPECT_NE(illegal.failure().message.find("breaks the flow"), std::string::npos)
      << illegal.failure().message;

  // A value outside a knob's candidates: refused at validation, the point's fault, not illegal.
  tuner::Outcome<tuner::Build> off = artifacts.build({f, {{"TI", 7}, {"TJ", 8}}, CompileOptions{}});
  ASSERT_FALSE(off.ok());
  EXPECT_EQ(off.failure().kind, Failure::Kind::Compile);
  EXPECT_EQ(off.failure().stage, ErrorStage::Validate);
  EXPECT_FALSE(off.failure().illegal());
  EXPECT_NE(off.failure().message.find("validate error"), std::string::npos)
      << off.failure().message;
}

TEST(ArtifactsBuilder, AFullQueueIsBusyAndACancelledBuildIsStopped) {
  server::CompileCache cache(0, "");
  std::mutex mu;
  std::condition_variable cv;
  bool admitted = false, release = false;
  server::Admission admission(1, 0, [&] {  // one compiling, none waiting
    std::unique_lock<std::mutex> lock(mu);
    if (release) return;
    admitted = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  server::Artifacts artifacts(cache, admission);
  auto f = func_of("matmul");
  std::thread holder([&] { (void)artifacts.build({f, {{"TI", 8}, {"TJ", 8}}, CompileOptions{}}); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return admitted; });
  }
  tuner::Outcome<tuner::Build> busy =
      artifacts.build({f, {{"TI", 16}, {"TJ", 8}}, CompileOptions{}});
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.failure().kind, Failure::Kind::Busy);
  EXPECT_FALSE(busy.failure().points_fault());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
  }
  holder.join();

  CompileOptions cancelled;
  cancelled.limits.cancelled = [] { return true; };
  tuner::Outcome<tuner::Build> stopped = artifacts.build({f, {{"TI", 32}, {"TJ", 8}}, cancelled});
  ASSERT_FALSE(stopped.ok());
  EXPECT_EQ(stopped.failure().kind, Failure::Kind::Stopped);
}

// What a launch needs is what the compiler made: the grid and the
// temporaries' sizes evaluate to the same values, the rest is equal.
// kilnd compiles for an agent's CPU with the caches the agent reported: the knob defaults
// fitted to caches (the library's matmul blocks) follow the agent's machine, not kilnd's.
TEST(FleetTarget, CarriesTheAgentsCaches) {
  v1::Device d;
  d.set_triple("x86_64-linux-gnu");
  d.set_cpu("haswell");
  d.set_l1d_bytes(32 << 10);
  d.set_l2_bytes(256 << 10);
  d.set_l3_bytes(8 << 20);
  Target t = server::FleetRunner::target(d, "hsw", std::nullopt);
  EXPECT_EQ(t.l1d_bytes, 32 << 10);
  EXPECT_EQ(t.l2_bytes, 256 << 10);
  EXPECT_EQ(t.l3_bytes, 8 << 20);
  CompileRequest r{.func = library::func("matmul")};
  r.options.target = t;
  r.output = CompileOutput::Schedule;
  ir::Func f = compile(r).func;
  // AVX2's 6 x 16 tile; KB: 22 x KB floats in 3/4 of 32 KiB; MB: MB x KB in half of 256 KiB,
  // a multiple of 6.
  EXPECT_EQ(f.find_knob("MR")->value, 6);
  EXPECT_EQ(f.find_knob("KB")->value, 256);
  EXPECT_EQ(f.find_knob("MB")->value, 96);
}

TEST(ArtifactWire, AGpuArtifactReadBackLaunchesAsCompiled) {
  std::string why;
  if (!cuda::nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC in this build: " << why;
  CompileOptions options;
  options.target = Target{cuda::kTriple, "sm_90", ""};
  CompileRequest r{.func = parse_one(read_example("gpu/matmul")),
                   .options = options,
                   .output = CompileOutput::Artifact};
  codegen::Artifact a = *kiln::compile(r).artifact;
  ASSERT_EQ(a.kind, "cubin");
  ASSERT_FALSE(a.kernels.empty());
  v1::Artifact w;
  server::to_wire(a, &w);
  codegen::Artifact back = server::artifact_of(w);
  EXPECT_EQ(back.kind, a.kind);
  EXPECT_EQ(back.name, a.name);
  EXPECT_EQ(back.triple, a.triple);
  EXPECT_EQ(back.cpu, a.cpu);
  EXPECT_EQ(back.entry, a.entry);
  EXPECT_EQ(back.code, a.code);
  EXPECT_EQ(back.code_sha256, a.code_sha256);
  EXPECT_EQ(back.key, a.key);
  ASSERT_EQ(back.args.size(), a.args.size());
  for (size_t i = 0; i < a.args.size(); ++i) {
    EXPECT_EQ(back.args[i].name, a.args[i].name);
    EXPECT_EQ(back.args[i].kind, a.args[i].kind);
    EXPECT_EQ(back.args[i].dtype, a.args[i].dtype);
    EXPECT_EQ(back.args[i].role, a.args[i].role);
    EXPECT_EQ(back.args[i].shape, a.args[i].shape);
  }
  std::map<std::string, int64_t> params{{"M", 1000}, {"N", 513}, {"K", 77}};
  ASSERT_EQ(back.kernels.size(), a.kernels.size());
  for (size_t k = 0; k < a.kernels.size(); ++k) {
    EXPECT_EQ(back.kernels[k].name, a.kernels[k].name);
    EXPECT_EQ(back.kernels[k].block, a.kernels[k].block);
    EXPECT_EQ(back.kernels[k].shared_bytes, a.kernels[k].shared_bytes);
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(cuda::postfix(back.kernels[k].grid[d]), cuda::postfix(a.kernels[k].grid[d]));
      EXPECT_EQ(cuda::eval_postfix(cuda::postfix(back.kernels[k].grid[d]), params),
                cuda::eval_postfix(cuda::postfix(a.kernels[k].grid[d]), params));
    }
  }
  ASSERT_EQ(back.temps.size(), a.temps.size());
  for (size_t t = 0; t < a.temps.size(); ++t) {
    EXPECT_EQ(back.temps[t].dtype, a.temps[t].dtype);
    ASSERT_EQ(back.temps[t].shape.size(), a.temps[t].shape.size());
    for (size_t d = 0; d < a.temps[t].shape.size(); ++d)
      EXPECT_EQ(cuda::postfix(back.temps[t].shape[d]), cuda::postfix(a.temps[t].shape[d]));
  }
  // Written again, it is the same message but for the launch expressions' text.
  v1::Artifact again;
  server::to_wire(back, &again);
  for (v1::Artifact* x : {&w, &again})
    for (v1::GpuKernel& k : *x->mutable_kernels())
      for (v1::IntExpression& g : *k.mutable_grid()) g.clear_text();
  for (v1::Artifact* x : {&w, &again})
    for (v1::GpuTemp& t : *x->mutable_temps())
      for (v1::IntExpression& e : *t.mutable_shape()) e.clear_text();
  EXPECT_EQ(again.SerializeAsString(), w.SerializeAsString());
}

TEST(ArtifactWire, ALaunchExpressionThatIsNotPostfixIsRefused) {
  v1::Artifact w;
  w.set_kind("cubin");
  v1::GpuKernel* k = w.add_kernels();
  k->set_name("k0");
  for (int d = 0; d < 3; ++d) {
    k->add_block(1);
    v1::IntExpression* g = k->add_grid();
    g->set_text("M +");
    g->add_postfix("M");
    g->add_postfix("+");
  }
  EXPECT_THROW(server::artifact_of(w), std::invalid_argument);
}

TEST(Outcome, KilndsStatusesAndTheTunersFailuresMapOntoEachOther) {
  using server::Code;
  EXPECT_EQ(server::failure_of({Code::Unavailable, "no agent"}).kind, Failure::Kind::Unavailable);
  EXPECT_EQ(server::failure_of({Code::InvalidArgument, "grid"}).kind, Failure::Kind::Compile);
  EXPECT_EQ(server::failure_of({Code::ResourceExhausted, "memory"}).kind, Failure::Kind::Compile);
  EXPECT_EQ(server::failure_of({Code::Cancelled, "stop"}).kind, Failure::Kind::Stopped);
  EXPECT_EQ(server::failure_of({Code::DeadlineExceeded, "late"}).kind, Failure::Kind::Stopped);
  EXPECT_EQ(server::failure_of({Code::Internal, "bug"}).kind, Failure::Kind::Internal);
  EXPECT_EQ(server::failure_of({Code::Unavailable, "no agent"}).message, "no agent");
  EXPECT_EQ(server::status_of(Failure{Failure::Kind::Unavailable, {}, "lost"}).code,
            Code::Unavailable);
  EXPECT_EQ(server::status_of(Failure{Failure::Kind::Internal, {}, "bug"}).code, Code::Internal);
  EXPECT_EQ(server::status_of(Failure{Failure::Kind::Busy, {}, "busy"}).code,
            Code::ResourceExhausted);
  EXPECT_EQ(server::status_of(Failure{Failure::Kind::Stopped, {}, "stop"}).message, "stop");
}

}  // namespace
}  // namespace kiln::testing

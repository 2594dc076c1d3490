// A tuning job's task (kiln/job.h), prepared once from the parsed func: the
// workload it is recorded under names the params' values and not the knobs',
// the func carries every value the request set, the space holds only the
// knobs left free, the run-time params and flops are those of a measurement,
// and a func that cannot be tuned is refused saying why.
#include "kiln/job.h"

#include <gtest/gtest.h>

#include <set>

#include "kiln/autosched.h"
#include "kiln/cost_model.h"
#include "kiln/records.h"
#include "kiln/tune.h"
#include "programs.h"

namespace kiln::tuner {
namespace {

constexpr const char* kMatmul = R"(
func matmul {
  param M = 64, N = 64, K = 32;
  constraint M > 0, N > 0, K > 0;
  input  A : f32[M, K];
  input  B : f32[K, N];
  output C : f32[M, N];
  compute C(i, j) in 0 <= i < M, 0 <= j < N:
    C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];
  schedule {
    knob TI = 16 in [8, 16, 32];
    knob TJ = 16 in [8, 16, 32];
    C_init.tile(i, j, TI, TJ, io, jo, ii, ji);
    C.tile(i, j, TI, TJ, io, jo, ii, ji);
    C.after(C_init, jo);
  }
}
)";

TEST(TaskTest, TheWorkloadNamesTheParamsValuesAndNotTheKnobs) {
  ir::Func f = testing::parse_one(kMatmul);
  records::Workload plain = workload_of(f, {});
  records::Workload knobbed = workload_of(f, {{"TI", 32}});
  records::Workload bigger = workload_of(f, {{"M", 128}});
  EXPECT_EQ(plain.name, "matmul");
  EXPECT_EQ(plain.hash, knobbed.hash);  // a knob set by hand is the same workload
  EXPECT_NE(plain.hash, bigger.hash);
  EXPECT_NE(bigger.definition.find("128"), std::string::npos);
  Task t = prepare_task(f, {{"M", 128}, {"TI", 32}}, {}, {});
  EXPECT_EQ(t.workload.hash, bigger.hash);
  EXPECT_EQ(t.workload.definition, bigger.definition);
}

TEST(TaskTest, KnobsSetByHandLeaveTheSpaceAndEnterTheFunc) {
  Task t = prepare_task(testing::parse_one(kMatmul), {{"TI", 32}}, {}, {});
  EXPECT_EQ(t.fixed, (Config{{"TI", 32}}));
  ASSERT_TRUE(t.space);
  EXPECT_EQ(t.space->size(), 3u);  // TJ's three values; TI holds its one
  ASSERT_TRUE(t.func);
  EXPECT_EQ(t.func->find_knob("TI")->value, 32);
  // A call's flops: 2 per multiply-add, at the params' values.
  EXPECT_EQ(t.flops, 2 * 64 * 64 * 32);
  EXPECT_EQ(t.params.at("M"), 64);
  EXPECT_EQ(t.params.at("K"), 32);
}

TEST(TaskTest, AFuncWithAScheduleButNoKnobsIsRefusedSayingHowToDeclareThem) {
  ir::Func f = testing::parse_one(R"(
func copy {
  param N = 8;
  input  A : f32[N];
  output B : f32[N];
  compute B(i) in 0 <= i < N: B[i] = A[i];
  schedule { B.tag(i, vectorize); }
}
)");
  try {
    prepare_task(f, {}, {}, {});
    FAIL() << "a func without knobs was prepared";
  } catch (const TaskError& e) {
    EXPECT_NE(std::string(e.what()).find("copy has no knobs to tune"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("docs/language.md"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("leave the schedule out"), std::string::npos);
  }
}

TEST(TaskTest, AFuncWithoutAScheduleIsTunedOverTheSketchKilnDerivesForIt) {
  ir::Func f = testing::parse_one(R"(
func copy {
  param N = 64;
  input  A : f32[N];
  output B : f32[N];
  compute B(i) in 0 <= i < N: B[i] = A[i];
}
)");
  Task t = prepare_task(f, {{"N", 100}}, {}, {});
  EXPECT_NE(t.sketch.find("knob split_B_i = 16 in [4, 8, 16, 32, 64];"), std::string::npos);
  EXPECT_NE(t.func->find_knob("split_B_i"), nullptr);
  EXPECT_NE(t.func->find_knob("par_B"), nullptr);
  EXPECT_EQ(t.space->size(), 5u * 2u);  // split sizes, parallel or not
  EXPECT_NE(t.workload.definition.find("B.split(i, split_B_i, i_o, i_i);"), std::string::npos);
  EXPECT_EQ(t.params.at("N"), 100);
  // A sketch's knob is set like a declared one.
  Task fixed = prepare_task(f, {{"split_B_i", 32}}, {}, {});
  EXPECT_EQ(fixed.fixed.at("split_B_i"), 32);
  EXPECT_EQ(fixed.space->size(), 2u);
}

// A job over kiln's sketches: a task a sketch, in the order autosched gives them, each its own
// workload; BestConfig finds their records under the same workloads, with the same sketches
// (a GPU job's sketches' too).
TEST(TaskTest, AFuncWithoutAScheduleGivesATaskAndAWorkloadASketchInOneOrder) {
  ir::Func f = testing::parse_one(R"(
func mm {
  param M = 32, N = 32, K = 32;
  input  A : f32[M, K];
  input  B : f32[K, N];
  output C : f32[M, N];
  compute C(i, j) in 0 <= i < M, 0 <= j < N:
    C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];
}
)");
  std::vector<Task> tasks = prepare_sketch_tasks(f, {{"M", 64}}, {}, {});
  std::vector<autosched::Sketch> sketches =
      autosched::sketches(ir::apply_overrides(f, {{"M", 64}}));
  ASSERT_GE(tasks.size(), 2u);
  ASSERT_EQ(tasks.size(), sketches.size());
  std::vector<TunedWorkload> workloads = tuned_workloads(f, {{"M", 64}}, {});
  // A job on a GPU: the GPU sketches, and their workloads.
  std::vector<Task> gpu = prepare_sketch_tasks(f, {{"M", 64}}, {}, {}, autosched::Machine::Gpu);
  std::vector<TunedWorkload> gpu_workloads =
      tuned_workloads(f, {{"M", 64}}, {}, autosched::Machine::Gpu);
  ASSERT_EQ(gpu.size(), 2u);
  ASSERT_EQ(gpu_workloads.size(), gpu.size());
  for (size_t i = 0; i < gpu.size(); ++i) {
    SCOPED_TRACE(gpu[i].sketch);
    EXPECT_NE(gpu[i].sketch.find("gpu_thread_x"), std::string::npos);
    EXPECT_EQ(gpu_workloads[i].workload.hash, gpu[i].workload.hash);
    EXPECT_EQ(gpu_workloads[i].sketch, gpu[i].sketch);
  }
  EXPECT_GT(gpu[0].space->size(), 1u);
  // The tiled sketch's knob constraint is the space's: at 1024, a point whose staged slices
  // exceed a block's shared memory is none the tuner draws.
  std::vector<Task> full = prepare_sketch_tasks(f, {{"M", 1024}, {"N", 1024}, {"K", 1024}}, {}, {},
                                                autosched::Machine::Gpu);
  Config big;
  for (const ir::Knob& k : full[0].func->knobs) big[k.name] = k.value;
  EXPECT_FALSE(full[0].space->broken_constraint(big));
  big["thread_C_i"] = 32;
  big["reg_C_i"] = 8;
  big["thread_C_j"] = 32;
  big["reg_C_j"] = 8;
  big["step_C_k"] = 32;
  EXPECT_TRUE(full[0].space->broken_constraint(big));
  ASSERT_EQ(workloads.size(), tasks.size());
  std::set<std::string> hashes;
  for (size_t i = 0; i < tasks.size(); ++i) {
    SCOPED_TRACE(sketches[i].name);
    EXPECT_EQ(tasks[i].sketch, sketches[i].schedule);
    EXPECT_EQ(tasks[i].sketch_name, sketches[i].name);
    EXPECT_EQ(tasks[i].params.at("M"), 64);
    EXPECT_GT(tasks[i].space->size(), 1u);
    EXPECT_EQ(workloads[i].workload.hash, tasks[i].workload.hash);
    EXPECT_EQ(workloads[i].sketch, tasks[i].sketch);
    EXPECT_EQ(workloads[i].sketch_name, tasks[i].sketch_name);
    hashes.insert(tasks[i].workload.hash);
  }
  EXPECT_EQ(hashes.size(), tasks.size());
  // prepare_task takes the first.
  EXPECT_EQ(prepare_task(f, {{"M", 64}}, {}, {}).workload.hash, tasks.front().workload.hash);

  // A func with a schedule of its own: its own workload, and no sketches.
  ir::Func own = testing::parse_one(kMatmul);
  std::vector<TunedWorkload> one = tuned_workloads(own, {{"TI", 32}}, {});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].workload.hash, workload_of(own, {}).hash);
  EXPECT_TRUE(one[0].sketch.empty());
  EXPECT_THROW(prepare_sketch_tasks(own, {}, {}, {}), TaskError);
}

TEST(TaskTest, IterFeaturesComeFromThePreparedFuncAtEachPoint) {
  Task t = prepare_task(testing::parse_one(kMatmul), {}, {}, {});
  FeatureFn features = iter_features_of(t, CompileOptions{});
  std::vector<float> small = features(*t.space, {{"TI", 8}, {"TJ", 8}});
  std::vector<float> large = features(*t.space, {{"TI", 32}, {"TJ", 32}});
  ASSERT_EQ(small.size(), kIterFeatureLength);
  ASSERT_EQ(large.size(), kIterFeatureLength);
  EXPECT_NE(small, large);
  // A point the compiler refuses scores zeros: the builder refuses it later.
  std::vector<float> refused = features(*t.space, {{"TI", 0}, {"TJ", 8}});
  EXPECT_EQ(refused, std::vector<float>(kIterFeatureLength, 0.0f));
}

TEST(TaskTest, WarmStartReadsTheSameOperatorAtOtherShapesRelativeToItsBest) {
  auto store = records::open_sqlite_store(records::kInMemory);
  ir::Func f = testing::parse_one(kMatmul);
  records::Workload other = workload_of(f, {{"M", 128}});
  records::Workload mine = workload_of(f, {});
  store->put_workload(other);
  store->put_workload(mine);
  auto add = [&](const records::Workload& w, int64_t ti, double ms) {
    records::Record r;
    r.workload = w.hash;
    r.key = "x86";
    r.config = {{"TI", ti}, {"TJ", 8}};
    r.median_ms = ms;
    r.round_ms = {ms};
    store->add_record(r);
  };
  add(other, 8, 2.0);
  add(other, 16, 1.0);
  add(mine, 32, 5.0);  // its own records are no transfer
  TuneSettings s;
  warm_start(*store, mine, "x86", s);
  ASSERT_EQ(s.warm_points.size(), 2u);
  std::map<int64_t, double> cost;
  for (size_t i = 0; i < s.warm_points.size(); ++i)
    cost[s.warm_points[i].at("TI")] = s.warm_cost[i];
  EXPECT_EQ(cost, (std::map<int64_t, double>{{8, 2.0}, {16, 1.0}}));
  TuneSettings elsewhere;
  warm_start(*store, mine, "arm", elsewhere);
  EXPECT_TRUE(elsewhere.warm_points.empty());
}

TEST(TaskTest, AWorkloadKnowsItsShapeByItsParamsValues) {
  ir::Func f = testing::parse_one(kMatmul);
  EXPECT_EQ(workload_of(f, {}).shape, "K=32,M=64,N=64");
  EXPECT_EQ(workload_of(f, {{"M", 128}, {"TI", 8}}).shape,
            "K=32,M=128,N=64");  // knobs are no shape
}

TEST(TaskTest, ShapesAreAsFarApartAsTheirParamsRatios) {
  EXPECT_EQ(shape_distance("K=32,M=64", "K=32,M=64"), 0.0);
  EXPECT_EQ(shape_distance("K=32,M=64", "K=64,M=16"), 1.0 + 2.0);
  EXPECT_EQ(shape_distance("K=0,M=64", "K=1,M=64"), 1.0);  // a 0 or a flag differs by 1
  EXPECT_FALSE(shape_distance("K=32,M=64", "K=32,N=64"));  // other params: no neighbour
  EXPECT_FALSE(shape_distance("K=32", "K=32,M=64"));
  EXPECT_FALSE(shape_distance("", "K=32"));  // a shape an older kiln did not keep
  EXPECT_FALSE(shape_distance("K=x", "K=32"));
}

// A store holding the best record of `config` at `ms`, and a slower one, of matmul at `set`.
void add_shape(records::RecordStore& store, const ir::Func& f, const ir::Overrides& set,
               const Config& config, double ms, const std::string& key = "x86") {
  records::Workload w = workload_of(f, set);
  store.put_workload(w);
  for (auto [c, t] : {std::pair{config, ms}, std::pair{Config{{"TI", 8}, {"TJ", 8}}, 9 * ms}}) {
    records::Record r;
    r.workload = w.hash;
    r.key = key;
    r.config = c;
    r.median_ms = t;
    r.round_ms = {t};
    store.add_record(r);
  }
}

TEST(TaskTest, ANewTaskStartsFromTheBestOfTheNearestShapesThenItsDefaults) {
  auto store = records::open_sqlite_store(records::kInMemory);
  ir::Func f = testing::parse_one(kMatmul);
  add_shape(*store, f, {{"M", 4096}}, {{"TI", 32}, {"TJ", 8}}, 1.0);         // far: 6 octaves
  add_shape(*store, f, {{"M", 128}}, {{"TI", 32}, {"TJ", 32}}, 1.0);         // nearest: 1
  add_shape(*store, f, {{"N", 16}}, {{"TI", 8}, {"TJ", 32}}, 1.0);           // 2
  add_shape(*store, f, {{"M", 128}}, {{"TI", 16}, {"TJ", 16}}, 1.0, "arm");  // another key
  Task t = prepare_task(f, {}, {}, {});
  TuneSettings s;
  first_start(*store, t, "x86", CompileOptions{}, s, 2);
  EXPECT_EQ(s.first_points, (std::vector<Config>{{{"TI", 32}, {"TJ", 32}},
                                                 {{"TI", 8}, {"TJ", 32}},
                                                 {{"TI", 16}, {"TJ", 16}}}));  // the defaults
  EXPECT_EQ(s.first_shapes, (std::vector<std::string>{"K=32,M=128,N=64", "K=32,M=64,N=16", ""}));

  // The task's own shape, measured by another job, comes first.
  add_shape(*store, f, {}, {{"TI", 8}, {"TJ", 16}}, 1.0);
  first_start(*store, t, "x86", CompileOptions{}, s, 2);
  EXPECT_EQ(s.first_points.front(), (Config{{"TI", 8}, {"TJ", 16}}));
  EXPECT_EQ(s.first_shapes.front(), "K=32,M=64,N=64");

  // With no records on the key: the defaults alone.
  first_start(*store, t, "riscv", CompileOptions{}, s);
  EXPECT_EQ(s.first_points, (std::vector<Config>{{{"TI", 16}, {"TJ", 16}}}));
  EXPECT_EQ(s.first_shapes, std::vector<std::string>{""});
}

TEST(TaskTest, AFirstPointOutsideTheSpaceOrBreakingItsConstraintsIsLeftOut) {
  ir::Func f = testing::parse_one(R"(
func scale {
  param N = 64;
  constraint T * U <= 32;
  input  A : f32[N, N];
  output B : f32[N, N];
  compute B(i, j) in 0 <= i < N, 0 <= j < N: B[i, j] = 2.0 * A[i, j];
  schedule {
    knob T = 8 in [4, 8, 16];
    knob U = 2 in [1, 2, 4];
    B.tile(i, j, T, U, io, jo, ii, ji);
  }
}
)");
  auto store = records::open_sqlite_store(records::kInMemory);
  auto add = [&](const ir::Overrides& set, const Config& config) {
    records::Workload w = workload_of(f, set);
    store->put_workload(w);
    records::Record r;
    r.workload = w.hash;
    r.key = "x86";
    r.config = config;
    r.median_ms = r.round_ms.emplace_back(1.0);
    store->add_record(r);
  };
  add({{"N", 128}}, {{"T", 32}, {"U", 1}});  // 32 is no value of T
  add({{"N", 256}}, {{"T", 16}, {"U", 4}});  // breaks T * U <= 32
  add({{"N", 512}}, {{"T", 4}, {"U", 4}});   // the one to take
  Task t = prepare_task(f, {}, {}, {});
  TuneSettings s;
  first_start(*store, t, "x86", CompileOptions{}, s);
  EXPECT_EQ(s.first_points, (std::vector<Config>{{{"T", 4}, {"U", 4}}, {{"T", 8}, {"U", 2}}}));
  EXPECT_EQ(s.first_shapes, (std::vector<std::string>{"N=512", ""}));
}

}  // namespace
}  // namespace kiln::tuner

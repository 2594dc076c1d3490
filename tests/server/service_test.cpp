// kilnd's service core (server/service.h) without a network: every example
// checks and compiles, artifacts are byte-identical to the offline pipeline's
// and served from the cache the second time, a structured operator compiles
// to what its text does, and bad requests get INVALID_ARGUMENT with the
// message the CLI prints.
#include "service.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "example_cases.h"
#include "kiln/compile.h"
#include "kiln/v1/service.pb.h"
#include "programs.h"

namespace kiln::testing {
namespace {

v1::Operator text_operator(const std::string& text, const std::string& file) {
  v1::Operator op;
  op.mutable_source()->set_text(text);
  op.mutable_source()->set_filename(file);
  return op;
}

v1::Operator example(const std::string& name) {
  return text_operator(read_example(name), name + ".kiln");
}

TEST(Service, EveryExampleChecks) {
  server::Service service;
  for (const ExampleCase& c : example_cases()) {
    SCOPED_TRACE(c.example);
    v1::CheckRequest request;
    *request.mutable_op() = example(c.example);
    v1::CheckResponse response;
    server::Status s = service.check(request, &response);
    ASSERT_TRUE(s.ok()) << s.message;
    ir::Func f = parse_one(read_example(c.example));
    EXPECT_EQ(response.name(), f.name);
    EXPECT_EQ(response.computations(), static_cast<int>(f.comps.size()));
    EXPECT_EQ(response.schedule_commands(), static_cast<int>(f.schedule.size()));
  }
}

// The artifact is the offline pipeline's, byte for byte, and the second
// identical request is served from the cache with the same bytes.
TEST(Service, CompileGivesTheOfflineArtifactAndCachesIt) {
  server::Service service;
  for (const ExampleCase& c : example_cases()) {
    SCOPED_TRACE(c.example);
    v1::CompileRequest request;
    *request.mutable_op() = example(c.example);
    (*request.mutable_options()->mutable_set())
        .insert(c.params.front().begin(), c.params.front().end());
    v1::CompileResponse first, second;
    server::Status s = service.compile(request, &first);
    ASSERT_TRUE(s.ok()) << s.message;
    EXPECT_FALSE(first.cache_hit());
    EXPECT_FALSE(first.times().empty());

    CompileResult offline = compile(CompileRequest{.func = parse_one(read_example(c.example)),
                                                   .overrides = c.params.front(),
                                                   .output = CompileOutput::Artifact});
    const codegen::Artifact& a = *offline.artifact;
    EXPECT_EQ(first.artifact().code(), std::string(a.code.begin(), a.code.end()));
    EXPECT_EQ(first.artifact().key(), a.key);
    EXPECT_EQ(first.artifact().code_sha256(), a.code_sha256);
    EXPECT_EQ(first.artifact().metadata_json(), a.metadata_json());
    EXPECT_EQ(first.artifact().entry(), a.entry);

    ASSERT_TRUE(service.compile(request, &second).ok());
    EXPECT_TRUE(second.cache_hit());
    EXPECT_EQ(second.artifact().SerializeAsString(), first.artifact().SerializeAsString());
  }
  server::CacheStats stats = service.cache_stats();
  EXPECT_EQ(stats.hits, example_cases().size());
  EXPECT_EQ(stats.misses, example_cases().size());
}

// A structured operator is the same operator as its text: same key, same bytes.
TEST(Service, AStructuredOperatorCompilesToWhatItsTextDoes) {
  const char* text = R"(func scale {
  param N = 64;
  input x : f32[N];
  output y : f32[N];
  compute c(i) in 0 <= i < N: y[i] = x[i] * 2.0 + 1.0;
  schedule { c.split(i, 8, io, ii); c.tag(ii, vectorize); }
})";
  v1::CompileRequest from_def;
  std::ifstream file(std::string(KILN_SOURCE_DIR) + "/tests/data/defs/scale.textproto");
  std::string def_text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(def_text, &from_def));
  v1::CompileRequest from_text;
  *from_text.mutable_op() = text_operator(text, "scale.kiln");
  server::Service service;
  v1::CompileResponse a, b;
  ASSERT_TRUE(service.compile(from_def, &a).ok());
  ASSERT_TRUE(service.compile(from_text, &b).ok());
  EXPECT_TRUE(b.cache_hit());
  EXPECT_EQ(a.artifact().key(), b.artifact().key());
  EXPECT_EQ(a.artifact().code(), b.artifact().code());
}

TEST(Service, EmitGivesTheStagesTheCliPrints) {
  server::Service service;
  ir::Func f = parse_one(read_example("matmul"));
  v1::EmitRequest request;
  *request.mutable_op() = example("matmul");
  v1::EmitResponse response;
  request.set_stage(v1::AST);
  ASSERT_TRUE(service.emit(request, &response).ok());
  EXPECT_EQ(response.text(), ir::to_string(f));
  request.set_stage(v1::LOOPS);
  ASSERT_TRUE(service.emit(request, &response).ok());
  EXPECT_EQ(response.text(), ir::to_string(poly::lower(poly::schedule(f))));
  request.set_stage(v1::SCHEDULE);
  ASSERT_TRUE(service.emit(request, &response).ok());
  EXPECT_EQ(response.text(), poly::schedule(f).describe_schedule());
  request.set_stage(v1::ASM);
  ASSERT_TRUE(service.emit(request, &response).ok());
  EXPECT_NE(response.text().find(codegen::entry_symbol(poly::lower(poly::schedule(f)))),
            std::string::npos);
}

// A temporary directory, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    path = ::testing::TempDir() + "kiln_service_test_XXXXXX";
    EXPECT_NE(mkdtemp(path.data()), nullptr);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

v1::CompileRequest matmul_request() {
  v1::CompileRequest r;
  *r.mutable_op() = example("matmul");
  return r;
}

// A restarted service (a new one on the same data directory) serves a
// repeated request from disk, byte for byte.
TEST(CompileCache, ARestartedServiceHitsItsDiskCache) {
  TempDir dir;
  v1::CompileResponse first, again;
  {
    server::Service service({.data_dir = dir.path});
    ASSERT_TRUE(service.compile(matmul_request(), &first).ok());
  }
  server::Service restarted({.data_dir = dir.path});
  ASSERT_TRUE(restarted.compile(matmul_request(), &again).ok());
  EXPECT_TRUE(again.cache_hit());
  EXPECT_EQ(again.artifact().SerializeAsString(), first.artifact().SerializeAsString());
  EXPECT_EQ(restarted.cache_stats().disk_hits, 1u);
}

// A truncated, corrupted or foreign entry is dropped and recompiled, never served.
TEST(CompileCache, ADamagedEntryIsDroppedAndRecompiled) {
  TempDir dir;
  v1::CompileResponse fresh;
  std::string path;
  {
    server::Service service({.data_dir = dir.path});
    ASSERT_TRUE(service.compile(matmul_request(), &fresh).ok());
    path = server::CompileCache(0, dir.path).path_of(fresh.artifact().key());
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  std::string good;
  {
    std::ifstream in(path, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::string flipped = good;
  flipped[flipped.size() / 2] ^= 0x20;
  for (const std::string& bad : {good.substr(0, good.size() / 2), flipped, std::string("junk")}) {
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << bad;
    }
    server::Service restarted({.data_dir = dir.path});
    v1::CompileResponse r;
    ASSERT_TRUE(restarted.compile(matmul_request(), &r).ok());
    EXPECT_FALSE(r.cache_hit());
    EXPECT_EQ(r.artifact().code(), fresh.artifact().code());
    EXPECT_EQ(restarted.cache_stats().dropped, 1u);
    // The entry was written again, whole.
    std::ifstream in(path, std::ios::binary);
    std::string now((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(now, good);
  }
}

TEST(CompileCache, AnUnusableDataDirectoryIsAnErrorAtStart) {
  EXPECT_THROW(server::Service({.data_dir = "/proc/kiln-cannot-be-here"}), std::runtime_error);
}

// A request whose deadline has passed is DEADLINE_EXCEEDED, and the service goes on.
TEST(Service, APassedDeadlineIsDeadlineExceeded) {
  server::Service service;
  v1::CompileResponse response;
  server::Status s =
      service.compile(matmul_request(), &response, {.deadline = std::chrono::steady_clock::now()});
  EXPECT_EQ(s.code, server::Code::DeadlineExceeded);
  EXPECT_NE(s.message.find("error: the request's deadline passed before the overrides stage of "
                           "matmul"),
            std::string::npos)
      << s.message;
  EXPECT_TRUE(service.compile(matmul_request(), &response).ok());
}

// A client that goes away while its request compiles: the compilation stops at
// the next check (between stages, or between the steps of one) and the answer
// is CANCELLED, saying where.
TEST(Service, ARequestCancelledMidCompileStopsThere) {
  server::Service service;
  for (int checks_before_cancel : {0, 1, 2, 5}) {
    SCOPED_TRACE(checks_before_cancel);
    int asked = 0;
    server::CallOptions call;
    call.cancelled = [&] { return ++asked > checks_before_cancel; };
    v1::CompileResponse response;
    server::Status s = service.compile(matmul_request(), &response, call);
    EXPECT_EQ(s.code, server::Code::Cancelled) << s.message;
    EXPECT_NE(s.message.find("the request was cancelled"), std::string::npos) << s.message;
    EXPECT_FALSE(response.has_artifact());
  }
  v1::CompileResponse response;
  EXPECT_TRUE(service.compile(matmul_request(), &response).ok());
}

// Holds every admitted request until released: what a busy kilnd looks like.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  int admitted = 0;
  bool open = false;
  void hold() {
    std::unique_lock<std::mutex> lock(mu);
    ++admitted;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
  }
  void wait_for(int n) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return admitted >= n; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

v1::CheckRequest matmul_check() {
  v1::CheckRequest r;
  *r.mutable_op() = example("matmul");
  return r;
}

// With every worker busy and no room in the queue, a request is refused at
// once; a cache hit needs no worker and is served all the same.
TEST(Service, AFullQueueIsResourceExhaustedAtOnce) {
  Gate gate;
  server::ServiceOptions options;
  options.workers = 1;
  options.queue_depth = 0;
  options.on_admitted = [&] { gate.hold(); };
  server::Service service(options);
  v1::CompileResponse cached;
  gate.open = true;
  ASSERT_TRUE(service.compile(matmul_request(), &cached).ok());
  gate.open = false;

  std::thread busy([&] {
    v1::CheckResponse r;
    EXPECT_TRUE(service.check(matmul_check(), &r).ok());
  });
  gate.wait_for(2);  // the compile above, and now the busy one
  v1::CheckResponse r;
  server::Status s = service.check(matmul_check(), &r);
  EXPECT_EQ(s.code, server::Code::ResourceExhausted);
  EXPECT_EQ(s.message,
            "kilnd is busy: 1 compiling and 0 waiting, as many as it takes (--workers 1, "
            "--queue-depth 0); try again later");
  v1::CompileResponse hit;
  ASSERT_TRUE(service.compile(matmul_request(), &hit).ok());
  EXPECT_TRUE(hit.cache_hit());
  gate.release();
  busy.join();
  EXPECT_TRUE(service.check(matmul_check(), &r).ok());
}

// A request that waits for a worker gives up at its deadline.
TEST(Service, AWaitingRequestGivesUpAtItsDeadline) {
  Gate gate;
  server::ServiceOptions options;
  options.workers = 1;
  options.queue_depth = 1;
  options.on_admitted = [&] { gate.hold(); };
  server::Service service(options);
  std::thread busy([&] {
    v1::CheckResponse r;
    EXPECT_TRUE(service.check(matmul_check(), &r).ok());
  });
  gate.wait_for(1);
  v1::CheckResponse r;
  server::Status s = service.check(
      matmul_check(), &r,
      {.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100)});
  EXPECT_EQ(s.code, server::Code::DeadlineExceeded);
  EXPECT_EQ(s.message, "the request's deadline passed while it waited for a worker");
  gate.release();
  busy.join();
}

// Bad requests: the status, and the message the CLI would print.
TEST(Service, BadRequestsAreInvalidArgumentsThatSayWhatAndWhere) {
  struct Case {
    v1::Operator op;
    const char* expect;
  };
  std::vector<Case> cases = {
      {v1::Operator{}, "op: the request has no operator (set source, def, graph or model)"},
      {text_operator("func f { input x : f32[N]; }", "bad.kiln"),
       "bad.kiln:1:24: validate error: unknown name 'N' in the shape of 'x'"},
      {text_operator("func f {", ""), "<request>:1:9: parse error: "},
      {text_operator(read_example("matmul") + read_example("spmm"), "two.kiln"),
       "two.kiln: the source has 2 funcs and 0 graphs; name the one to use (source.name)"},
  };
  cases.push_back({example("matmul"), ""});
  cases.back().op.mutable_source()->set_name("nope");
  cases.back().expect = "matmul.kiln: no func or graph 'nope' in the source (it has: matmul)";
  server::Service service;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expect);
    v1::CheckRequest request;
    *request.mutable_op() = c.op;
    v1::CheckResponse response;
    server::Status s = service.check(request, &response);
    EXPECT_EQ(s.code, server::Code::InvalidArgument);
    EXPECT_TRUE(s.message.starts_with(c.expect)) << s.message;
  }
  v1::CompileRequest bad_level;
  *bad_level.mutable_op() = example("matmul");
  bad_level.mutable_options()->set_opt_level(7);
  v1::CompileResponse response;
  server::Status s = service.compile(bad_level, &response);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_EQ(s.message, "options.opt_level: 7 is not a level (0 to 3)");
}

}  // namespace
}  // namespace kiln::testing

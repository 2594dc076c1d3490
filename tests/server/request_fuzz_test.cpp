// Every method of kiln.v1.Compiler against a real kilnd, with requests made from the protos:
// each field of a valid request at its extremes (numbers at their limits and signs, strings
// empty, long, with a NUL; enum values no one defined), then seeded random mutations of several
// fields at once and of the serialized bytes. Every call must be answered within its deadline
// with a status other than INTERNAL or UNKNOWN (those are kiln's own bugs), and kilnd must serve
// on. KILN_FUZZ_SEED and KILN_FUZZ_COUNT change the random part (ctest: seed 1, 150 requests).
#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/client_unary_call.h>
#include <grpcpp/impl/codegen/sync_stream.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kiln/v1/service.pb.h"
#include "kilnd_process.h"
#include "programs.h"

namespace kiln::testing {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr const char* kSmall =
    "func scale { param n; constraint n > 0; input x : f32[n]; output y : f32[n];\n"
    "  compute c(i) in 0 <= i < n: y[i] = x[i] * 3.0; }";

// A method, a valid request for it, and whether it streams its answer.
struct Method {
  std::string path;
  std::shared_ptr<Message> request;
  bool streaming = false;
};

std::vector<Method> methods() {
  v1::Operator small;
  small.mutable_source()->set_text(kSmall);
  small.mutable_source()->set_filename("scale.kiln");
  v1::Operator matmul;
  matmul.mutable_source()->set_text(read_example("matmul"));
  matmul.mutable_source()->set_filename("matmul.kiln");

  auto check = std::make_shared<v1::CheckRequest>();
  *check->mutable_op() = matmul;
  auto emit = std::make_shared<v1::EmitRequest>();
  *emit->mutable_op() = small;
  emit->set_stage(v1::LOOPS);
  emit->mutable_options()->set_opt_level(2);
  auto compile = std::make_shared<v1::CompileRequest>();
  *compile->mutable_op() = small;
  auto run = std::make_shared<v1::RunRequest>();
  *run->mutable_op() = small;
  (*run->mutable_runtime_params())["n"] = 16;
  run->set_check(true);
  run->set_repeat(1);
  v1::BufferData* in = run->add_inputs();
  in->set_name("x");
  in->add_shape(16);
  for (int k = 0; k < 16; ++k) in->mutable_floats()->add_values(k);
  auto measure = std::make_shared<v1::MeasureRequest>();
  *measure->mutable_op() = small;
  measure->set_key("x86");
  (*measure->mutable_runtime_params())["n"] = 16;
  measure->mutable_settings()->set_repeat(1);
  auto tune = std::make_shared<v1::TuneRequest>();
  *tune->mutable_op() = matmul;
  tune->set_key("x86");
  tune->set_trials(2);
  auto resume = std::make_shared<v1::ResumeTuneRequest>();
  resume->set_job(1);
  auto cancel = std::make_shared<v1::CancelTuneRequest>();
  cancel->set_job(1);
  auto jobs = std::make_shared<v1::ListJobsRequest>();
  jobs->set_limit(5);
  auto query = std::make_shared<v1::QueryRecordsRequest>();
  query->set_limit(5);
  query->mutable_filter()->set_job(1);
  auto best = std::make_shared<v1::BestConfigRequest>();
  *best->mutable_op() = matmul;
  auto exported = std::make_shared<v1::ExportRecordsRequest>();
  exported->mutable_filter()->set_since_unix_ms(1);
  auto stat = std::make_shared<v1::StatBlobsRequest>();
  stat->add_sha256(std::string(64, 'a'));
  auto get = std::make_shared<v1::GetBlobRequest>();
  get->set_sha256(std::string(64, 'b'));
  auto check_model = std::make_shared<v1::CheckRequest>();
  check_model->mutable_op()->mutable_model()->set_sha256(std::string(64, 'c'));
  check_model->mutable_op()->mutable_model()->set_filename("m.onnx");
  (*check_model->mutable_op()->mutable_model()->mutable_dims())["batch"] = 1;
  return {
      {"/kiln.v1.Compiler/StatBlobs", stat},
      {"/kiln.v1.Compiler/GetBlob", get, true},
      {"/kiln.v1.Compiler/Check", check_model},
      {"/kiln.v1.Compiler/Check", check},
      {"/kiln.v1.Compiler/Emit", emit},
      {"/kiln.v1.Compiler/Compile", compile},
      {"/kiln.v1.Compiler/Run", run},
      {"/kiln.v1.Compiler/ListAgents", std::make_shared<v1::ListAgentsRequest>()},
      {"/kiln.v1.Compiler/Measure", measure},
      {"/kiln.v1.Compiler/Tune", tune, true},
      {"/kiln.v1.Compiler/ResumeTune", resume, true},
      {"/kiln.v1.Compiler/CancelTune", cancel},
      {"/kiln.v1.Compiler/ListJobs", jobs},
      {"/kiln.v1.Compiler/QueryRecords", query},
      {"/kiln.v1.Compiler/BestConfig", best},
      {"/kiln.v1.Compiler/ExportRecords", exported, true},
  };
}

// One change to a request: what it does, for the failure message, and how.
struct Mutation {
  std::string what;
  std::function<void(Message&)> apply;
};

// The message at `path` (field numbers, from the request down) inside m.
Message* at(Message& m, const std::vector<const FieldDescriptor*>& path) {
  Message* cur = &m;
  for (const FieldDescriptor* f : path) cur = cur->GetReflection()->MutableMessage(cur, f);
  return cur;
}

// The extremes of one scalar field.
void extremes_of(const std::vector<const FieldDescriptor*>& path, const FieldDescriptor* f,
                 const std::string& name, std::vector<Mutation>& out) {
  auto add = [&](std::string what, std::function<void(Message&, const FieldDescriptor*)> set) {
    out.push_back({name + " = " + what, [path, f, set](Message& m) { set(*at(m, path), f); }});
  };
  const bool repeated = f->is_repeated();
  auto r = [](Message& m) { return m.GetReflection(); };
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      for (int32_t v : {INT32_MIN, -1, 0, INT32_MAX})
        add(std::to_string(v), [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddInt32(&m, f, v) : r(m)->SetInt32(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      for (int64_t v : {INT64_MIN, int64_t{-1}, int64_t{0}, int64_t{1} << 40, INT64_MAX})
        add(std::to_string(v), [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddInt64(&m, f, v) : r(m)->SetInt64(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      for (uint32_t v : {0u, UINT32_MAX})
        add(std::to_string(v), [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddUInt32(&m, f, v) : r(m)->SetUInt32(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      for (uint64_t v : {uint64_t{0}, UINT64_MAX})
        add(std::to_string(v), [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddUInt64(&m, f, v) : r(m)->SetUInt64(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      for (double v : {-1e308, -1.0, 0.0, 1e308, std::numeric_limits<double>::quiet_NaN()})
        add(std::to_string(v), [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddDouble(&m, f, v) : r(m)->SetDouble(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      for (bool v : {false, true})
        add(v ? "true" : "false", [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddBool(&m, f, v) : r(m)->SetBool(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      for (int v :
           {0, f->enum_type()->value(f->enum_type()->value_count() - 1)->number(), 12345, -7})
        add("enum " + std::to_string(v), [v, repeated, r](Message& m, const FieldDescriptor* f) {
          repeated ? r(m)->AddEnumValue(&m, f, v) : r(m)->SetEnumValue(&m, f, v);
        });
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      for (const std::string& v :
           {std::string(), std::string(100'000, 'a'), std::string("a\0b", 3), std::string("../..")})
        add(v.size() > 8 ? std::to_string(v.size()) + " bytes" : "'" + v + "'",
            [v, repeated, r](Message& m, const FieldDescriptor* f) {
              repeated ? r(m)->AddString(&m, f, v) : r(m)->SetString(&m, f, v);
            });
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
}

// Every field's extremes in m (the messages it holds, recursively; maps get an entry of each
// extreme key and value), and clearing each set field.
void mutations_of(const Message& m, std::vector<const FieldDescriptor*> path,
                  const std::string& prefix, std::vector<Mutation>& out) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    std::string name = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->is_map()) {
      const FieldDescriptor* key = f->message_type()->map_key();
      const FieldDescriptor* value = f->message_type()->map_value();
      for (const std::string& k : {std::string(), std::string("n"), std::string(5000, 'k')})
        for (int64_t v : {INT64_MIN, int64_t{-1}, int64_t{0}, INT64_MAX}) {
          if (key->cpp_type() != FieldDescriptor::CPPTYPE_STRING ||
              value->cpp_type() != FieldDescriptor::CPPTYPE_INT64)
            continue;
          out.push_back({fmt::format("{}[{}] = {}", name, k.size() > 8 ? "long" : k, v),
                         [path, f, key, value, k, v](Message& m) {
                           Message* cur = at(m, path);
                           Message* entry = cur->GetReflection()->AddMessage(cur, f);
                           entry->GetReflection()->SetString(entry, key, k);
                           entry->GetReflection()->SetInt64(entry, value, v);
                         }});
        }
      continue;
    }
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        const Reflection* r = m.GetReflection();
        if (r->FieldSize(m, f) > 0) {  // the first element's fields, relative to it
          std::vector<Mutation> inner;
          mutations_of(r->GetRepeatedMessage(m, f, 0), {}, name + "[0]", inner);
          for (Mutation& x : inner)
            out.push_back({x.what, [path, f, apply = x.apply](Message& m) {
                             Message* cur = at(m, path);
                             apply(*cur->GetReflection()->MutableRepeatedMessage(cur, f, 0));
                           }});
        }
        continue;
      }
      if (!m.GetReflection()->HasField(m, f)) continue;
      std::vector<const FieldDescriptor*> p = path;
      p.push_back(f);
      mutations_of(m.GetReflection()->GetMessage(m, f), p, name, out);
      continue;
    }
    extremes_of(path, f, name, out);
  }
}

// A call's answer: its status, and how long it took.
struct Answer {
  grpc::Status status;
  std::chrono::milliseconds took;
};

Answer call(grpc::Channel& channel, const Method& m, const std::string& bytes,
            std::chrono::seconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  auto start = std::chrono::steady_clock::now();
  grpc::Status s;
  if (m.streaming) {
    grpc::internal::RpcMethod rpc(m.path.c_str(), grpc::internal::RpcMethod::SERVER_STREAMING);
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(&channel, rpc, &ctx,
                                                                      request));
    int read = 0;
    while (reader->Read(&response))
      if (++read == 2) ctx.TryCancel();  // a tuning job's first progress is enough
    s = reader->Finish();
    if (read >= 2 && s.error_code() == grpc::StatusCode::CANCELLED) s = grpc::Status::OK;
  } else {
    grpc::internal::RpcMethod rpc(m.path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
    s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(&channel, rpc, &ctx,
                                                                              request, &response);
  }
  return {s, std::chrono::duration_cast<std::chrono::milliseconds>(
                 std::chrono::steady_clock::now() - start)};
}

class RequestFuzz : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Work a request may cause is bounded well inside the calls' deadline.
    kilnd_ = new KilndProcess(KILND_BINARY, {"--run-timeout-ms", "4000", "--run-memory-mb", "1024",
                                             "--max-stage-ms", "4000", "--workers", "2"});
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    channel_ = new std::shared_ptr<grpc::Channel>(
        grpc::CreateCustomChannel(kilnd_->address(), grpc::InsecureChannelCredentials(), args));
  }
  static void TearDownTestSuite() {
    delete channel_;
    kilnd_->terminate();
    EXPECT_EQ(kilnd_->wait(), 0);
    delete kilnd_;
  }

  // Sends `bytes` as a request of `m` and checks the answer.
  static void expect_answered(const Method& m, const std::string& bytes, const std::string& what) {
    constexpr auto kDeadline = std::chrono::seconds(20);
    Answer a = call(**channel_, m, bytes, kDeadline);
    grpc::StatusCode code = a.status.error_code();
    EXPECT_NE(code, grpc::StatusCode::INTERNAL)
        << m.path << " with " << what << ": " << a.status.error_message();
    EXPECT_NE(code, grpc::StatusCode::UNKNOWN)
        << m.path << " with " << what << ": " << a.status.error_message();
    EXPECT_NE(code, grpc::StatusCode::DEADLINE_EXCEEDED)
        << m.path << " with " << what << ": not answered within " << kDeadline.count() << " s";
    EXPECT_LE(a.status.error_message().size(), 4096u) << m.path << " with " << what;
    ++answers_[code];
  }

  // How the calls were answered, by status code (the fuzz reached past the first checks when
  // many are OK or are the work's own refusals).
  static void print_answers() {
    std::string line;
    for (const auto& [code, n] : answers_)
      line += fmt::format(" {}: {}", static_cast<int>(code), n);
    std::printf("answers by status code:%s\n", line.c_str());
    answers_.clear();
  }
  static inline std::map<grpc::StatusCode, int> answers_;

  // A valid Compile is still served.
  static void expect_serving() {
    for (const Method& m : methods()) {
      if (m.path != "/kiln.v1.Compiler/Compile") continue;
      Answer a = call(**channel_, m, m.request->SerializeAsString(), std::chrono::seconds(20));
      ASSERT_TRUE(a.status.ok()) << "kilnd no longer serves: " << a.status.error_message();
    }
  }

  static KilndProcess* kilnd_;
  static std::shared_ptr<grpc::Channel>* channel_;
};
KilndProcess* RequestFuzz::kilnd_ = nullptr;
std::shared_ptr<grpc::Channel>* RequestFuzz::channel_ = nullptr;

TEST_F(RequestFuzz, EveryFieldAtItsExtremesIsAnsweredWithoutAnInternalError) {
  size_t sent = 0;
  for (const Method& m : methods()) {
    std::vector<Mutation> mutations;
    mutations_of(*m.request, {}, "", mutations);
    for (const Mutation& x : mutations) {
      std::unique_ptr<Message> r(m.request->New());
      r->CopyFrom(*m.request);
      x.apply(*r);
      expect_answered(m, r->SerializeAsString(), x.what);
      ++sent;
    }
  }
  EXPECT_GT(sent, 300u);
  print_answers();
  expect_serving();
}

TEST_F(RequestFuzz, SeededMutationsOfFieldsAndBytesAreAnsweredWithoutAnInternalError) {
  const char* seed_env = std::getenv("KILN_FUZZ_SEED");
  const char* count_env = std::getenv("KILN_FUZZ_COUNT");
  uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 1;
  int count = count_env ? std::atoi(count_env) : 150;
  std::mt19937_64 rng(seed);
  std::vector<Method> all = methods();
  for (int k = 0; k < count; ++k) {
    const Method& m = all[rng() % all.size()];
    std::vector<Mutation> mutations;
    mutations_of(*m.request, {}, "", mutations);
    std::unique_ptr<Message> r(m.request->New());
    r->CopyFrom(*m.request);
    std::string what = fmt::format("seed {} request {}:", seed, k);
    for (int n = 1 + static_cast<int>(rng() % 4); n > 0 && !mutations.empty(); --n) {
      const Mutation& x = mutations[rng() % mutations.size()];
      x.apply(*r);
      what += " " + x.what + ";";
    }
    std::string bytes = r->SerializeAsString();
    if (!bytes.empty() && rng() % 3 == 0) {  // and its bytes: flipped, cut or repeated
      switch (rng() % 3) {
        case 0:
          for (int flips = 1 + static_cast<int>(rng() % 8); flips > 0; --flips)
            bytes[rng() % bytes.size()] ^= static_cast<char>(1 << (rng() % 8));
          what += " bytes flipped;";
          break;
        case 1:
          bytes.resize(rng() % bytes.size());
          what += " bytes cut;";
          break;
        default:
          bytes += bytes.substr(0, rng() % bytes.size());
          what += " bytes repeated;";
          break;
      }
    }
    SCOPED_TRACE(what);
    expect_answered(m, bytes, what);
  }
  print_answers();
  expect_serving();
}

}  // namespace
}  // namespace kiln::testing

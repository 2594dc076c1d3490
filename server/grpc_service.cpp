// kiln.v1.Compiler over the service core.
#include "grpc_service.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/service_type.h>
#include <grpcpp/support/method_handler.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>

#include "kiln/v1/service.pb.h"
#include "request.h"
#include "tuning.h"
#include "validate.h"

namespace kiln::server {

namespace {

grpc::StatusCode grpc_code(Code c) {
  switch (c) {
    case Code::Ok:
      return grpc::StatusCode::OK;
    case Code::InvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case Code::ResourceExhausted:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Code::DeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case Code::NotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Code::FailedPrecondition:
      return grpc::StatusCode::FAILED_PRECONDITION;
    case Code::Unavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case Code::Cancelled:
      return grpc::StatusCode::CANCELLED;
    case Code::Unauthenticated:
      return grpc::StatusCode::UNAUTHENTICATED;
    case Code::Internal:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

// The client's deadline, on the steady clock the pipeline checks, and
// whether the client went away.
CallOptions call_options(grpc::ServerContext* ctx) {
  CallOptions call;
  call.cancelled = [ctx] { return ctx->IsCancelled(); };
  auto deadline = ctx->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    call.deadline = std::chrono::steady_clock::now() +
                    std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        deadline - std::chrono::system_clock::now());
  }
  return call;
}

// The operator a request is about, for the log line.
std::string operator_name(const v1::Operator& op) {
  switch (op.definition_case()) {
    case v1::Operator::kSource:
      return op.source().name().empty() ? op.source().filename() : op.source().name();
    case v1::Operator::kDef:
      return op.def().name();
    case v1::Operator::kGraph:
      return op.graph().name();
    case v1::Operator::kModel:
      return op.model().filename().empty() ? op.model().sha256() : op.model().filename();
    default:
      return "";
  }
}

// Equal strings, compared in a time that does not depend on where they differ.
bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t k = 0; k < a.size(); ++k) diff |= a[k] ^ b[k % std::max<size_t>(b.size(), 1)];
  return diff == 0 && !b.empty();
}

// Whether the call carries the token: "" when it does, else why not.
std::string access_problem(const grpc::ServerContext* ctx, const Access& access) {
  if (access.token.empty()) return "";
  const auto& md = ctx->client_metadata();
  auto it = md.find("authorization");
  if (size_t n = md.count("authorization"); n > 1)
    return fmt::format("the request carries {} authorization values: send one, 'Bearer TOKEN'", n);
  if (it == md.end())
    return "this kilnd requires a token: send the metadata 'authorization: Bearer TOKEN' "
           "(kiln --token-file FILE)";
  std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (!value.starts_with(kBearer) || !same_secret(value.substr(kBearer.size()), access.token))
    return "the request's token is not this kilnd's";
  return "";
}

// A request parsed from its bytes, refused with INVALID_ARGUMENT when they are
// not one or nest too deep.
template <typename Request>
Status parse_request(const grpc::ByteBuffer& buffer, Request* request) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return {Code::Internal, "cannot read the request's bytes"};
  std::string bytes;
  bytes.reserve(buffer.Length());
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (!parse_message(bytes, *request))
    return {Code::InvalidArgument,
            fmt::format("the request does not parse as a {}: a string field holds bytes that "
                        "are not UTF-8, or its messages nest deeper than {} levels (a "
                        "structured expression may nest 256 levels, as in the language)",
                        Request::descriptor()->full_name(), kMaxRequestNesting)};
  return {};
}

grpc::ByteBuffer serialized(const google::protobuf::MessageLite& m) {
  grpc::Slice slice(m.SerializeAsString());
  return grpc::ByteBuffer(&slice, 1);
}

// kiln.v1.Compiler with the requests parsed here (parse_request), not by
// the generated code, so that a hostile one gets a clear answer.
class CompilerService final : public grpc::Service {
 public:
  CompilerService(server::Service& core, Tuning& tuning, Access access, Ceilings ceilings)
      : core_(core), tuning_(tuning), access_(std::move(access)), ceilings_(ceilings) {
    method<v1::CheckRequest, v1::CheckResponse>(
        "/kiln.v1.Compiler/Check", [this](const auto& r, auto* out, const auto& call,
                                          std::string&) { return core_.check(r, out, call); });
    method<v1::EmitRequest, v1::EmitResponse>(
        "/kiln.v1.Compiler/Emit", [this](const auto& r, auto* out, const auto& call, std::string&) {
          return core_.emit(r, out, call);
        });
    method<v1::CompileRequest, v1::CompileResponse>(
        "/kiln.v1.Compiler/Compile",
        [this](const auto& r, auto* out, const auto& call, std::string& detail) {
          Status s = core_.compile(r, out, call);
          if (s.ok()) detail = (out->cache_hit() ? " hit " : " miss ") + out->artifact().key();
          return s;
        });
    method<v1::RunRequest, v1::RunResponse>(
        "/kiln.v1.Compiler/Run",
        [this](const auto& r, auto* out, const auto& call, std::string& detail) {
          Status s = core_.run(r, out, call);
          if (s.ok()) detail = fmt::format(" run {:.1f} ms", out->run_ms());
          return s;
        });
    method<v1::ListAgentsRequest, v1::ListAgentsResponse>(
        "/kiln.v1.Compiler/ListAgents", [this](const auto&, auto* out, const auto&, std::string&) {
          return core_.list_agents(out);
        });
    method<v1::MeasureRequest, v1::MeasureResponse>(
        "/kiln.v1.Compiler/Measure",
        [this](const auto& r, auto* out, const auto& call, std::string& detail) {
          Status s = core_.measure(r, out, call);
          if (s.ok())
            detail =
                fmt::format(" on {} ({}): {} median {:.4f} ms", out->agent_id(), r.key(),
                            v1::MeasureResult::Error_Name(out->result().error()), out->median_ms());
          return s;
        });

    // Tuning and records (tuning.h).
    streaming<v1::TuneRequest, v1::TuneProgress>(
        "/kiln.v1.Compiler/Tune",
        [this](const auto& r, const auto& send, const auto& call, std::string& detail) {
          int64_t job = 0;
          Status s = tuning_.tune(
              r,
              [&](const v1::TuneProgress& p) {
                job = p.job();
                return send(p);
              },
              call);
          detail = fmt::format(" on {} job {}", r.key(), job);
          return s;
        });
    streaming<v1::ResumeTuneRequest, v1::TuneProgress>(
        "/kiln.v1.Compiler/ResumeTune",
        [this](const auto& r, const auto& send, const auto& call, std::string& detail) {
          detail = fmt::format(" job {}", r.job());
          return tuning_.resume(r, send, call);
        });
    method<v1::CancelTuneRequest, v1::CancelTuneResponse>(
        "/kiln.v1.Compiler/CancelTune",
        [this](const auto& r, auto* out, const auto&, std::string& detail) {
          detail = fmt::format(" job {}", r.job());
          return tuning_.cancel(r, out);
        });
    method<v1::ListJobsRequest, v1::ListJobsResponse>(
        "/kiln.v1.Compiler/ListJobs", [this](const auto& r, auto* out, const auto&, std::string&) {
          return tuning_.list_jobs(r, out);
        });
    method<v1::QueryRecordsRequest, v1::QueryRecordsResponse>(
        "/kiln.v1.Compiler/QueryRecords",
        [this](const auto& r, auto* out, const auto&, std::string& detail) {
          Status s = tuning_.query(r, out);
          if (s.ok()) detail = fmt::format(" {} of {}", out->records_size(), out->total());
          return s;
        });
    method<v1::BestConfigRequest, v1::BestConfigResponse>(
        "/kiln.v1.Compiler/BestConfig",
        [this](const auto& r, auto* out, const auto& call, std::string&) {
          return tuning_.best(r, out, call);
        });
    streaming<v1::ExportRecordsRequest, v1::ExportRecordsChunk>(
        "/kiln.v1.Compiler/ExportRecords",
        [this](const auto& r, const auto& send, const auto&, std::string&) {
          return tuning_.export_records(r, send);
        });

    // Blobs (blob_store.h): a model's file in, a compiled model's weights out.
    method<v1::StatBlobsRequest, v1::StatBlobsResponse>(
        "/kiln.v1.Compiler/StatBlobs", [this](const auto& r, auto* out, const auto&, std::string&) {
          return core_.stat_blobs(r, out);
        });
    uploading<v1::BlobChunk, v1::PutBlobResponse>(
        "/kiln.v1.Compiler/PutBlob",
        [this](const auto& next, auto* out, const auto& call, std::string& detail) {
          Status s = core_.put_blob(next, out, call);
          if (s.ok())
            detail = fmt::format(" {} {} bytes{}", out->sha256(), out->size(),
                                 out->already_present() ? " (held already)" : "");
          return s;
        });
    streaming<v1::GetBlobRequest, v1::BlobChunk>(
        "/kiln.v1.Compiler/GetBlob",
        [this](const auto& r, const auto& send, const auto& call, std::string& detail) {
          detail = " " + r.sha256();
          return core_.get_blob(r, send, call);
        });
  }

 private:
  // Registers the method `path` (a literal: gRPC keeps the pointer), served
  // by `serve(request, response, call, detail)` after the checks every call
  // gets.
  template <typename Request, typename Response, typename Serve>
  void method(const char* path, Serve serve) {
    const char* name = std::strrchr(path, '/') + 1;
    using Handler =
        grpc::internal::RpcMethodHandler<CompilerService, grpc::ByteBuffer, grpc::ByteBuffer>;
    auto handle = [name, serve](CompilerService* self, grpc::ServerContext* ctx,
                                const grpc::ByteBuffer* in, grpc::ByteBuffer* out) {
      auto start = std::chrono::steady_clock::now();
      Request request;
      Response response;
      std::string detail;
      Status s = self->admit(ctx);
      if (s.ok()) s = parse_request(*in, &request);
      if (s.ok()) s = validate(request, self->ceilings_);
      if (s.ok()) s = serve(request, &response, call_options(ctx), detail);
      s.message = bounded(std::move(s.message));
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      std::string what;
      if constexpr (requires { request.op(); }) what = operator_name(request.op());
      spdlog::info("{} {} {}{} {:.1f} ms{}", name, what, code_name(s.code), detail, ms,
                   s.ok() ? "" : ": " + s.message);
      if (!s.ok()) return grpc::Status(grpc_code(s.code), s.message);
      *out = serialized(response);
      return grpc::Status::OK;
    };
    AddMethod(new grpc::internal::RpcServiceMethod(path, grpc::internal::RpcMethod::NORMAL_RPC,
                                                   new Handler(handle, this)));
  }

  // Registers the server-streaming method `path`, served by `serve(request,
  // send, call, detail)`, where send(response) writes one message and says
  // whether the client is still there.
  template <typename Request, typename Response, typename Serve>
  void streaming(const char* path, Serve serve) {
    const char* name = std::strrchr(path, '/') + 1;
    using Handler =
        grpc::internal::ServerStreamingHandler<CompilerService, grpc::ByteBuffer, grpc::ByteBuffer>;
    auto handle = [name, serve](CompilerService* self, grpc::ServerContext* ctx,
                                const grpc::ByteBuffer* in,
                                grpc::ServerWriter<grpc::ByteBuffer>* writer) {
      auto start = std::chrono::steady_clock::now();
      Request request;
      std::string detail;
      Status s = self->admit(ctx);
      if (s.ok()) s = parse_request(*in, &request);
      if (s.ok()) s = validate(request, self->ceilings_);
      int64_t sent = 0;
      std::function<bool(const Response&)> send = [&](const Response& r) {
        ++sent;
        return !ctx->IsCancelled() && writer->Write(serialized(r));
      };
      if (s.ok()) s = serve(request, send, call_options(ctx), detail);
      s.message = bounded(std::move(s.message));
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      spdlog::info("{}{} {} {} messages {:.1f} ms{}", name, detail, code_name(s.code), sent, ms,
                   s.ok() ? "" : ": " + s.message);
      if (!s.ok()) return grpc::Status(grpc_code(s.code), s.message);
      return grpc::Status::OK;
    };
    AddMethod(new grpc::internal::RpcServiceMethod(
        path, grpc::internal::RpcMethod::SERVER_STREAMING, new Handler(handle, this)));
  }

  // Registers the client-streaming method `path`, served by `serve(next, response, call,
  // detail)`, where next(request) reads the next message into `request` (each parsed and
  // validated as a unary request is) and says whether there was one; a message that does not
  // parse ends the call with its status.
  template <typename Request, typename Response, typename Serve>
  void uploading(const char* path, Serve serve) {
    const char* name = std::strrchr(path, '/') + 1;
    using Handler =
        grpc::internal::ClientStreamingHandler<CompilerService, grpc::ByteBuffer, grpc::ByteBuffer>;
    auto handle = [name, serve](CompilerService* self, grpc::ServerContext* ctx,
                                grpc::ServerReader<grpc::ByteBuffer>* reader,
                                grpc::ByteBuffer* out) {
      auto start = std::chrono::steady_clock::now();
      Response response;
      std::string detail;
      Status s = self->admit(ctx);
      Status read_problem;
      int64_t received = 0;
      std::function<bool(Request&)> next = [&](Request& r) {
        grpc::ByteBuffer in;
        if (!read_problem.ok() || !reader->Read(&in)) return false;
        ++received;
        read_problem = parse_request(in, &r);
        if (read_problem.ok()) read_problem = validate(r, self->ceilings_);
        if (!read_problem.ok())
          read_problem.message = fmt::format("message {}: {}", received, read_problem.message);
        return read_problem.ok();
      };
      if (s.ok()) s = serve(next, &response, call_options(ctx), detail);
      if (!read_problem.ok()) s = read_problem;
      s.message = bounded(std::move(s.message));
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      spdlog::info("{}{} {} {} messages {:.1f} ms{}", name, detail, code_name(s.code), received, ms,
                   s.ok() ? "" : ": " + s.message);
      if (!s.ok()) return grpc::Status(grpc_code(s.code), s.message);
      *out = serialized(response);
      return grpc::Status::OK;
    };
    AddMethod(new grpc::internal::RpcServiceMethod(
        path, grpc::internal::RpcMethod::CLIENT_STREAMING, new Handler(handle, this)));
  }

  // The token, and a client still there.
  Status admit(grpc::ServerContext* ctx) const {
    if (std::string problem = access_problem(ctx, access_); !problem.empty())
      return {Code::Unauthenticated, problem};
    if (ctx->IsCancelled()) return {Code::Cancelled, "the client cancelled the request"};
    return {};
  }

  server::Service& core_;
  Tuning& tuning_;
  Access access_;
  Ceilings ceilings_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_compiler_service(Service& core, Tuning& tuning, Access access,
                                                     Ceilings ceilings) {
  return std::make_unique<CompilerService>(core, tuning, std::move(access), ceilings);
}

}  // namespace kiln::server

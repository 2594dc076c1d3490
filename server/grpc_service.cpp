// kiln.v1.Compiler over the service core.
#include "grpc_service.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string_view>

#include "kiln/v1/service.grpc.pb.h"

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
  if (it == md.end())
    return "this kilnd requires a token: send the metadata 'authorization: Bearer TOKEN' "
           "(kiln --token-file FILE)";
  std::string_view value(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (!value.starts_with(kBearer) || !same_secret(value.substr(kBearer.size()), access.token))
    return "the request's token is not this kilnd's";
  return "";
}

class CompilerService final : public v1::Compiler::Service {
 public:
  CompilerService(server::Service& core, Access access) : core_(core), access_(std::move(access)) {}

  grpc::Status Check(grpc::ServerContext* ctx, const v1::CheckRequest* request,
                     v1::CheckResponse* response) override {
    return serve("Check", ctx, request->op(),
                 [&](std::string&) { return core_.check(*request, response, call_options(ctx)); });
  }
  grpc::Status Emit(grpc::ServerContext* ctx, const v1::EmitRequest* request,
                    v1::EmitResponse* response) override {
    return serve("Emit", ctx, request->op(),
                 [&](std::string&) { return core_.emit(*request, response, call_options(ctx)); });
  }
  grpc::Status Compile(grpc::ServerContext* ctx, const v1::CompileRequest* request,
                       v1::CompileResponse* response) override {
    return serve("Compile", ctx, request->op(), [&](std::string& detail) {
      Status s = core_.compile(*request, response, call_options(ctx));
      if (s.ok())
        detail = (response->cache_hit() ? " hit " : " miss ") + response->artifact().key();
      return s;
    });
  }
  grpc::Status Run(grpc::ServerContext* ctx, const v1::RunRequest* request,
                   v1::RunResponse* response) override {
    return serve("Run", ctx, request->op(), [&](std::string& detail) {
      Status s = core_.run(*request, response, call_options(ctx));
      if (s.ok()) detail = fmt::format(" run {:.1f} ms", response->run_ms());
      return s;
    });
  }

 private:
  template <typename Call>
  grpc::Status serve(const char* method, grpc::ServerContext* ctx, const v1::Operator& op,
                     Call call) {
    auto start = std::chrono::steady_clock::now();
    std::string detail;
    Status s;
    if (std::string problem = access_problem(ctx, access_); !problem.empty()) {
      s = Status{Code::Unauthenticated, problem};
    } else if (ctx->IsCancelled()) {
      s = Status{Code::Cancelled, "the client cancelled the request"};
    } else {
      s = call(detail);
    }
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("{} {} {}{} {:.1f} ms{}", method, operator_name(op), code_name(s.code), detail, ms,
                 s.ok() ? "" : ": " + s.message);
    return grpc::Status(grpc_code(s.code), s.message);
  }

  server::Service& core_;  // not Service: that is the base class here
  Access access_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_compiler_service(Service& core, Access access) {
  return std::make_unique<CompilerService>(core, std::move(access));
}

}  // namespace kiln::server

// kiln.v1.Compiler over the service core.
#include "grpc_service.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>

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

class CompilerService final : public v1::Compiler::Service {
 public:
  explicit CompilerService(server::Service& core) : core_(core) {}

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
    Status s = ctx->IsCancelled() ? Status{Code::Cancelled, "the client cancelled the request"}
                                  : call(detail);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    spdlog::info("{} {} {}{} {:.1f} ms{}", method, operator_name(op), code_name(s.code), detail, ms,
                 s.ok() ? "" : ": " + s.message);
    return grpc::Status(grpc_code(s.code), s.message);
  }

  server::Service& core_;  // not Service: that is the base class here
};

}  // namespace

std::unique_ptr<grpc::Service> make_compiler_service(Service& core) {
  return std::make_unique<CompilerService>(core);
}

}  // namespace kiln::server

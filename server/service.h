// kilnd's service core: the Compiler service of proto/kiln/v1/service.proto
// over the compile pipeline (kiln/compile.h), knowing nothing of gRPC. The
// gRPC handlers (grpc_service.cpp) translate a Status into a grpc::Status and
// do nothing else, so every behaviour is tested here without a network.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "artifacts.h"
#include "compile_cache.h"
#include "fleet.h"
#include "fleet_runner.h"
#include "kiln/limits.h"
#include "status.h"

namespace kiln::v1 {
class CheckRequest;
class CheckResponse;
class EmitRequest;
class EmitResponse;
class CompileRequest;
class CompileResponse;
class RunRequest;
class RunResponse;
class ListAgentsResponse;
class Device;
class MeasureRequest;
class MeasureResponse;
class StatBlobsRequest;
class StatBlobsResponse;
class BlobChunk;
class PutBlobResponse;
class GetBlobRequest;
class CompileOptions;
}  // namespace kiln::v1

namespace kiln::ir {
struct Graph;
}

namespace kiln::server {

class BlobStore;
class BlobShare;

// The most bytes one piece of a blob holds, uploaded or sent back.
inline constexpr size_t kMaxBlobPiece = size_t{1} << 20;

struct ServiceOptions {
  Limits limits{};
  // Bytes of artifacts the in-memory compile cache keeps (least recently
  // used first out); 0 keeps none.
  size_t cache_bytes = size_t{256} << 20;
  // kilnd's data directory: the compile cache's disk entries live under it
  // (DIR/cache/). Empty: memory only.
  std::string data_dir;
  // Requests compiling at once (0: one per core), and requests that may wait
  // for one of them; a request beyond both is RESOURCE_EXHAUSTED at once.
  int workers = 0;
  int queue_depth = 64;
  // Run: the runner program (empty: kiln-runner beside the running
  // executable), and the limits of the child process each request runs in.
  std::string runner_path{};
  int64_t run_timeout_ms = 60'000;                // wall clock, compilation included
  uint64_t run_memory_bytes = uint64_t{4} << 30;  // address space; 0: none
  // Measure: the agents (none: Measure is UNAVAILABLE), and the limits of a
  // job's child process when the request gives none.
  Fleet* fleet = nullptr;
  int64_t measure_timeout_ms = 60'000;
  uint64_t measure_memory_bytes = uint64_t{4} << 30;
  // Blobs (a model's file, a compiled model's weights) of at most this many bytes, kept in
  // DATA_DIR/blobs, or without a data directory in a folder of the system's temporary one that
  // goes with the service.
  uint64_t max_blob_bytes = uint64_t{4} << 30;
  // For tests: called by each request once it holds a worker.
  std::function<void()> on_admitted{};
};

class Service {
 public:
  // Throws std::runtime_error when the data directory cannot be used.
  explicit Service(ServiceOptions options = {});
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Each is safe to call from several threads at once.
  Status check(const v1::CheckRequest& request, v1::CheckResponse* response,
               const CallOptions& call = {});
  Status emit(const v1::EmitRequest& request, v1::EmitResponse* response,
              const CallOptions& call = {});
  Status compile(const v1::CompileRequest& request, v1::CompileResponse* response,
                 const CallOptions& call = {});
  // Compiles and runs in a child process (the runner) under the run limits:
  // a crash, a timeout or a runaway allocation fails this request only.
  Status run(const v1::RunRequest& request, v1::RunResponse* response,
             const CallOptions& call = {});

  // Content-addressed blobs (blob_store.h): which of some are here; one arriving in pieces
  // (`next` fills in the next piece, false after the last); one sent in pieces (`send` says
  // whether the client is still there).
  Status stat_blobs(const v1::StatBlobsRequest& request, v1::StatBlobsResponse* response);
  Status put_blob(const std::function<bool(v1::BlobChunk&)>& next, v1::PutBlobResponse* response,
                  const CallOptions& call = {});
  Status get_blob(const v1::GetBlobRequest& request,
                  const std::function<bool(const v1::BlobChunk&)>& send,
                  const CallOptions& call = {});

  // The agents connected, as ListAgents answers.
  Status list_agents(v1::ListAgentsResponse* response);
  // Compiles for an agent of request.key, measures there (check: against
  // the reference interpreter, here), returns the timings.
  Status measure(const v1::MeasureRequest& request, v1::MeasureResponse* response,
                 const CallOptions& call = {});

  // The agents Measure uses, once they listen (kilnd starts them after the service).
  void set_fleet(Fleet* fleet);

  // What tuning jobs (tuning.h) build and measure with: the compile cache
  // under the service's workers, and the agents.
  Artifacts& artifacts();
  FleetRunner& fleet_runner();
  const BlobStore& blobs() const;
  // Shares its blobs with other kilnd replicas through `share` (replica.h), outliving this.
  void share_blobs(BlobShare* share);
  // The measurements on `key` run on this machine (--local-agent): no request compiles while
  // one runs (Admission::Quiet).
  void quiet_measurements(const std::string& key);
  const Limits& limits() const;

  CacheStats cache_stats() const;

 private:
  // A graph (a model) compiled for the agent of request.key and measured there whole.
  void measure_model(const ir::Graph& g, const v1::MeasureRequest& request, const MeasureSpec& spec,
                     const CallOptions& call, v1::MeasureResponse* response);
  // A graph (a model) compiled whole: the shared object in the response, the weights a blob.
  void compile_model(const ir::Graph& g, const v1::CompileOptions& wire, const Limits& limits,
                     v1::CompileResponse* response);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::server

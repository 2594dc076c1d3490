// The gRPC face of the service core: one handler per method of
// kiln.v1.Compiler, each a translation of the request's context and the core's
// Status into gRPC's terms, with one log line per request.
#pragma once

#include <grpcpp/impl/service_type.h>

#include <memory>
#include <string>

#include "service.h"
#include "tuning.h"
#include "validate.h"

namespace kiln::server {

struct Access {
  // When set, every call must carry the metadata "authorization: Bearer
  // TOKEN" with this token; others are UNAUTHENTICATED.
  std::string token{};
};

// The kiln.v1.Compiler service over `core` and `tuning`, which must outlive it. Every request
// is checked against validate.h's bounds and `ceilings` before it is served.
std::unique_ptr<grpc::Service> make_compiler_service(Service& core, Tuning& tuning,
                                                     Access access = {}, Ceilings ceilings = {});

}  // namespace kiln::server

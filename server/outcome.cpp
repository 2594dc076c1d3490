// kilnd's Status and the tuner's Failure (outcome.h).
#include "outcome.h"

namespace kiln::server {

tuner::Failure failure_of(const Status& s) {
  using Kind = tuner::Failure::Kind;
  Kind kind = Kind::Internal;
  switch (s.code) {
    case Code::InvalidArgument:
    case Code::ResourceExhausted:
      kind = Kind::Compile;
      break;
    case Code::Cancelled:
    case Code::DeadlineExceeded:
      kind = Kind::Stopped;
      break;
    case Code::Unavailable:
    case Code::FailedPrecondition:
    case Code::NotFound:
      kind = Kind::Unavailable;
      break;
    case Code::Ok:
    case Code::Unauthenticated:
    case Code::Internal:
      break;
  }
  return tuner::Failure{kind, std::nullopt, s.message};
}

Status status_of(const tuner::Failure& f) {
  switch (f.kind) {
    case tuner::Failure::Kind::Compile:
      return {Code::InvalidArgument, f.message};
    case tuner::Failure::Kind::Busy:
      return {Code::ResourceExhausted, f.message};
    case tuner::Failure::Kind::Unavailable:
      return {Code::Unavailable, f.message};
    case tuner::Failure::Kind::Stopped:
      return {Code::Cancelled, f.message};
    case tuner::Failure::Kind::Internal:
      break;
  }
  return {Code::Internal, f.message};
}

}  // namespace kiln::server

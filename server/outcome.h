// kilnd's Status and the tuner's Failure (kiln/measure.h), each in the
// other's terms: how a refusal of the service core reaches a tuning job, and
// how a job's failure reaches its client.
#pragma once

#include "kiln/measure.h"
#include "status.h"

namespace kiln::server {

// INVALID_ARGUMENT and RESOURCE_EXHAUSTED are the point's (Compile: its
// launch or its inputs do not fit); CANCELLED and DEADLINE_EXCEEDED: Stopped;
// UNAVAILABLE, FAILED_PRECONDITION, NOT_FOUND: Unavailable; the rest Internal.
tuner::Failure failure_of(const Status& s);
Status status_of(const tuner::Failure& f);

}  // namespace kiln::server

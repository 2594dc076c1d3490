// Polyhedral scheduling: iteration domains and schedules as isl sets and maps,
// the schedule primitives, exact dependences and legality, and lowering to
// loop IR through isl's AST generator. No isl type appears in this header.
#pragma once

#include <memory>
#include <string>

#include "kiln/ir.h"
#include "kiln/limits.h"
#include "kiln/loop_ir.h"

namespace kiln::poly {

// A Func with its schedule applied and checked. Build one with schedule().
class ScheduledFunc {
 public:
  ~ScheduledFunc();
  ScheduledFunc(ScheduledFunc&&) noexcept;
  ScheduledFunc& operator=(ScheduledFunc&&) noexcept;

  const ir::Func& func() const;

  // `kiln emit --stage ir`: each computation's domain and accesses in isl notation.
  std::string describe_domains() const;
  // `kiln emit --stage schedule`: each computation's schedule map, loop names
  // and tags, and the dependences the schedule must respect.
  std::string describe_schedule() const;

  struct Impl;

 private:
  explicit ScheduledFunc(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend ScheduledFunc schedule(const ir::Func& f, bool apply_commands, const Limits& limits);
  friend ir::LoweredFunc lower(const ScheduledFunc& s);
};

// Builds the polyhedral model of f and, when apply_commands, applies its
// schedule commands in order. Throws CompileError: stage "schedule" for a
// command that is malformed (unknown loop, bad factor, ...), stage "legality"
// for one that breaks a dependence (the message names both computations, the
// dependence and the command).
// `limits` bounds the work: isl operations (for scheduling, and again for
// lowering) and the size of inlined values.
ScheduledFunc schedule(const ir::Func& f, bool apply_commands = true, const Limits& limits = {});

// Generates the loop nest with isl's AST builder and turns it into loop IR.
// Data-dependent bounds are read inside the loops that define them, never
// before those loops' own bounds are checked.
ir::LoweredFunc lower(const ScheduledFunc& s);

// The isl this process calls, as isl names itself
// ("isl-0.25-193-g8621c60c-IMath-32", the one libLLVM exports, which kiln
// links where it can: docs/pipeline.md). The loop nests kiln generates depend
// on it.
std::string isl_version_name();

}  // namespace kiln::poly

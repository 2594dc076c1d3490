// One semantic fuzz case: a generated program is either refused with a
// CompileError, or compiled and run three ways — the reference interpreter,
// the loop interpreter on the optimized loops, and the compiled kernel — on
// the same random inputs, which must agree: all three fail (an input or a
// division the program cannot take), or none does and the outputs match.
#pragma once

#include <cstdint>
#include <string>

#include "program_generator.h"

namespace kiln::fuzz {

struct Outcome {
  enum class Kind { Refused, Agreed, Disagreed } kind = Kind::Refused;
  bool runs_failed = false;  // Agreed: all three refused the run (a division by zero)
  std::string detail;        // Refused: the error; Disagreed: what differs
};

Outcome check_program(const Program& p, uint64_t seed);

// Stops the process with the program and what differs on stderr: the
// sanitizers and libFuzzer see a crash and keep the input.
[[noreturn]] void report_disagreement(const Program& p, const Outcome& o);

}  // namespace kiln::fuzz

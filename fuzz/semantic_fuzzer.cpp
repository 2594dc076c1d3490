// libFuzzer target: the semantic fuzzer, its choices from libFuzzer's bytes.
#include <cstddef>
#include <cstdint>

#include "semantic_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::fuzz::Choices c(data, size);
  kiln::fuzz::Program p = kiln::fuzz::generate_program(c);
  kiln::fuzz::Outcome o = kiln::fuzz::check_program(p, size);
  if (o.kind == kiln::fuzz::Outcome::Kind::Disagreed) kiln::fuzz::report_disagreement(p, o);
  return 0;
}

// libFuzzer target: any text given to the frontend gets a module or a
// CompileError, never a crash, a sanitizer report or another exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/error.h"
#include "kiln/frontend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    kiln::frontend::parse_module(text, "fuzz.kiln");
  } catch (const kiln::CompileError&) {
    // A clear error is the right answer to most texts.
  }
  return 0;
}

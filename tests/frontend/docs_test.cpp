// docs/language.md shows what the compiler accepts: every ```kiln block in it parses.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/frontend.h"

namespace kiln {
namespace {

struct Block {
  int line;  // of the opening fence
  std::string text;
};

std::vector<Block> kiln_blocks(const std::string& path) {
  std::ifstream in(path);
  std::vector<Block> blocks;
  std::string line;
  bool inside = false;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (!inside && line == "```kiln") {
      inside = true;
      blocks.push_back({n, ""});
    } else if (inside && line == "```") {
      inside = false;
    } else if (inside) {
      blocks.back().text += line + "\n";
    }
  }
  return blocks;
}

TEST(LanguageDoc, EveryKilnExampleParses) {
  std::string path = std::string(KILN_SOURCE_DIR) + "/docs/language.md";
  std::vector<Block> blocks = kiln_blocks(path);
  EXPECT_GE(blocks.size(), 15u) << "examples missing from " << path;
  for (const Block& b : blocks) {
    try {
      ir::Module m = frontend::parse_module(b.text, "language.md");
      EXPECT_FALSE(m.funcs.empty());
    } catch (const CompileError& e) {
      ADD_FAILURE() << "the example at docs/language.md:" << b.line
                    << " does not parse: " << e.what();
    }
  }
}

}  // namespace
}  // namespace kiln

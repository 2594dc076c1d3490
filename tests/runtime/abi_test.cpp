// The packed-argument ABI's types, and the symbol table a JIT defines the runtime from.
#include <gtest/gtest.h>
#include <kiln/runtime.h>

#include <cstring>
#include <map>
#include <string>

namespace kiln::testing {
namespace {

static_assert(sizeof(kiln_value) == 8, "one argument is one 8-byte slot");
static_assert(KILN_OK == 0 && KILN_ERR_ARGS == 1 && KILN_ERR_ALLOC == 2);

// What a generated entry point looks like: params first, then buffers.
extern "C" int32_t scale_entry(const kiln_value* args, int32_t nargs) {
  if (nargs != 3) return KILN_ERR_ARGS;
  const int64_t n = args[0].i64;
  const auto* in = static_cast<const float*>(args[1].ptr);
  auto* out = static_cast<float*>(args[2].ptr);
  for (int64_t i = 0; i < n; ++i) out[i] = 2 * in[i];
  return KILN_OK;
}

TEST(Abi, EntryPointsTakePackedArguments) {
  float in[4] = {1, 2, 3, 4};
  float out[4] = {};
  kiln_value args[3];
  args[0].i64 = 4;
  args[1].ptr = in;
  args[2].ptr = out;
  kiln_entry_fn entry = scale_entry;
  EXPECT_EQ(entry(args, 3), KILN_OK);
  EXPECT_EQ(out[3], 8);
  EXPECT_EQ(entry(args, 2), KILN_ERR_ARGS);
}

TEST(Abi, SymbolTableNamesEveryRuntimeFunction) {
  std::map<std::string, kiln_runtime_fn> table;
  for (const kiln_runtime_symbol* s = kiln_runtime_symbols(); s->name != nullptr; ++s) {
    EXPECT_TRUE(table.emplace(s->name, s->address).second) << "duplicate " << s->name;
  }
  const std::map<std::string, kiln_runtime_fn> expected = {
      {"kiln_parallel_launch", reinterpret_cast<kiln_runtime_fn>(kiln_parallel_launch)},
      {"kiln_runtime_threads", reinterpret_cast<kiln_runtime_fn>(kiln_runtime_threads)},
      {"kiln_runtime_default_threads",
       reinterpret_cast<kiln_runtime_fn>(kiln_runtime_default_threads)},
      {"kiln_runtime_set_threads", reinterpret_cast<kiln_runtime_fn>(kiln_runtime_set_threads)},
      {"kiln_runtime_pinned", reinterpret_cast<kiln_runtime_fn>(kiln_runtime_pinned)},
      {"kiln_now_ns", reinterpret_cast<kiln_runtime_fn>(kiln_now_ns)},
      {"kiln_cache_flush", reinterpret_cast<kiln_runtime_fn>(kiln_cache_flush)},
      {"kiln_alloc", reinterpret_cast<kiln_runtime_fn>(kiln_alloc)},
      {"kiln_free", reinterpret_cast<kiln_runtime_fn>(kiln_free)},
  };
  EXPECT_EQ(table, expected);
}

}  // namespace
}  // namespace kiln::testing

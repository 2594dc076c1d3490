// kiln's isl calls go to the isl its build chose (compiler/poly/CMakeLists.txt):
// the one libLLVM exports where it does, Debian's libisl otherwise. Two libraries
// in one process may export isl; the first on the link line would win without
// anyone having chosen it, and compile times (and the compiler version in
// every cache key and tuning record) depend on which.
#include <dlfcn.h>
#include <link.h>

#include <cctype>
#include <string>
#include <vector>

#include "kiln/compile.h"
#include "programs.h"

namespace kiln::testing {
namespace {

TEST(IslBinding, KilnRunsTheIslItsBuildChose) {
  void* chosen = dlopen(KILN_ISL_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(chosen, nullptr) << KILN_ISL_LIBRARY << " is not loaded in the process: " << dlerror();
  // The process resolves isl's functions to the chosen library's...
  for (const char* fn : {"isl_ctx_alloc", "isl_union_map_read_from_str", "isl_version"}) {
    SCOPED_TRACE(fn);
    void* in_chosen = dlsym(chosen, fn);
    ASSERT_NE(in_chosen, nullptr) << KILN_ISL_LIBRARY << " exports no " << fn;
    EXPECT_EQ(dlsym(RTLD_DEFAULT, fn), in_chosen);
  }
  // ...and the version kiln reports (compiler_version, in cache keys and
  // records) is that library's.
  auto version = reinterpret_cast<const char* (*)()>(dlsym(chosen, "isl_version"));
  std::string expected = version();
  while (!expected.empty() && std::isspace(static_cast<unsigned char>(expected.back())))
    expected.pop_back();
  EXPECT_EQ(poly::isl_version_name(), expected);
  EXPECT_NE(compiler_version().find(expected), std::string::npos) << compiler_version();
  dlclose(chosen);
}

// The path of the object that defines `symbol` as found through `handle`.
std::string defining_object(void* handle, const char* symbol) {
  void* address = dlsym(handle, symbol);
  Dl_info info{};
  if (!address || !dladdr(address, &info) || !info.dli_fname) return "";
  return info.dli_fname;
}

// No second isl is loaded: every loaded object that reaches isl reaches the
// chosen library's (two builds of isl in one process would hand each other
// objects whose integers they store differently).
TEST(IslBinding, NoOtherIslIsLoaded) {
  void* chosen = dlopen(KILN_ISL_LIBRARY, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(chosen, nullptr) << dlerror();
  const std::string expected = defining_object(chosen, "isl_ctx_alloc");
  ASSERT_FALSE(expected.empty());
  std::vector<std::string> objects;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        if (info->dlpi_name && *info->dlpi_name)
          static_cast<std::vector<std::string>*>(out)->push_back(info->dlpi_name);
        return 0;
      },
      &objects);
  EXPECT_GT(objects.size(), 1u);
  for (const std::string& object : objects) {
    void* h = dlopen(object.c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (!h) continue;
    for (const char* fn : {"isl_ctx_alloc", "isl_map_get_range_simple_fixed_box_hull"}) {
      std::string found = defining_object(h, fn);
      if (!found.empty()) {
        EXPECT_EQ(found, expected) << object << " reaches " << fn << " in " << found;
      }
    }
    dlclose(h);
  }
  dlclose(chosen);
}

}  // namespace
}  // namespace kiln::testing

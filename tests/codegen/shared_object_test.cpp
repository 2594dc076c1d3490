// Shared objects and artifacts: for x86-64 and aarch64 every example links into an ELF shared
// object of the right machine that needs no library and imports only the runtime; the x86-64
// one, loaded with dlopen, computes what the reference interpreter computes; the artifact
// describes itself and is keyed stably.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "example_cases.h"
#include "kiln/codegen.h"
#include "kiln/compile.h"
#include "kiln/digest.h"
#include "kiln/runtime.h"
#include "programs.h"

namespace kiln::testing {
namespace {

constexpr uint16_t kElfX86_64 = 62, kElfAarch64 = 183;
constexpr uint16_t kElfSharedObject = 3;  // ET_DYN

ir::LoweredFunc lowered_example(const ExampleCase& c) {
  return poly::lower(poly::schedule(parse_one(read_example(c.example), c.params.front())));
}

codegen::Options for_triple(const std::string& triple) {
  codegen::Options o;
  o.target = codegen::Target{triple, "", ""};
  return o;
}

// e_type and e_machine of a little-endian 64-bit ELF file.
struct ElfHeader {
  bool elf64_le = false;
  uint16_t type = 0, machine = 0;
};
ElfHeader elf_header(const std::vector<char>& bytes) {
  ElfHeader h;
  if (bytes.size() < 64 || std::memcmp(bytes.data(),
                                       "\x7f"
                                       "ELF",
                                       4) != 0)
    return h;
  h.elf64_le = bytes[4] == 2 && bytes[5] == 1;
  std::memcpy(&h.type, bytes.data() + 16, 2);
  std::memcpy(&h.machine, bytes.data() + 18, 2);
  return h;
}

// A file under the test's temporary folder, removed afterwards.
struct TempSo {
  std::string path;
  explicit TempSo(const std::vector<char>& bytes) {
    path = ::testing::TempDir() + "kiln_so_test_XXXXXX";
    int fd = mkstemp(path.data());
    if (fd >= 0) {
      EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
      close(fd);
    }
  }
  ~TempSo() { unlink(path.c_str()); }
};

// The output of a shell command (empty when it cannot run).
std::string shell(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
    pclose(p);
  }
  return out;
}

bool have_tool(const std::string& name) {
  return !shell("command -v " + name + " 2>/dev/null").empty();
}

const std::set<std::string> kRuntimeSymbols = {"kiln_parallel_launch", "kiln_alloc", "kiln_free"};

class SharedObjects : public ::testing::TestWithParam<ExampleCase> {};

TEST_P(SharedObjects, LinkForBothTargetsAndImportOnlyTheRuntime) {
  ir::LoweredFunc f = lowered_example(GetParam());
  for (auto [triple, machine] : {std::pair<std::string, uint16_t>{"x86_64-linux-gnu", kElfX86_64},
                                 {"aarch64-linux-gnu", kElfAarch64}}) {
    SCOPED_TRACE(triple);
    std::vector<char> so = codegen::compile_shared_object(f, for_triple(triple));
    ElfHeader h = elf_header(so);
    EXPECT_TRUE(h.elf64_le);
    EXPECT_EQ(h.type, kElfSharedObject);
    EXPECT_EQ(h.machine, machine);
    for (const std::string& name : codegen::shared_object_imports(so))
      EXPECT_TRUE(kRuntimeSymbols.count(name)) << "imports " << name;

    // The same, as binutils and LLVM's tools see it.
    TempSo file(so);
    if (have_tool("readelf")) {
      EXPECT_EQ(shell("readelf -d " + file.path + " | grep NEEDED"), "") << "needs a library";
      std::string header = shell("readelf -h " + file.path);
      EXPECT_NE(header.find(machine == kElfX86_64 ? "X86-64" : "AArch64"), std::string::npos)
          << header;
    }
    if (have_tool("llvm-nm-19")) {
      std::string undefined =
          shell("llvm-nm-19 -D --undefined-only --format=just-symbols " + file.path);
      std::istringstream in(undefined);
      for (std::string name; std::getline(in, name);) {
        if (!name.empty()) {
          EXPECT_TRUE(kRuntimeSymbols.count(name)) << "llvm-nm: " << name;
        }
      }
      std::string defined =
          shell("llvm-nm-19 -D --defined-only --format=just-symbols " + file.path);
      EXPECT_EQ(defined, codegen::entry_symbol(f) + "\n") << "exports more than the entry";
    }
  }
}

// The host's shared object, loaded with dlopen into this process (which exports the runtime),
// computes what the reference interpreter computes.
TEST_P(SharedObjects, HostSharedObjectMatchesTheReference) {
  const ExampleCase& c = GetParam();
  ir::Func f = parse_one(read_example(c.example), c.params.front());
  ir::LoweredFunc lowered = poly::lower(poly::schedule(f));
  TempSo file(codegen::compile_shared_object(lowered, {}));
  // Referencing the runtime's symbol table links all of the runtime into this program, and
  // ENABLE_EXPORTS puts it in the dynamic symbol table, where the shared object finds it.
  ASSERT_NE(kiln_runtime_symbols(), nullptr);
  void* so = dlopen(file.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(so, nullptr) << dlerror();
  void* sym = dlsym(so, codegen::entry_symbol(lowered).c_str());
  ASSERT_NE(sym, nullptr);
  kiln_entry_fn entry;
  std::memcpy(&entry, &sym, sizeof entry);

  Bindings in = interp::random_bindings(f, interp::param_values(f, c.runtime), 5);
  Bindings expected = in, actual = in;
  interp::run_reference(f, expected);
  std::vector<kiln_value> args = codegen::pack_arguments(lowered, actual);
  EXPECT_EQ(entry(args.data(), static_cast<int32_t>(args.size())), KILN_OK);
  EXPECT_EQ(entry(args.data(), static_cast<int32_t>(args.size()) + 1), KILN_ERR_ARGS);
  interp::Mismatch mm = interp::compare_outputs(f, expected, actual);
  EXPECT_TRUE(mm.ok) << mm.describe();
  dlclose(so);
}

INSTANTIATE_TEST_SUITE_P(Examples, SharedObjects, ::testing::ValuesIn(example_cases()),
                         [](const ::testing::TestParamInfo<ExampleCase>& info) {
                           return info.param.example;
                         });

// A loop that only zeroes a buffer is what LLVM likes to turn into a memset call; the shared
// object must not need one.
TEST(SharedObject, ZeroingAndCopyingLoopsCallNoLibc) {
  const char* program = R"(func zero_copy {
    param N = 4096;
    input a : f32[N];
    output z : f32[N];
    output c : f32[N];
    compute zero(i) in 0 <= i < N: z[i] = 0.0;
    compute copy(i) in 0 <= i < N: c[i] = a[i];
  })";
  ir::LoweredFunc f = poly::lower(poly::schedule(parse_one(program)));
  for (const char* triple : {"x86_64-linux-gnu", "aarch64-linux-gnu"}) {
    std::vector<std::string> imports =
        codegen::shared_object_imports(codegen::compile_shared_object(f, for_triple(triple)));
    EXPECT_TRUE(imports.empty()) << triple << " imports " << imports.front();
  }
}

// Math that LLVM cannot inline becomes a libm call: allowed, and listed, so that whoever
// loads the kernel knows to provide it.
TEST(SharedObject, MathIntrinsicsImportLibm) {
  const char* program = R"(func softplus {
    param N = 16;
    input a : f32[N];
    output b : f32[N];
    compute s(i) in 0 <= i < N: b[i] = log(1.0 + exp(a[i]));
  })";
  ir::LoweredFunc f = poly::lower(poly::schedule(parse_one(program)));
  codegen::Artifact a = codegen::compile_artifact(f, for_triple("aarch64-linux-gnu"), "");
  EXPECT_EQ(a.imports, (std::vector<std::string>{"expf", "logf"}));
}

TEST(Artifact, DescribesItsTargetEntryAndArguments) {
  const char* program = R"(func seg {
    param m;
    param nnz = 20;
    constraint m > 0;
    input offsets : i32[m + 1] in [0, nnz] sorted;
    input x : f64[nnz];
    output y : f64[m];
    compute y_init(i) in 0 <= i < m: y[i] = 0.0;
    compute acc(i, j) in 0 <= i < m, offsets[i] <= j < offsets[i + 1]: y[i] += x[j];
    schedule { acc.after(y_init, i); y_init.tag(i, parallel); acc.tag(i, parallel); }
  })";
  CompileRequest r{.func = parse_one(program), .output = CompileOutput::Artifact};
  r.options.target = Target{"aarch64-linux-gnu", "neoverse-n1", ""};
  r.options.opt_level = 2;
  CompileResult result = compile(r);
  const ir::LoweredFunc& f = result.optimized;
  const codegen::Artifact& a = *result.artifact;
  EXPECT_EQ(a.name, "seg");
  EXPECT_EQ(a.triple, "aarch64-linux-gnu");
  EXPECT_EQ(a.cpu, "neoverse-n1");
  EXPECT_EQ(a.opt_level, 2);
  EXPECT_EQ(a.entry, codegen::entry_symbol(f));
  ASSERT_EQ(a.args.size(), 4u);
  EXPECT_EQ(a.args[0].kind, codegen::ArtifactArg::Kind::Param);
  EXPECT_EQ(a.args[0].name, "m");
  EXPECT_EQ(a.args[1].kind, codegen::ArtifactArg::Kind::Buffer);
  EXPECT_EQ(a.args[1].name, "offsets");
  EXPECT_EQ(a.args[1].dtype, ir::DType::I32);
  EXPECT_EQ(a.args[1].role, ir::BufKind::Input);
  EXPECT_EQ(a.args[1].shape, (std::vector<std::string>{"m + 1"}));
  EXPECT_EQ(a.args[2].shape, (std::vector<std::string>{"20"}));  // compile-time params folded
  EXPECT_EQ(a.args[3].name, "y");
  EXPECT_EQ(a.args[3].role, ir::BufKind::Output);
  EXPECT_EQ(a.imports, (std::vector<std::string>{"kiln_parallel_launch"}));
  EXPECT_FALSE(a.fast_math);
  EXPECT_EQ(a.key, result.key);
  EXPECT_EQ(a.key.size(), 64u);
  EXPECT_EQ(a.code_sha256, sha256_hex(std::string_view(a.code.data(), a.code.size())));

  std::string json = a.metadata_json();
  for (const char* part :
       {R"("name":"seg")", R"("triple":"aarch64-linux-gnu")", R"("cpu":"neoverse-n1")",
        R"("opt_level":2)", R"({"kind":"param","name":"m","dtype":"i64"})",
        R"({"kind":"buffer","name":"offsets","dtype":"i32","role":"input","shape":["m + 1"]})",
        R"("imports":["kiln_parallel_launch"])", R"("fast_math":false)",
        // What status 16 means: offsets are checked at the entry, as the bounds proof needs.
        R"("checks":[{"status":16,"kind":"input_spec","subject":"offsets","message":"input )"
        R"(offsets breaks its value spec in [0, nnz] sorted"}])"}) {
    EXPECT_NE(json.find(part), std::string::npos) << part << " not in " << json;
  }
  EXPECT_NE(json.find("\"key\":\"" + a.key + "\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"code_sha256\":\"" + a.code_sha256 + "\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"entry\":\"" + a.entry + "\""), std::string::npos) << json;
}

TEST(Artifact, KeyAndCodeAreStableAndTellTargetsApart) {
  const ExampleCase& c = example_cases().front();
  auto artifact = [&](const std::string& triple, int opt_level) {
    CompileRequest r{.func = parse_one(read_example(c.example), c.params.front()),
                     .output = CompileOutput::Artifact};
    r.options.target = Target{triple, "", ""};
    r.options.opt_level = opt_level;
    return *compile(r).artifact;
  };
  codegen::Artifact a1 = artifact("aarch64-linux-gnu", 3);
  codegen::Artifact a2 = artifact("aarch64-linux-gnu", 3);
  codegen::Artifact x86 = artifact("x86_64-linux-gnu", 3);
  codegen::Artifact a0 = artifact("aarch64-linux-gnu", 0);
  EXPECT_EQ(a1.code, a2.code) << "linking is not deterministic";
  EXPECT_EQ(a1.code_sha256, a2.code_sha256);
  EXPECT_EQ(a1.key, a2.key);
  EXPECT_NE(a1.key, x86.key);
  EXPECT_NE(a1.code_sha256, x86.code_sha256);
  EXPECT_NE(a1.key, a0.key);
}

// lld resets LLVM's process-wide options each time it links, among them the
// ones kiln sets (which code-generation passes run): the code of a kernel
// compiled after a link must be the code it had before it.
TEST(Artifact, LinkingLeavesTheNextCompilationsCodeAsItWas) {
  const ExampleCase& c = example_cases().front();
  auto compile_to = [&](CompileOutput output) {
    CompileRequest r{.func = parse_one(read_example(c.example), c.params.front()),
                     .output = output};
    r.options.target = Target{"aarch64-linux-gnu", "", ""};
    return compile(r);
  };
  std::string before = compile_to(CompileOutput::Assembly).text;
  codegen::Artifact first = *compile_to(CompileOutput::Artifact).artifact;
  std::string after = compile_to(CompileOutput::Assembly).text;
  codegen::Artifact second = *compile_to(CompileOutput::Artifact).artifact;
  EXPECT_EQ(before, after) << "a link changed how later kernels are compiled";
  EXPECT_EQ(first.code_sha256, second.code_sha256);
}

TEST(SharedObject, UnknownTripleIsACompileError) {
  ir::LoweredFunc f = lowered_example(example_cases().front());
  EXPECT_THROW(codegen::compile_shared_object(f, for_triple("nonsense-unknown-none")),
               CompileError);
}

}  // namespace
}  // namespace kiln::testing

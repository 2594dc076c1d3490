// ONNX's own operator tests (Debian's libonnx-testdata: data/node/test_*/
// model.onnx with test_data_set_*/input_*.pb and output_*.pb) through kiln:
// every test whose ops kiln imports is imported, compiled for this machine,
// run on its inputs and compared with its expected outputs.
//
// usage: onnx_conformance DATA_DIR [--expect FILE] [--write FILE] [--only SUBSTRING]
//
// Prints one line per test that does not pass, with the reason, and the
// count: "N of M node tests for ops kiln supports pass". With --expect, exits
// 1 when a test FILE lists (one name per line) does not pass: the suite may
// grow, never shrink. --write writes the passing tests' names to FILE.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "kiln/error.h"
#include "kiln/onnx.h"
#include "kiln/run.h"
#include "onnx/onnx_pb.h"

namespace fs = std::filesystem;

namespace {

// Whether every node of the model is an op kiln imports (a test of another op
// is not counted).
bool ops_supported(const std::string& model, const std::set<std::string>& supported,
                   std::string& ops) {
  onnx::ModelProto m;
  if (!m.ParseFromString(model)) return false;
  bool all = true;
  std::set<std::string> seen;
  for (const onnx::NodeProto& n : m.graph().node()) {
    seen.insert(n.op_type());
    all = all && supported.count(n.op_type()) != 0;
  }
  for (const std::string& s : seen) ops += (ops.empty() ? "" : ",") + s;
  return all;
}

// "" when got matches want within ONNX's own tolerance (rtol 1e-3, atol 1e-7,
// plus a little for float32 sums), else what differs.
std::string compare(const kiln::HostBuffer& want, const kiln::HostBuffer& got) {
  if (want.size() != got.size()) {
    return fmt::format("{} values where {} are expected", got.size(), want.size());
  }
  for (int64_t k = 0; k < want.size(); ++k) {
    double w = want.get_f(k), g = got.get_f(k);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && w == g) continue;
    if (!(std::abs(w - g) <= 1e-5 + 1e-3 * std::abs(w))) {
      return fmt::format("value {} is {} where {} is expected", k, g, w);
    }
  }
  return "";
}

// The bytes of a file ("" when it cannot be read).
std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// "" when the test passes, else why not. `model` is the bytes of its model.onnx, read once.
std::string run_test(const fs::path& dir, const std::string& model) {
  kiln::ir::Module m = kiln::onnx::import_model(model, (dir / "model.onnx").string());
  const kiln::ir::Graph& g = m.graphs.at(0);
  std::vector<std::string> inputs;
  for (const kiln::ir::GraphTensor& t : g.tensors) {
    if (t.kind == kiln::ir::TensorKind::Input) inputs.push_back(t.name);
  }
  for (const fs::directory_entry& set : fs::directory_iterator(dir)) {
    if (!set.is_directory() || !set.path().filename().string().starts_with("test_data_set_"))
      continue;
    kiln::RunSpec spec;
    for (size_t k = 0; k < inputs.size(); ++k) {
      fs::path p = set.path() / fmt::format("input_{}.pb", k);
      spec.inputs[inputs[k]] = kiln::onnx::read_tensor_file(p.string()).second;
    }
    kiln::GraphRunOutcome r = kiln::run_graph(g, spec);
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      fs::path p = set.path() / fmt::format("output_{}.pb", k);
      kiln::HostBuffer want = kiln::onnx::read_tensor_file(p.string()).second;
      std::string diff = compare(want, r.tensors.at(g.outputs[k]));
      if (!diff.empty()) {
        return fmt::format("{}, output {}: {}", set.path().filename().string(), k, diff);
      }
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr,
               "usage: onnx_conformance DATA_DIR [--expect FILE] [--write FILE] "
               "[--only SUBSTRING]\n");
    return 2;
  }
  fs::path data = argv[1];
  std::string expect_file, write_file, only;
  for (int k = 2; k + 1 < argc; k += 2) {
    std::string a = argv[k];
    if (a == "--expect") expect_file = argv[k + 1];
    if (a == "--write") write_file = argv[k + 1];
    if (a == "--only") only = argv[k + 1];
  }
  if (!fs::is_directory(data / "node")) {
    fmt::print(stderr, "{}: no node/ directory (install libonnx-testdata)\n", data.string());
    return 2;
  }
  const std::vector<std::string>& ops_list = kiln::onnx::supported_op_types();
  std::set<std::string> supported(ops_list.begin(), ops_list.end());
  std::vector<fs::path> tests;
  for (const fs::directory_entry& e : fs::directory_iterator(data / "node")) {
    if (e.is_directory() && e.path().filename().string().find(only) != std::string::npos)
      tests.push_back(e.path());
  }
  std::sort(tests.begin(), tests.end());
  std::set<std::string> passed;
  size_t counted = 0;
  for (const fs::path& t : tests) {
    std::string ops;
    std::string model = read_bytes(t / "model.onnx");
    if (!ops_supported(model, supported, ops)) continue;
    ++counted;
    std::string name = t.filename().string();
    std::string why;
    try {
      why = run_test(t, model);
    } catch (const kiln::CompileError& e) {
      why = e.what();
    } catch (const std::exception& e) {
      why = std::string("internal error: ") + e.what();
    }
    if (why.empty()) {
      passed.insert(name);
    } else {
      fmt::print("not passing {} ({}): {}\n", name, ops, why);
    }
  }
  fmt::print("{} of {} node tests for ops kiln supports pass ({} tests in {})\n", passed.size(),
             counted, tests.size(), (data / "node").string());
  if (!write_file.empty()) {
    std::ofstream out(write_file);
    for (const std::string& p : passed) out << p << "\n";
  }
  int status = 0;
  if (!expect_file.empty()) {
    std::ifstream in(expect_file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (!passed.count(line)) {
        fmt::print("REGRESSION: {} passed before and does not now\n", line);
        status = 1;
      }
    }
  }
  return status;
}

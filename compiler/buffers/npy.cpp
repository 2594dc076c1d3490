// HostBuffers to and from NumPy's .npy files (format version 1.0).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "kiln/buffers.h"

namespace kiln {

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw CompileError(ErrorStage::Interp, SourceLoc{path, 0, 0}, "not a .npy kiln reads: " + why);
}

const char* descr(ir::DType t) {
  switch (t) {
    case ir::DType::Bool:
      return "|b1";
    case ir::DType::I32:
      return "<i4";
    case ir::DType::I64:
      return "<i8";
    case ir::DType::F32:
      return "<f4";
    case ir::DType::F64:
      return "<f8";
  }
  return "?";
}

// The header of the .npy file `in` reads, checked; `in` is left at the data.
std::pair<ir::DType, std::vector<int64_t>> read_header(std::istream& in, const std::string& path) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(path, "no .npy magic");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    unsigned char l[2];
    if (!in.read(reinterpret_cast<char*>(l), 2)) bad(path, "truncated header");
    header_len = l[0] | (l[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    unsigned char l[4];
    if (!in.read(reinterpret_cast<char*>(l), 4)) bad(path, "truncated header");
    header_len = l[0] | (l[1] << 8) | (l[2] << 16) | (static_cast<uint32_t>(l[3]) << 24);
  } else {
    bad(path, fmt::format("format version {}", static_cast<int>(magic[6])));
  }
  if (header_len > 1 << 20) bad(path, "a header over 1 MiB");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) bad(path, "truncated header");
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    bad(path, "no descr in the header");
  std::string d = m[1];
  ir::DType t;
  if (d == "|b1") {
    t = ir::DType::Bool;
  } else if (d == "<i4") {
    t = ir::DType::I32;
  } else if (d == "<i8") {
    t = ir::DType::I64;
  } else if (d == "<f4") {
    t = ir::DType::F32;
  } else if (d == "<f8") {
    t = ir::DType::F64;
  } else {
    bad(path, "dtype '" + d + "' (kiln reads bool, int32, int64, float32, float64, little-endian)");
  }
  if (!std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*(True|False))")) ||
      m[1] == "True") {
    bad(path, "not in C order (save np.ascontiguousarray(a))");
  }
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    bad(path, "no shape in the header");
  std::vector<int64_t> shape;
  std::string dims = m[1];
  static const std::regex digits(R"(\d+)");
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), digits);
       it != std::sregex_iterator(); ++it) {
    shape.push_back(std::stoll(it->str()));
  }
  return {t, shape};
}

}  // namespace

HostBuffer read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CompileError(ErrorStage::Interp, SourceLoc{path, 0, 0}, "cannot open the file");
  auto [t, shape] = read_header(in, path);
  HostBuffer b(t, shape);
  size_t bytes = static_cast<size_t>(b.size()) * ir::dtype_bytes(t);
  if (bytes && !in.read(static_cast<char*>(b.data()), static_cast<std::streamsize>(bytes))) {
    bad(path, fmt::format("its data is shorter than {} bytes of shape ({})", bytes,
                          fmt::join(shape, ", ")));
  }
  return b;
}

std::vector<int64_t> npy_shape(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CompileError(ErrorStage::Interp, SourceLoc{path, 0, 0}, "cannot open the file");
  return read_header(in, path).second;
}

void write_npy(const HostBuffer& b, const std::string& path) {
  std::string shape = fmt::format("{}", fmt::join(b.shape(), ", "));
  if (b.shape().size() == 1) shape += ",";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   descr(b.dtype()), shape);
  // Magic, version, length, header: padded with spaces to a multiple of 64, ending in \n.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  uint16_t len = static_cast<uint16_t>(header.size());
  char pre[10] = {'\x93',
                  'N',
                  'U',
                  'M',
                  'P',
                  'Y',
                  1,
                  0,
                  static_cast<char>(len & 0xff),
                  static_cast<char>(len >> 8)};
  out.write(pre, 10);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(
      static_cast<const char*>(b.data()),
      static_cast<std::streamsize>(static_cast<size_t>(b.size()) * ir::dtype_bytes(b.dtype())));
  if (!out) throw CompileError(ErrorStage::Output, SourceLoc{path, 0, 0}, "cannot write the file");
}

}  // namespace kiln

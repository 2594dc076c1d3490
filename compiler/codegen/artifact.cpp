// Artifacts: a shared object with the metadata that says how to call it, and its content hash.
#include <cstdio>
#include <string_view>

#include "kiln/codegen.h"

namespace kiln::codegen {
namespace {

// FNV-1a, 64 bits: simple, stable across machines and compilers, good enough
// to tell artifacts apart (it is a cache key, not a signature).
uint64_t fnv1a(std::string_view bytes, uint64_t h = 0xcbf29ce484222325ULL) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// A JSON string literal. Names, triples and shape expressions are ASCII; any
// control character is escaped all the same.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

template <typename T, typename F>
std::string array(const std::vector<T>& items, F&& item) {
  std::string out = "[";
  for (size_t k = 0; k < items.size(); ++k) out += (k ? "," : "") + item(items[k]);
  return out + "]";
}

std::string arg_json(const ArtifactArg& a) {
  std::string out = "{\"kind\":";
  out += a.kind == ArtifactArg::Kind::Param ? "\"param\"" : "\"buffer\"";
  out += ",\"name\":" + quote(a.name);
  out += ",\"dtype\":" + quote(ir::dtype_name(a.dtype));
  if (a.kind == ArtifactArg::Kind::Buffer) {
    out += ",\"role\":" + quote(ir::buf_kind_name(a.role));
    out += ",\"shape\":" + array(a.shape, [](const std::string& e) { return quote(e); });
  }
  return out + "}";
}

// Everything but the hash, which is computed over this and the code.
std::string metadata_without_hash(const Artifact& a) {
  std::string out = "{";
  out += "\"name\":" + quote(a.name);
  out += ",\"triple\":" + quote(a.triple);
  out += ",\"cpu\":" + quote(a.cpu);
  out += ",\"features\":" + quote(a.features);
  out += ",\"opt_level\":" + std::to_string(a.opt_level);
  out += ",\"fast_math\":" + std::string(a.fast_math ? "true" : "false");
  out += ",\"entry\":" + quote(a.entry);
  out += ",\"abi\":\"kiln_value\"";
  out += ",\"args\":" + array(a.args, arg_json);
  out += ",\"imports\":" + array(a.imports, [](const std::string& s) { return quote(s); });
  out += ",\"size\":" + std::to_string(a.code.size());
  return out;
}

}  // namespace

std::string Artifact::metadata_json() const {
  return metadata_without_hash(*this) + ",\"hash\":" + quote(hash) + "}";
}

Artifact compile_artifact(const ir::LoweredFunc& f, const Options& opts) {
  Artifact a;
  a.name = f.name;
  a.triple = opts.target.triple;
  a.cpu = opts.target.cpu;
  a.features = opts.target.features;
  a.opt_level = opts.opt_level;
  a.fast_math = opts.fast_math;
  a.entry = entry_symbol(f);
  for (const std::string& p : f.params) {
    ArtifactArg arg;
    arg.kind = ArtifactArg::Kind::Param;
    arg.name = p;
    a.args.push_back(arg);
  }
  for (const ir::Buf& b : f.args) {
    ArtifactArg arg;
    arg.kind = ArtifactArg::Kind::Buffer;
    arg.name = b.name;
    arg.dtype = b.dtype;
    arg.role = b.kind;
    for (const ir::Expr& e : b.shape) arg.shape.push_back(ir::to_string(e));
    a.args.push_back(arg);
  }
  a.code = compile_shared_object(f, opts);
  a.imports = shared_object_imports(a.code);
  uint64_t h = fnv1a(metadata_without_hash(a));
  a.hash = hex64(fnv1a(std::string_view(a.code.data(), a.code.size()), h));
  return a;
}

}  // namespace kiln::codegen

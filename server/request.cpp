// From the wire to the compile pipeline (request.h).
#include "request.h"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>

#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include "blob_store.h"
#include "kiln/buffers.h"
#include "kiln/frontend.h"
#include "kiln/interp.h"
#include "kiln/onnx.h"
#include "kiln/operator_def.h"
#include "kiln/v1/service.pb.h"
#include "validate.h"

namespace kiln::server {

const char* code_name(Code c) {
  switch (c) {
    case Code::Ok:
      return "OK";
    case Code::InvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::ResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::DeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::Cancelled:
      return "CANCELLED";
    case Code::Unauthenticated:
      return "UNAUTHENTICATED";
    case Code::NotFound:
      return "NOT_FOUND";
    case Code::FailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::Unavailable:
      return "UNAVAILABLE";
    case Code::Internal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

bool parse_message(std::string_view bytes, google::protobuf::MessageLite& m, int extra) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetRecursionLimit(kMaxRequestNesting + extra);
  return m.ParseFromCodedStream(&in) && in.ConsumedEntireMessage();
}

void wire_check(const interp::Mismatch& m, v1::OutputCheck* c) {
  c->set_ok(m.ok);
  c->set_buffer(m.buffer);
  for (int64_t i : m.index) c->add_index(i);
  c->set_expected(m.expected);
  c->set_actual(m.actual);
  c->set_abs_error(m.abs_error);
  c->set_rel_error(m.rel_error);
  c->set_problem(m.problem);
  c->set_message(m.describe());
}

void refuse(Code code, std::string message) { throw Refusal{Status{code, std::move(message)}}; }

Unit resolve_unit(const v1::Operator& op, const Limits& limits, const BlobStore* blobs) {
  Unit u;
  switch (op.definition_case()) {
    case v1::Operator::kModel: {
      const v1::ModelRef& m = op.model();
      if (blobs == nullptr)
        refuse(Code::InvalidArgument, "op.model: this method does not take a model");
      std::string path = blobs->path(m.sha256(), "op.model.sha256");
      std::ifstream in(path, std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (!in.good() && !in.eof()) refuse(Code::Internal, "cannot read blob " + m.sha256());
      onnx::ImportOptions io;
      io.dims = std::map<std::string, int64_t>(m.dims().begin(), m.dims().end());
      std::string file = m.filename().empty() ? "<model>" : m.filename();
      u.module = onnx::import_model(bytes, file, io);
      if (u.module.graphs.size() != 1) refuse(Code::Internal, file + ": the import made no graph");
      u.graph = u.module.graphs.front();
      return u;
    }
    case v1::Operator::kDef:
      u.func = frontend::parse_operator_def(op.def(), limits);
      return u;
    case v1::Operator::kGraph: {
      u.module = frontend::parse_graph_def(op.graph(), limits);
      if (u.module.graphs.size() != 1)
        refuse(Code::InvalidArgument, "op.graph: the definition makes no graph");
      u.graph = u.module.graphs.front();
      return u;
    }
    case v1::Operator::kSource: {
      const v1::SourceText& s = op.source();
      std::string file = s.filename().empty() ? "<request>" : s.filename();
      u.module = frontend::parse_module(s.text(), file, limits);
      const ir::Module& m = u.module;
      if (!s.name().empty()) {
        if (const ir::Func* f = m.find(s.name())) {
          u.func = *f;
        } else if (const ir::Graph* g = m.find_graph(s.name())) {
          u.graph = *g;
        } else {
          std::string known;
          for (const auto& f : m.funcs) known += (known.empty() ? "" : ", ") + f.name;
          for (const auto& g : m.graphs) known += (known.empty() ? "graph " : ", graph ") + g.name;
          refuse(Code::InvalidArgument,
                 fmt::format("{}: no func or graph {} in the source (it has: {})", file,
                             quoted(s.name()), known.empty() ? "none" : known));
        }
        return u;
      }
      if (m.funcs.size() + m.graphs.size() == 1) {
        if (m.funcs.empty()) {
          u.graph = m.graphs[0];
        } else {
          u.func = m.funcs[0];
        }
        return u;
      }
      refuse(Code::InvalidArgument,
             fmt::format("{}: the source has {} funcs and {} graphs; name the one to use "
                         "(source.name)",
                         file, m.funcs.size(), m.graphs.size()));
    }
    case v1::Operator::DEFINITION_NOT_SET:
      break;
  }
  refuse(Code::InvalidArgument,
         "op: the request has no operator (set source, def, graph or model)");
}

ir::Func resolve(const v1::Operator& op, const Limits& limits) {
  if (op.has_model())
    refuse(Code::InvalidArgument,
           "op.model: this method takes a func; a model is checked, emitted, run and compiled "
           "whole (measuring and tuning one is not supported yet)");
  Unit u = resolve_unit(op, limits);
  if (u.graph)
    refuse(Code::InvalidArgument,
           fmt::format("'{}' is a graph; this method takes a func (a graph is checked, emitted, "
                       "run and compiled whole)",
                       u.graph->name));
  return *u.func;
}

CompileOptions compile_options(const v1::CompileOptions& o, const Limits& limits) {
  CompileOptions c;
  const v1::Target& t = o.target();
  c.target = Target::named(t.triple(), t.cpu(), t.features());
  for (auto [name, bytes, field] : {std::tuple{"l1d_bytes", t.l1d_bytes(), &c.target.l1d_bytes},
                                    std::tuple{"l2_bytes", t.l2_bytes(), &c.target.l2_bytes},
                                    std::tuple{"l3_bytes", t.l3_bytes(), &c.target.l3_bytes}}) {
    if (bytes > (uint64_t{1} << 40))
      refuse(Code::InvalidArgument,
             fmt::format("options.target.{}: {} bytes is not a cache size", name, bytes));
    if (bytes > 0) *field = static_cast<int64_t>(bytes);
  }
  if (o.has_opt_level()) {
    if (o.opt_level() < 0 || o.opt_level() > 3)
      refuse(Code::InvalidArgument,
             fmt::format("options.opt_level: {} is not a level (0 to 3)", o.opt_level()));
    c.opt_level = o.opt_level();
  }
  c.apply_schedule = !o.no_schedule();
  c.passes.required.insert(o.required_passes().begin(), o.required_passes().end());
  c.passes.disabled.insert(o.disabled_passes().begin(), o.disabled_passes().end());
  for (const auto& [workload, knobs] : o.workload_knobs())
    c.workload_knobs[workload] = ir::Overrides(knobs.values().begin(), knobs.values().end());
  c.limits = limits;
  return c;
}

CompileRequest pipeline_request(const v1::Operator& op, const v1::CompileOptions& o,
                                const Limits& limits, CompileOutput output) {
  CompileRequest r;
  r.func = resolve(op, limits);
  r.overrides = ir::Overrides(o.set().begin(), o.set().end());
  r.options = compile_options(o, limits);
  r.output = output;
  return r;
}

void add_notes(const std::vector<std::string>& notes,
               google::protobuf::RepeatedPtrField<v1::Diagnostic>* out) {
  for (const std::string& n : notes) {
    v1::Diagnostic* d = out->Add();
    d->set_severity(v1::Diagnostic::WARNING);
    d->set_stage("codegen");
    d->set_message(n);
    d->set_text(n);
  }
}

v1::DType wire_dtype(ir::DType t) {
  switch (t) {
    case ir::DType::Bool:
      return v1::BOOL;
    case ir::DType::I32:
      return v1::I32;
    case ir::DType::I64:
      return v1::I64;
    case ir::DType::F32:
      return v1::F32;
    case ir::DType::F64:
      return v1::F64;
  }
  return v1::DTYPE_UNSPECIFIED;
}

// e as the offline CLI words it: an error with no position of its own (a bad
// target, a kernel's error status) is about the file of the operator.
// e as the offline CLI words it: one without a position is about the op's file.
std::string located(const CompileError& e, const v1::Operator& op) {
  std::string file = "<request>";
  if (op.has_source() && !op.source().filename().empty()) file = op.source().filename();
  if (op.has_def()) file = "def";
  return e.located(file);
}

Status status_of(const std::exception_ptr& e, const v1::Operator& op) {
  try {
    std::rethrow_exception(e);
  } catch (const Refusal& r) {
    return r.status;
  } catch (const Cancelled& c) {
    return Status{Code::Cancelled, located(c, op)};
  } catch (const DeadlineExceeded& d) {
    return Status{Code::DeadlineExceeded, located(d, op)};
  } catch (const HostAllocError& c) {
    return Status{Code::ResourceExhausted, located(c, op)};
  } catch (const CompileError& c) {
    return Status{Code::InvalidArgument, located(c, op)};
  } catch (const std::bad_alloc&) {
    return Status{Code::ResourceExhausted, "kilnd ran out of memory for this request"};
  } catch (const std::exception& x) {
    return Status{Code::Internal,
                  std::string("internal error: ") + x.what() + " (this is a bug in kiln)"};
  }
}

}  // namespace kiln::server

// Structured operators to IR: the definition is written out as .kiln text,
// recording which field each token came from, parsed by the frontend, and
// every SourceLoc of the result (or of the error) is mapped back to the field.
#include "kiln/operator_def.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "kiln/frontend.h"
#include "kiln/v1/operator.pb.h"
#include "source.h"

namespace kiln::frontend {

namespace {

// The file name of the text while it is parsed; every position in it is
// mapped to a field before anyone sees it.
const char* const kDefFile = "<operator-def>";

// Where each token of the written text came from.
class FieldMap {
 public:
  void add(int line, int col, const std::string& field) { fields_[{line, col}] = field; }

  // The field of the token at (or the last token before) a text position.
  std::string field_at(int line, int col) const {
    auto it = fields_.upper_bound({line, col});
    if (it == fields_.begin()) return "";
    return std::prev(it)->second;
  }

  SourceLoc map(const SourceLoc& loc) const {
    if (loc.file != kDefFile) return loc;
    if (!loc.known()) return SourceLoc{"operator", 0, 0};
    return SourceLoc{field_at(loc.line, loc.col), 0, 0};
  }

 private:
  std::map<std::pair<int, int>, std::string> fields_;
};

// Writes a definition as .kiln text. Names are checked to be identifiers and
// strings are escaped, so no field can inject text that is not its own.
class Writer {
 public:
  explicit Writer(const Limits& limits) : limits_(limits) {}

  // A field of the current one: "name", "[3]" or "name[3]".
  class Field {
   public:
    Field(Writer& w, const std::string& part) : w_(w), saved_(w.path_) {
      if (!w.path_.empty() && part.front() != '[') w.path_ += '.';
      w.path_ += part;
    }
    Field(Writer& w, const std::string& name, size_t index)
        : Field(w, name + "[" + std::to_string(index) + "]") {}
    ~Field() { w_.path_ = saved_; }
    Field(const Field&) = delete;
    Field& operator=(const Field&) = delete;

   private:
    Writer& w_;
    std::string saved_;
  };

  [[noreturn]] void fail(const std::string& message) const {
    throw CompileError(ErrorStage::Validate, SourceLoc{path_, 0, 0}, message);
  }

  // A token, attributed to the current field. Tokens are separated by a
  // blank, except after an opening bracket and before punctuation, which the
  // lexer splits off anyway.
  void tok(const std::string& text) {
    if (!out_.empty() && out_.back() != '\n' && out_.back() != '(' && out_.back() != '[' &&
        text != "," && text != ";" && text != ")" && text != "]" && text != "(" && text != "[" &&
        text != ":" && text != ".")
      out_ += ' ';
    fields_.add(line_, col(), path_);
    out_ += text;
    if (out_.size() > limits_.max_source_bytes)
      throw CompileError(ErrorStage::Parse, SourceLoc{path_, 0, 0},
                         fmt::format("the definition is larger than the limit of {} bytes as "
                                     "text (max_source_bytes, docs/limits.md)",
                                     limits_.max_source_bytes));
  }
  void newline() {
    out_ += '\n';
    ++line_;
    line_start_ = out_.size();
  }

  void name(const std::string& n, const char* what) {
    bool ok = !n.empty() && (std::isalpha(static_cast<unsigned char>(n[0])) || n[0] == '_');
    for (char c : n) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!ok)
      fail(n.empty() ? std::string(what) + " is missing"
                     : "'" + printable(n) + "' is not a valid " + what +
                           ": a name is a letter or '_' followed by letters, digits and '_'");
    tok(n);
  }

  void integer(int64_t v) {
    if (v >= 0) return tok(std::to_string(v));
    tok("(");
    tok(v == INT64_MIN ? "-9223372036854775807 - 1" : std::to_string(v));
    tok(")");
  }

  // A float literal that lexes as a float and reads back as exactly v.
  std::string float_text(double v) {
    if (!std::isfinite(v)) fail(fmt::format("{} is not a finite number", v));
    std::string s = fmt::format("{:.17g}", std::fabs(v));
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return (std::signbit(v) ? "-" : "") + s;
  }
  void floating(double v) {
    std::string s = float_text(v);
    if (s[0] != '-') return tok(s);
    tok("(");
    tok(s);
    tok(")");
  }

  void string_literal(const std::string& s) {
    std::string q = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') {
        q += '\\';
        q += c;
      } else if (c == '\n') {
        q += "\\n";
      } else if (c == '\t') {
        q += "\\t";
      } else if (static_cast<unsigned char>(c) < 0x20) {
        fail("a string may not hold control characters");
      } else {
        q += c;
      }
    }
    tok(q + "\"");
  }

  std::string text() const { return out_; }
  const FieldMap& fields() const { return fields_; }

 private:
  static std::string printable(const std::string& n) {
    std::string s;
    for (char c : n) s += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    return s.size() > 40 ? s.substr(0, 40) + "..." : s;
  }
  int col() const { return static_cast<int>(out_.size() - line_start_) + 1; }

  const Limits& limits_;
  std::string out_;
  std::string path_;
  FieldMap fields_;
  int line_ = 1;
  size_t line_start_ = 0;
};

using Field = Writer::Field;

const char* binary_symbol(v1::BinaryOp op) {
  switch (op) {
    case v1::ADD:
      return "+";
    case v1::SUB:
      return "-";
    case v1::MUL:
      return "*";
    case v1::DIV:
      return "/";
    case v1::MOD:
      return "%";
    case v1::LT:
      return "<";
    case v1::LE:
      return "<=";
    case v1::GT:
      return ">";
    case v1::GE:
      return ">=";
    case v1::EQ:
      return "==";
    case v1::NE:
      return "!=";
    case v1::AND:
      return "and";
    case v1::OR:
      return "or";
    default:
      return nullptr;
  }
}

const char* dtype_text(Writer& w, v1::DType t) {
  switch (t) {
    case v1::BOOL:
      return "bool";
    case v1::I32:
      return "i32";
    case v1::I64:
      return "i64";
    case v1::F32:
      return "f32";
    case v1::F64:
      return "f64";
    default:
      w.fail("dtype is missing: one of BOOL, I32, I64, F32, F64");
  }
}

void expr(Writer& w, const v1::Expr& e, int depth = 1);

void exprs(Writer& w, const google::protobuf::RepeatedPtrField<v1::Expr>& es, const char* field,
           int depth) {
  for (int k = 0; k < es.size(); ++k) {
    if (k) w.tok(",");
    Field f(w, field, k);
    expr(w, es[k], depth);
  }
}

void expr(Writer& w, const v1::Expr& e, int depth) {
  if (depth > kMaxNesting)
    w.fail(fmt::format("expression is nested too deeply (the limit is {} levels)", kMaxNesting));
  switch (e.node_case()) {
    case v1::Expr::kIntValue:
      return w.integer(e.int_value());
    case v1::Expr::kFloatValue:
      return w.floating(e.float_value());
    case v1::Expr::kBoolValue:
      return w.tok(e.bool_value() ? "true" : "false");
    case v1::Expr::kName: {
      Field f(w, "name");
      return w.name(e.name(), "name");
    }
    case v1::Expr::kIndex: {
      Field f(w, "index");
      {
        Field b(w, "buffer");
        w.name(e.index().buffer(), "buffer name");
      }
      w.tok("[");
      exprs(w, e.index().indices(), "indices", depth + 1);
      w.tok("]");
      return;
    }
    case v1::Expr::kCall: {
      Field f(w, "call");
      {
        Field n(w, "name");
        w.name(e.call().name(), "function name");
      }
      w.tok("(");
      exprs(w, e.call().args(), "args", depth + 1);
      w.tok(")");
      return;
    }
    case v1::Expr::kUnary: {
      Field f(w, "unary");
      if (e.unary().op() != v1::NEG && e.unary().op() != v1::NOT)
        w.fail("unknown unary operator " + std::to_string(e.unary().op()));
      w.tok("(");
      w.tok(e.unary().op() == v1::NEG ? "-" : "not");
      {
        Field o(w, "operand");
        expr(w, e.unary().operand(), depth + 1);
      }
      w.tok(")");
      return;
    }
    case v1::Expr::kBinary: {
      Field f(w, "binary");
      const char* op = binary_symbol(e.binary().op());
      if (!op) w.fail("unknown binary operator " + std::to_string(e.binary().op()));
      w.tok("(");
      {
        Field l(w, "lhs");
        expr(w, e.binary().lhs(), depth + 1);
      }
      w.tok(op);
      {
        Field r(w, "rhs");
        expr(w, e.binary().rhs(), depth + 1);
      }
      w.tok(")");
      return;
    }
    case v1::Expr::NODE_NOT_SET:
      w.fail(
          "the expression is empty: set one of int_value, float_value, bool_value, name, "
          "index, call, unary, binary");
  }
  w.fail("unknown expression node");
}

void iterators(Writer& w, const google::protobuf::RepeatedPtrField<std::string>& names,
               const char* field) {
  for (int k = 0; k < names.size(); ++k) {
    if (k) w.tok(",");
    Field f(w, field, k);
    w.name(names[k], "iterator name");
  }
}

void param(Writer& w, const v1::Param& p) {
  w.tok("param");
  {
    Field n(w, "name");
    w.name(p.name(), "param name");
  }
  if (p.has_value()) {
    Field v(w, "value");
    w.tok("=");
    w.integer(p.value());
  }
  w.tok(";");
}

void buffer(Writer& w, const v1::Buffer& b) {
  {
    Field k(w, "kind");
    switch (b.kind()) {
      case v1::Buffer::INPUT:
        w.tok("input");
        break;
      case v1::Buffer::OUTPUT:
        w.tok("output");
        break;
      case v1::Buffer::TEMP:
        w.tok("temp");
        break;
      default:
        w.fail("kind is missing: one of INPUT, OUTPUT, TEMP");
    }
  }
  {
    Field n(w, "name");
    w.name(b.name(), "buffer name");
  }
  w.tok(":");
  {
    Field d(w, "dtype");
    w.tok(dtype_text(w, b.dtype()));
  }
  w.tok("[");
  exprs(w, b.shape(), "shape", 1);
  w.tok("]");
  if (b.has_values()) {
    Field v(w, "values");
    const v1::ValueRange& r = b.values();
    if (!r.has_lo() || !r.has_hi()) w.fail("a value range needs both lo and hi");
    w.tok("in");
    w.tok(r.lo_exclusive() ? "(" : "[");
    {
      Field lo(w, "lo");
      expr(w, r.lo());
    }
    w.tok(",");
    {
      Field hi(w, "hi");
      expr(w, r.hi());
    }
    w.tok(r.hi_inclusive() ? "]" : ")");
  }
  if (b.sorted()) {
    Field s(w, "sorted");
    w.tok("sorted");
  }
  w.tok(";");
}

void knob(Writer& w, const v1::Knob& k) {
  w.tok("knob");
  if (k.target_defaults_size() > 0 && (k.tags_size() > 0 || k.order_loops_size() > 0)) {
    Field d(w, "target_defaults");
    w.fail("only a number knob has defaults by target");
  }
  if (k.has_fit() && (k.tags_size() > 0 || k.order_loops_size() > 0)) {
    Field f(w, "fit");
    w.fail("only a number knob has a default fitted to the target");
  }
  if (k.order_loops_size() == 0) {
    Field n(w, "name");
    w.name(k.name(), "knob name");
  }
  if (k.order_loops_size() > 0) {  // an order knob: the value is its default's number
    auto group = [&](const google::protobuf::RepeatedPtrField<std::string>& loops,
                     const char* field) {
      w.tok("(");
      for (int i = 0; i < loops.size(); ++i) {
        if (i) w.tok(",");
        Field l(w, field, i);
        w.name(loops[i], "loop name");
      }
      w.tok(")");
    };
    w.tok("order");
    {
      Field n(w, "name");
      w.name(k.name(), "knob name");
    }
    w.tok("of");
    group(k.order_loops(), "order_loops");
    if (k.orders_size() > 0) {
      w.tok("in");
      w.tok("[");
      for (int i = 0; i < k.orders_size(); ++i) {
        if (i) w.tok(",");
        Field o(w, "orders", i);
        group(k.orders(i).loops(), "loops");
      }
      w.tok("]");
    }
    if (k.value() != 0) {
      Field v(w, "value");
      int64_t n = k.orders_size() > 0 ? k.orders_size() : 0;
      if (n == 0) {
        n = 1;
        for (int i = 2; i <= k.order_loops_size(); ++i) n *= i;
      }
      if (k.value() < 0 || k.value() >= n)
        w.fail(fmt::format("{} is not the number of one of the knob's {} orders", k.value(), n));
      w.tok("=");
      std::vector<std::string> loops(k.order_loops().begin(), k.order_loops().end());
      std::vector<std::string> order =
          k.orders_size() > 0
              ? std::vector<std::string>(k.orders(static_cast<int>(k.value())).loops().begin(),
                                         k.orders(static_cast<int>(k.value())).loops().end())
              : ir::all_orders_of(loops).at(static_cast<size_t>(k.value()));
      w.tok("(");
      for (size_t i = 0; i < order.size(); ++i) {
        if (i) w.tok(",");
        w.name(order[i], "loop name");
      }
      w.tok(")");
    }
    w.tok(";");
    return;
  }
  if (k.tags_size() > 0) {  // a tag knob: the value names its tag
    if (k.candidates_size() > 0) {
      Field c(w, "candidates");
      w.fail("a tag knob gives tags, not candidates");
    }
    {
      Field v(w, "value");
      w.tok("=");
      if (k.value() < 0 || k.value() >= k.tags_size())
        w.fail(fmt::format("{} is not the number of one of the knob's {} tags", k.value(),
                           k.tags_size()));
      w.name(k.tags(static_cast<int>(k.value())), "tag");
    }
    w.tok("in");
    w.tok("[");
    for (int i = 0; i < k.tags_size(); ++i) {
      if (i) w.tok(",");
      Field t(w, "tags", i);
      w.name(k.tags(i), "tag");
    }
    w.tok("]");
    w.tok(";");
    return;
  }
  {
    Field v(w, "value");
    w.tok("=");
    w.integer(k.value());
  }
  w.tok("in");
  w.tok("[");
  for (int i = 0; i < k.candidates_size(); ++i) {
    if (i) w.tok(",");
    Field c(w, "candidates", i);
    w.integer(k.candidates(i));
  }
  w.tok("]");
  for (int i = 0; i < k.target_defaults_size(); ++i) {
    w.tok(i ? "," : "for");
    Field d(w, "target_defaults", i);
    {
      Field f(w, "feature");
      w.name(k.target_defaults(i).feature(), "CPU feature");
    }
    w.tok("=");
    Field v(w, "value");
    w.integer(k.target_defaults(i).value());
  }
  if (k.has_fit()) {
    w.tok("fit");
    Field f(w, "fit");
    expr(w, k.fit());
  }
  w.tok(";");
}

void computation(Writer& w, const v1::Computation& c) {
  w.tok("compute");
  {
    Field n(w, "name");
    w.name(c.name(), "computation name");
  }
  w.tok("(");
  iterators(w, c.iterators(), "iterators");
  w.tok(")");
  if (c.domain_size() > 0) {
    w.tok("in");
    exprs(w, c.domain(), "domain", 1);
  }
  if (c.has_store()) {
    Field s(w, "store");
    w.tok(":");
    {
      Field b(w, "buffer");
      w.name(c.store().buffer(), "buffer name");
    }
    w.tok("[");
    exprs(w, c.store().indices(), "indices", 1);
    w.tok("]");
    Field a(w, "assign");
    switch (c.store().assign()) {
      case v1::SET:
        w.tok("=");
        break;
      case v1::ADD_TO:
        w.tok("+=");
        break;
      case v1::SUB_FROM:
        w.tok("-=");
        break;
      case v1::MUL_BY:
        w.tok("*=");
        break;
      default:
        w.fail("unknown assignment " + std::to_string(c.store().assign()));
    }
  } else {
    w.tok("=");
  }
  if (c.has_reduction()) {
    Field r(w, "reduction");
    const v1::Reduction& red = c.reduction();
    {
      Field o(w, "op");
      w.name(red.op(), "reduction (sum, prod, max or min)");
    }
    w.tok("(");
    iterators(w, red.iterators(), "iterators");
    w.tok("in");
    exprs(w, red.domain(), "domain", 1);
    w.tok(")");
    Field b(w, "body");
    expr(w, red.body());
  } else if (c.has_value()) {
    Field v(w, "value");
    expr(w, c.value());
  } else {
    w.fail("the computation has neither a value nor a reduction");
  }
  w.tok(";");
}

void schedule_arg(Writer& w, const v1::ScheduleArg& a) {
  switch (a.arg_case()) {
    case v1::ScheduleArg::kNumber:
      return w.integer(a.number());
    case v1::ScheduleArg::kName: {
      Field n(w, "name");
      return w.name(a.name(), "name");
    }
    case v1::ScheduleArg::kText: {
      Field t(w, "text");
      return w.string_literal(a.text());
    }
    case v1::ScheduleArg::kList: {
      Field l(w, "list");
      w.tok("[");
      for (int k = 0; k < a.list().items_size(); ++k) {
        if (k) w.tok(",");
        Field i(w, "items", k);
        schedule_arg(w, a.list().items(k));
      }
      w.tok("]");
      return;
    }
    case v1::ScheduleArg::ARG_NOT_SET:
      w.fail("the argument is empty: set one of number, name, text, list");
  }
  w.fail("unknown schedule argument");
}

void schedule_command(Writer& w, const v1::ScheduleCommand& c) {
  // The target's token is the command's position: what a schedule or
  // legality error blames is the command, "schedule[3]".
  w.name(c.target(), "computation or buffer name (target)");
  w.tok(".");
  {
    Field o(w, "op");
    w.name(c.op(), "schedule command");
  }
  w.tok("(");
  for (int k = 0; k < c.args_size(); ++k) {
    if (k) w.tok(",");
    Field a(w, "args", k);
    schedule_arg(w, c.args(k));
  }
  w.tok(")");
  w.tok(";");
}

void knob_split(Writer& w, const v1::KnobSplit& k) {
  w.tok("knob");
  w.tok("split");
  w.tok("(");
  if (k.parts_size() < 2) {
    Field p(w, "parts");
    w.fail("a knob split has two parts or more");
  }
  if (k.values_size() != k.parts_size() - 1) {
    Field v(w, "values");
    w.fail(fmt::format("{} defaults for {} inner parts: one for each part but the first",
                       k.values_size(), k.parts_size() - 1));
  }
  for (int i = 0; i < k.parts_size(); ++i) {
    if (i) w.tok(",");
    {
      Field p(w, "parts", i);
      w.name(k.parts(i), "knob name");
    }
    if (i > 0) {
      Field v(w, "values", i - 1);
      w.tok("=");
      w.integer(k.values(i - 1));
    }
  }
  w.tok(")");
  w.tok("of");
  if (k.extent_case() == v1::KnobSplit::kExtentParam) {
    Field e(w, "extent_param");
    w.name(k.extent_param(), "param name");
  } else {
    Field e(w, "extent_value");
    w.integer(k.extent_value());
  }
  if (k.max_factor() != 0) {
    Field m(w, "max_factor");
    w.tok("max");
    w.integer(k.max_factor());
  }
  if (k.pow2()) w.tok("pow2");
  w.tok(";");
}

// The loops from the outermost to `loop`, checked: each an index into
// d.loops whose parent comes before it.
std::vector<int> loop_path(Writer& w, const v1::OperatorDef& d, int loop) {
  std::vector<int> path;
  for (int at = loop;;) {
    if (at < 0 || at >= d.loops_size())
      w.fail("loop " + std::to_string(at) + " does not exist: the operator has " +
             std::to_string(d.loops_size()) + " loops");
    path.insert(path.begin(), at);
    if (!d.loops(at).has_parent()) break;
    int parent = d.loops(at).parent();
    if (parent >= at)
      w.fail("loops[" + std::to_string(at) + "].parent is " + std::to_string(parent) +
             ": a loop's parent comes before it in loops");
    at = parent;
  }
  return path;
}

void func(Writer& w, const v1::OperatorDef& d) {
  w.tok("func");
  {
    Field n(w, "name");
    w.name(d.name(), "operator name");
  }
  w.tok("{");
  w.newline();
  for (int k = 0; k < d.params_size(); ++k) {
    Field f(w, "params", k);
    param(w, d.params(k));
    w.newline();
  }
  for (int k = 0; k < d.constraints_size(); ++k) {
    Field f(w, "constraints", k);
    w.tok("constraint");
    expr(w, d.constraints(k));
    w.tok(";");
    w.newline();
  }
  for (int k = 0; k < d.buffers_size(); ++k) {
    Field f(w, "buffers", k);
    buffer(w, d.buffers(k));
    w.newline();
  }
  for (int k = 0; k < d.knob_splits_size(); ++k) {
    Field f(w, "knob_splits", k);
    knob_split(w, d.knob_splits(k));
    w.newline();
  }
  for (int k = 0; k < d.knobs_size(); ++k) {
    Field f(w, "knobs", k);
    knob(w, d.knobs(k));
    w.newline();
  }
  if (d.fast_math()) {
    Field f(w, "fast_math");
    w.tok("option");
    w.tok("fast_math");
    w.tok(";");
    w.newline();
  }
  // The loops open around the computation written last, and those closed.
  std::vector<int> open;
  std::set<int> closed;
  auto close_to = [&](size_t depth) {
    while (open.size() > depth) {
      closed.insert(open.back());
      open.pop_back();
      w.tok("}");
      w.newline();
    }
  };
  for (int k = 0; k < d.computations_size(); ++k) {
    std::vector<int> path;
    if (d.computations(k).has_loop()) {
      Field f(w, "computations", k);
      Field l(w, "loop");
      path = loop_path(w, d, d.computations(k).loop());
    }
    size_t common = ir::shared_loops(open, path);
    close_to(common);
    for (size_t at = common; at < path.size(); ++at) {
      if (closed.count(path[at])) {
        Field f(w, "computations", k);
        Field l(w, "loop");
        w.fail("loops[" + std::to_string(path[at]) +
               "] holds computations that are not consecutive: the computations of a loop follow "
               "one another");
      }
      Field l(w, "loops", static_cast<size_t>(path[at]));
      const v1::Loop& loop = d.loops(path[at]);
      w.tok("for");
      {
        Field i(w, "iterator");
        w.name(loop.iterator(), "iterator name");
      }
      w.tok("in");
      exprs(w, loop.domain(), "domain", 1);
      w.tok("{");
      w.newline();
      open.push_back(path[at]);
    }
    Field f(w, "computations", k);
    computation(w, d.computations(k));
    w.newline();
  }
  close_to(0);
  if (d.schedule_size() > 0) {
    w.tok("schedule");
    w.tok("{");
    w.newline();
    for (int k = 0; k < d.schedule_size(); ++k) {
      Field f(w, "schedule", k);
      schedule_command(w, d.schedule(k));
      w.newline();
    }
    w.tok("}");
    w.newline();
  }
  w.tok("}");
  w.newline();
}

void tensor(Writer& w, const v1::Tensor& t) {
  {
    Field k(w, "kind");
    if (t.kind() == v1::Tensor::INPUT) {
      w.tok("input");
    } else if (t.kind() == v1::Tensor::CONST) {
      w.tok("const");
    } else {
      w.fail("kind is missing: INPUT or CONST");
    }
  }
  {
    Field n(w, "name");
    w.name(t.name(), "tensor name");
  }
  w.tok(":");
  {
    Field d(w, "dtype");
    w.tok(dtype_text(w, t.dtype()));
  }
  w.tok("[");
  for (int k = 0; k < t.shape_size(); ++k) {
    if (k) w.tok(",");
    Field s(w, "shape", k);
    w.integer(t.shape(k));
  }
  w.tok("]");
  if (t.kind() == v1::Tensor::CONST) {
    w.tok("=");
    switch (t.init_case()) {
      case v1::Tensor::kFill: {
        Field f(w, "fill");
        w.tok("fill");
        w.tok("(");
        w.tok(w.float_text(t.fill()));
        w.tok(")");
        break;
      }
      case v1::Tensor::kRandom: {
        Field r(w, "random");
        w.tok("random");
        w.tok("(");
        w.tok(std::to_string(t.random().seed()));
        w.tok(",");
        w.tok(w.float_text(t.random().lo()));
        w.tok(",");
        w.tok(w.float_text(t.random().hi()));
        w.tok(")");
        break;
      }
      case v1::Tensor::kValues: {
        Field v(w, "values");
        w.tok("[");
        for (int k = 0; k < t.values().values_size(); ++k) {
          if (k) w.tok(",");
          Field x(w, "values", k);
          w.tok(w.float_text(t.values().values(k)));
        }
        w.tok("]");
        break;
      }
      case v1::Tensor::INIT_NOT_SET:
        w.fail("a CONST tensor needs fill, random or values");
    }
  } else if (t.init_case() != v1::Tensor::INIT_NOT_SET) {
    w.fail("an INPUT tensor has no initial value");
  }
  w.tok(";");
}

void graph(Writer& w, const v1::GraphDef& g) {
  for (int k = 0; k < g.operators_size(); ++k) {
    Field f(w, "operators", k);
    func(w, g.operators(k));
  }
  w.tok("graph");
  {
    Field n(w, "name");
    w.name(g.name(), "graph name");
  }
  w.tok("{");
  w.newline();
  for (int k = 0; k < g.tensors_size(); ++k) {
    Field f(w, "tensors", k);
    tensor(w, g.tensors(k));
    w.newline();
  }
  for (int k = 0; k < g.calls_size(); ++k) {
    Field f(w, "calls", k);
    const v1::GraphCall& c = g.calls(k);
    for (int r = 0; r < c.results_size(); ++r) {
      if (r) w.tok(",");
      Field x(w, "results", r);
      w.name(c.results(r), "tensor name");
    }
    w.tok("=");
    {
      Field o(w, "op");
      w.name(c.op(), "operator name");
    }
    w.tok("(");
    bool first = true;
    for (int a = 0; a < c.args_size(); ++a, first = false) {
      if (!first) w.tok(",");
      Field x(w, "args", a);
      w.name(c.args(a), "tensor name");
    }
    // In name order: a map's order is not defined, the text's must be.
    std::map<std::string, int64_t> bindings(c.bindings().begin(), c.bindings().end());
    for (const auto& [name, value] : bindings) {
      if (!first) w.tok(",");
      first = false;
      Field x(w, "bindings[" + name + "]");
      w.name(name, "param name");
      w.tok("=");
      w.integer(value);
    }
    w.tok(")");
    w.tok(";");
    w.newline();
  }
  w.tok("output");
  for (int k = 0; k < g.outputs_size(); ++k) {
    if (k) w.tok(",");
    Field o(w, "outputs", k);
    w.name(g.outputs(k), "tensor name");
  }
  w.tok(";");
  w.newline();
  w.tok("}");
  w.newline();
}

// Every SourceLoc of an expression, mapped.
class MapLocations : public ir::IRMutator {
 public:
  explicit MapLocations(const FieldMap& fields) : fields_(fields) {}

 protected:
  ir::Expr mutate_access(const ir::Expr&, const ir::Access& n) override {
    bool changed = false;
    std::vector<ir::Expr> indices = mutate_all(n.indices, &changed);
    return ir::access(n.comp, indices, n.type, fields_.map(n.where));
  }
  ir::Expr mutate_load(const ir::Expr&, const ir::Load& n) override {
    bool changed = false;
    std::vector<ir::Expr> indices = mutate_all(n.indices, &changed);
    return ir::load(n.buf, indices, n.type, fields_.map(n.where));
  }

 private:
  const FieldMap& fields_;
};

void map_arg(const FieldMap& fields, ir::ScheduleArg& a) {
  a.where = fields.map(a.where);
  for (auto& x : a.list) map_arg(fields, x);
}

void map_func(const FieldMap& fields, ir::Func& f) {
  MapLocations m(fields);
  auto e = [&](ir::Expr& x) {
    if (x) x = m.mutate(x);
  };
  f.where = fields.map(f.where);
  for (auto& p : f.params) p.where = fields.map(p.where);
  for (auto& c : f.constraints) {
    c.where = fields.map(c.where);
    e(c.cond);
  }
  for (auto& c : f.knob_constraints) {
    c.where = fields.map(c.where);
    e(c.cond);
  }
  for (auto& b : f.bufs) {
    b.where = fields.map(b.where);
    for (auto& s : b.shape) e(s);
    e(b.values.lo);
    e(b.values.hi);
  }
  for (auto& l : f.loops) {
    l.where = fields.map(l.where);
    for (auto& d : l.domain) e(d);
  }
  for (auto& c : f.comps) {
    c.where = fields.map(c.where);
    for (auto& d : c.domain) e(d);
    e(c.value);
    if (c.store) {
      c.store->where = fields.map(c.store->where);
      for (auto& i : c.store->indices) e(i);
    }
  }
  for (auto& k : f.knobs) k.where = fields.map(k.where);
  for (auto& s : f.knob_splits) s.where = fields.map(s.where);
  for (auto& s : f.schedule) {
    s.where = fields.map(s.where);
    for (auto& a : s.args) map_arg(fields, a);
  }
}

ir::Module parse_written(const Writer& w, const Limits& limits) {
  try {
    ir::Module m = parse_module(w.text(), kDefFile, limits);
    for (auto& f : m.funcs) map_func(w.fields(), f);
    for (auto& g : m.graphs) {
      g.where = w.fields().map(g.where);
      for (auto& t : g.tensors) t.where = w.fields().map(t.where);
      for (auto& c : g.calls) {
        c.where = w.fields().map(c.where);
        map_func(w.fields(), c.op);
      }
    }
    return m;
  } catch (const CompileError& e) {
    throw CompileError(e.stage(), w.fields().map(e.loc()), e.message());
  }
}

}  // namespace

std::string operator_def_text(const v1::OperatorDef& def, const Limits& limits) {
  Writer w(limits);
  func(w, def);
  return w.text();
}

std::string graph_def_text(const v1::GraphDef& def, const Limits& limits) {
  Writer w(limits);
  graph(w, def);
  return w.text();
}

ir::Func parse_operator_def(const v1::OperatorDef& def, const Limits& limits) {
  Writer w(limits);
  func(w, def);
  return parse_written(w, limits).funcs.at(0);
}

ir::Module parse_graph_def(const v1::GraphDef& def, const Limits& limits) {
  Writer w(limits);
  graph(w, def);
  return parse_written(w, limits);
}

}  // namespace kiln::frontend

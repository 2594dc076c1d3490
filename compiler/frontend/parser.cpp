// The parser: one function per construct of docs/language.md, top to bottom.
#include "parser.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kiln::frontend {

namespace {

std::string at_pos(Pos p) { return std::to_string(p.line) + ":" + std::to_string(p.col); }

std::string q(const std::string& s) { return "'" + s + "'"; }

bool is_comparison(Tok k) {
  return k == Tok::Lt || k == Tok::Le || k == Tok::Gt || k == Tok::Ge || k == Tok::EqEq ||
         k == Tok::Ne;
}

ir::BinaryOp comparison_op(Tok k) {
  switch (k) {
    case Tok::Lt:
      return ir::BinaryOp::Lt;
    case Tok::Le:
      return ir::BinaryOp::Le;
    case Tok::Gt:
      return ir::BinaryOp::Gt;
    case Tok::Ge:
      return ir::BinaryOp::Ge;
    case Tok::EqEq:
      return ir::BinaryOp::Eq;
    default:
      return ir::BinaryOp::Ne;
  }
}

class Parser {
 public:
  Parser(const Source& src, const std::vector<Token>& toks) : src_(src), toks_(toks) {}

  ModuleDecl parse_module() {
    ModuleDecl m;
    if (at(Tok::End)) {
      src_.parse_error(peek().pos,
                       "expected 'func', found end of file (a .kiln file holds one or more funcs)");
    }
    while (!at(Tok::End)) {
      if (at_ident("graph") && peek(1).kind == Tok::Ident) {
        m.graphs.push_back(parse_graph());
        continue;
      }
      if (!at(Tok::KwFunc)) fail_expected("'func' to start a function or 'graph' to start a graph");
      m.funcs.push_back(parse_func());
    }
    return m;
  }

 private:
  // ---- tokens

  const Token& peek(size_t k = 0) const {
    size_t j = p_ + k;
    return j < toks_.size() ? toks_[j] : toks_.back();
  }
  bool at(Tok k) const { return peek().kind == k; }
  bool at_ident(const char* word) const { return at(Tok::Ident) && peek().text == word; }
  bool accept_ident(const char* word) {
    if (!at_ident(word)) return false;
    advance();
    return true;
  }
  const Token& advance() {
    const Token& t = peek();
    if (p_ + 1 < toks_.size()) ++p_;
    return t;
  }
  bool accept(Tok k) {
    if (!at(k)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail_expected(const std::string& what) const {
    src_.parse_error(peek().pos, "expected " + what + ", found " + describe(peek()));
  }
  const Token& expect(Tok k, const std::string& what) {
    if (!at(k)) fail_expected(what);
    return advance();
  }
  Ident expect_ident(const std::string& what) {
    const Token& t = expect(Tok::Ident, what);
    return Ident{std::string(t.text), t.pos};
  }
  size_t prev_end() const { return p_ > 0 ? toks_[p_ - 1].end : 0; }

  // An integer with an optional minus sign.
  int64_t parse_signed_int(const std::string& what, Pos* pos = nullptr) {
    if (pos) *pos = peek().pos;
    bool negative = at(Tok::Minus) && peek(1).kind == Tok::Int;
    if (negative) advance();
    const Token& t = expect(Tok::Int, what);
    return negative ? -t.int_value : t.int_value;
  }

  // ---- funcs and items

  FuncDecl parse_func() {
    advance();  // func
    FuncDecl f;
    loops_ = 0;
    f.name = expect_ident("a function name after 'func'");
    Pos open = expect(Tok::LBrace, "'{' after the function name " + q(f.name.name)).pos;
    while (!accept(Tok::RBrace)) {
      if (at(Tok::End)) {
        fail_expected("'}' to close func " + q(f.name.name) + " (opened at " + at_pos(open) + ")");
      }
      parse_item(f);
    }
    return f;
  }

  void parse_item(FuncDecl& f) {
    switch (peek().kind) {
      case Tok::KwParam:
        return parse_params(f);
      case Tok::KwConstraint:
        return parse_constraints(f);
      case Tok::KwInput:
      case Tok::KwOutput:
      case Tok::KwTemp:
        f.items.emplace_back(parse_buffer());
        return;
      case Tok::KwKnob:
        f.items.emplace_back(parse_knob());
        return;
      case Tok::KwCompute:
        f.items.emplace_back(parse_compute());
        return;
      case Tok::KwSchedule:
        f.items.emplace_back(parse_schedule());
        return;
      case Tok::KwOption: {
        advance();  // option
        OptionDecl o;
        o.name = expect_ident("an option name after 'option'");
        expect(Tok::Semi, "';' after the option");
        f.items.emplace_back(std::move(o));
        return;
      }
      default:
        break;
    }
    if (at_ident("for") && peek(1).kind == Tok::Ident) return parse_loop(f, -1);
    if (at(Tok::Ident) && peek(1).kind == Tok::Dot) {
      fail_expected("an item (schedule commands go inside 'schedule { ... }')");
    }
    fail_expected(
        "an item (param, constraint, input, output, temp, knob, compute, for, option or "
        "schedule)");
  }

  // `for NAME in DOMAIN { computations and loops }`, flattened into f's
  // items: the loop, then its body, each naming the loop around it.
  void parse_loop(FuncDecl& f, int parent, int depth = 1) {
    // Each level is an iterator of the computations inside, which
    // max_domain_dims bounds far below this; the limit keeps the parser's
    // recursion short on a hostile file.
    constexpr int kMaxLoopNesting = 64;
    if (depth > kMaxLoopNesting)
      src_.parse_error(peek().pos, "'for' loops are nested too deeply (the limit is " +
                                       std::to_string(kMaxLoopNesting) + " levels)");
    LoopDecl l;
    l.pos = advance().pos;  // for
    l.id = loops_++;
    l.parent = parent;
    l.iter = expect_ident("an iterator name after 'for'");
    std::string name = q("for " + l.iter.name);
    expect(Tok::KwIn, "'in' and the range of " + name + " (as in 'for t in 0 <= t < T { ... }')");
    for (;;) {
      l.domain.push_back(parse_expr());
      if (accept(Tok::Comma)) continue;
      if (at(Tok::LBrace)) break;
      fail_expected("',' or '{' after a condition of " + name);
    }
    Pos open = advance().pos;  // {
    int id = l.id;
    f.items.emplace_back(std::move(l));
    while (!accept(Tok::RBrace)) {
      if (at(Tok::End)) fail_expected("'}' to close " + name + " (opened at " + at_pos(open) + ")");
      if (at(Tok::KwCompute)) {
        ComputeDecl c = parse_compute();
        c.loop = id;
        f.items.emplace_back(std::move(c));
      } else if (at_ident("for") && peek(1).kind == Tok::Ident) {
        parse_loop(f, id, depth + 1);
      } else {
        fail_expected("a computation or a 'for' inside " + name +
                      " (params, buffers, knobs and the schedule go outside loops)");
      }
    }
  }

  // ---- graphs

  GraphDecl parse_graph() {
    advance();  // graph
    GraphDecl g;
    g.name = expect_ident("a graph name after 'graph'");
    Pos open = expect(Tok::LBrace, "'{' after the graph name " + q(g.name.name)).pos;
    while (!accept(Tok::RBrace)) {
      if (at(Tok::End)) {
        fail_expected("'}' to close graph " + q(g.name.name) + " (opened at " + at_pos(open) + ")");
      }
      if (at(Tok::KwInput) || at_ident("const")) {
        g.items.emplace_back(parse_tensor());
      } else if (at(Tok::KwOutput)) {
        advance();  // output
        OutputDecl o;
        do {
          o.names.push_back(expect_ident("a tensor name after 'output'"));
        } while (accept(Tok::Comma));
        expect(Tok::Semi, "',' or ';' after the outputs");
        g.items.emplace_back(std::move(o));
      } else if (at(Tok::Ident)) {
        g.items.emplace_back(parse_call());
      } else {
        fail_expected("a graph item (input, const, output, or a call `y = op(x);`)");
      }
    }
    return g;
  }

  TensorDecl parse_tensor() {
    TensorDecl t;
    bool is_const = !at(Tok::KwInput);
    t.kind = is_const ? ir::TensorKind::Const : ir::TensorKind::Input;
    std::string kw(advance().text);
    t.name = expect_ident("a tensor name after " + q(kw));
    std::string name = q(t.name.name);
    expect(Tok::Colon, "':' and a type after tensor " + name);
    std::optional<ir::DType> dt;
    if (at(Tok::Ident)) dt = ir::dtype_from_name(std::string(peek().text));
    if (!dt) fail_expected("a type (bool, i32, i64, f32 or f64) for tensor " + name);
    advance();
    t.dtype = *dt;
    expect(Tok::LBracket, "'[' and the shape of tensor " + name + " (use [] for a scalar)");
    if (!accept(Tok::RBracket)) {
      for (;;) {
        Pos p;
        t.shape.push_back(parse_signed_int("an integer extent in the shape of tensor " + name, &p));
        t.shape_pos.push_back(p);
        if (accept(Tok::Comma)) continue;
        if (accept(Tok::RBracket)) break;
        fail_expected("',' or ']' in the shape of tensor " + name +
                      " (a graph's shapes are integers)");
      }
    }
    if (is_const) {
      expect(Tok::Assign, "'=' and the values of const " + name);
      t.init_pos = peek().pos;
      t.init = parse_const_init(name);
    }
    expect(Tok::Semi, "';' after tensor " + name);
    return t;
  }

  // A number with an optional minus sign: an integer or a float, or true/false.
  double parse_number(const std::string& what) {
    if (accept(Tok::KwTrue)) return 1;
    if (accept(Tok::KwFalse)) return 0;
    bool negative = at(Tok::Minus) && (peek(1).kind == Tok::Int || peek(1).kind == Tok::Float);
    if (negative) advance();
    double v = 0;
    if (at(Tok::Int)) {
      v = static_cast<double>(advance().int_value);
    } else if (at(Tok::Float)) {
      v = advance().float_value;
    } else {
      fail_expected(what);
    }
    return negative ? -v : v;
  }

  // fill(V) | random(SEED) | random(SEED, LO, HI) | [V, ...] | V
  ir::ConstInit parse_const_init(const std::string& name) {
    ir::ConstInit init;
    if (at_ident("fill") && peek(1).kind == Tok::LParen) {
      advance();
      advance();
      init.kind = ir::ConstInit::Kind::Fill;
      init.fill = parse_number("a number in fill(...) of " + name);
      expect(Tok::RParen, "')' after the value of fill");
    } else if (at_ident("random") && peek(1).kind == Tok::LParen) {
      advance();
      advance();
      init.kind = ir::ConstInit::Kind::Random;
      int64_t seed = parse_signed_int("an integer seed in random(...) of " + name);
      if (seed < 0) src_.parse_error(toks_[p_ - 1].pos, "the seed of random(...) must be >= 0");
      init.seed = static_cast<uint64_t>(seed);
      if (accept(Tok::Comma)) {
        init.lo = parse_number("the low bound in random(SEED, LO, HI) of " + name);
        expect(Tok::Comma, "',' and the high bound in random(SEED, LO, HI)");
        init.hi = parse_number("the high bound in random(SEED, LO, HI) of " + name);
      }
      expect(Tok::RParen, "')' to close random(...)");
    } else if (accept(Tok::LBracket)) {
      init.kind = ir::ConstInit::Kind::Values;
      if (!accept(Tok::RBracket)) {
        for (;;) {
          init.values.push_back(parse_number("a number in the values of " + name));
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::RBracket)) break;
          fail_expected("',' or ']' in the values of " + name);
        }
      }
    } else {
      init.kind = ir::ConstInit::Kind::Fill;
      init.fill =
          parse_number("the values of const " + name +
                       ": a number, fill(V), random(SEED), random(SEED, LO, HI) or [V, ...]");
    }
    return init;
  }

  CallDecl parse_call() {
    CallDecl c;
    do {
      c.results.push_back(expect_ident("a tensor name"));
    } while (accept(Tok::Comma));
    expect(Tok::Assign, "'=' and an operator call after " + q(c.results.back().name));
    c.op = expect_ident("an operator (a func of this file) to call");
    expect(Tok::LParen, "'(' and the arguments of " + q(c.op.name));
    if (!accept(Tok::RParen)) {
      for (;;) {
        Ident a = expect_ident("a tensor, or PARAM = VALUE, as an argument of " + q(c.op.name));
        if (accept(Tok::Assign)) {
          Pos vp;
          int64_t v = parse_signed_int("an integer value for param " + q(a.name), &vp);
          c.bindings.emplace_back(a, v);
          c.binding_value_pos.push_back(vp);
        } else {
          if (!c.bindings.empty()) {
            src_.parse_error(a.pos, "tensor argument " + q(a.name) +
                                        " after a param binding: tensors come first");
          }
          c.args.push_back(a);
        }
        if (accept(Tok::Comma)) continue;
        if (accept(Tok::RParen)) break;
        fail_expected("',' or ')' in the arguments of " + q(c.op.name));
      }
    }
    expect(Tok::Semi, "';' after the call of " + q(c.op.name));
    return c;
  }

  void parse_params(FuncDecl& f) {
    advance();  // param
    for (;;) {
      ParamDecl d;
      d.name = expect_ident("a param name");
      bool has_value = accept(Tok::Assign);
      if (has_value) d.value = parse_signed_int("an integer value for param " + q(d.name.name));
      std::string name = d.name.name;
      f.items.emplace_back(std::move(d));
      if (accept(Tok::Comma)) continue;
      if (accept(Tok::Semi)) return;
      fail_expected(has_value ? "',' or ';' after the value of param " + q(name)
                              : "'=', ',' or ';' after param " + q(name));
    }
  }

  void parse_constraints(FuncDecl& f) {
    advance();  // constraint
    for (;;) {
      f.items.emplace_back(ConstraintDecl{parse_expr()});
      if (accept(Tok::Comma)) continue;
      if (accept(Tok::Semi)) return;
      fail_expected("',' or ';' after a constraint");
    }
  }

  BufferDecl parse_buffer() {
    BufferDecl b;
    const Token& kw = advance();
    b.kind = kw.kind == Tok::KwInput    ? ir::BufKind::Input
             : kw.kind == Tok::KwOutput ? ir::BufKind::Output
                                        : ir::BufKind::Temp;
    b.name = expect_ident("a buffer name after " + q(std::string(kw.text)));
    std::string name = q(b.name.name);
    expect(Tok::Colon, "':' and a type after buffer " + name);
    std::optional<ir::DType> dt;
    if (at(Tok::Ident)) dt = ir::dtype_from_name(std::string(peek().text));
    if (!dt) fail_expected("a type (bool, i32, i64, f32 or f64) for buffer " + name);
    advance();
    b.dtype = *dt;
    expect(Tok::LBracket, "'[' and the shape of buffer " + name + " (use [] for a scalar)");
    if (!accept(Tok::RBracket)) {
      for (;;) {
        b.shape.push_back(parse_expr());
        if (accept(Tok::Comma)) continue;
        if (accept(Tok::RBracket)) break;
        fail_expected("',' or ']' in the shape of buffer " + name);
      }
    }
    bool more = false;
    if (at(Tok::KwIn)) {
      more = true;
      advance();
      ValueRange r;
      r.pos = peek().pos;
      if (accept(Tok::LBracket)) {
        r.lo_inclusive = true;
      } else if (accept(Tok::LParen)) {
        r.lo_inclusive = false;
      } else {
        fail_expected("'[' or '(' to start the value range of " + name);
      }
      r.lo = parse_expr();
      expect(Tok::Comma, "',' between the bounds of the value range of " + name);
      r.hi = parse_expr();
      if (accept(Tok::RBracket)) {
        r.hi_inclusive = true;
      } else if (accept(Tok::RParen)) {
        r.hi_inclusive = false;
      } else {
        fail_expected("']' or ')' to end the value range of " + name);
      }
      b.range = std::move(r);
    }
    if (at_ident("sorted")) {
      more = true;
      b.sorted = true;
      b.sorted_pos = advance().pos;
    }
    if (!accept(Tok::Semi)) {
      fail_expected(more ? "';' after buffer " + name
                         : "'in', 'sorted' or ';' after buffer " + name);
    }
    return b;
  }

  // `knob split (IO, IM = 4, II = 16) of N [max 64] [pow2];`
  KnobDecl parse_knob_split(Ident split) {
    KnobDecl k;
    k.is_split = true;
    expect(Tok::LParen, "'(' and the parts of the knob split");
    for (;;) {
      k.parts.push_back(expect_ident("a part of the knob split (a knob name)"));
      std::string part = q(k.parts.back().name);
      if (k.parts.size() == 1) {
        if (at(Tok::Assign))
          fail_expected("',' after " + part +
                        ": the outer part of a split is what the inner ones leave, it has no "
                        "default");
      } else {
        expect(Tok::Assign, "'=' and a default for the inner part " + part);
        Pos p;
        k.part_values.push_back(parse_signed_int("an integer default for " + part, &p));
        k.part_value_pos.push_back(p);
      }
      if (accept(Tok::Comma)) continue;
      if (accept(Tok::RParen)) break;
      fail_expected("',' or ')' after a part of the knob split");
    }
    if (k.parts.size() < 2) fail_expected("',' and an inner part: a split has two parts or more");
    k.name = k.parts.front();
    k.extent_pos = split.pos;
    if (!at_ident("of")) fail_expected("'of' and the extent after the parts of the knob split");
    advance();
    k.extent_pos = peek().pos;
    if (at(Tok::Ident)) {
      k.extent_param = expect_ident("the extent").name;
    } else {
      k.extent = parse_signed_int("the extent (a number or a param) of the knob split", nullptr);
    }
    for (;;) {
      if (accept_ident("pow2")) {
        k.pow2 = true;
      } else if (accept_ident("max")) {
        k.max_factor = parse_signed_int("the largest part after 'max'");
      } else {
        break;
      }
    }
    expect(Tok::Semi, "'max N', 'pow2' or ';' after the extent of the knob split");
    return k;
  }

  // (a, b, c)
  std::vector<Ident> parse_loop_group(const std::string& what) {
    std::vector<Ident> out;
    expect(Tok::LParen, "'(' and " + what);
    for (;;) {
      out.push_back(expect_ident("a loop name"));
      if (accept(Tok::Comma)) continue;
      if (accept(Tok::RParen)) break;
      fail_expected("',' or ')' after loop " + q(out.back().name));
    }
    return out;
  }

  // `knob order O of (io, jo, k) [in [(io, jo, k), (jo, io, k)]] [= (jo, io, k)];`
  KnobDecl parse_knob_order() {
    KnobDecl k;
    k.is_order = true;
    k.name = expect_ident("the order knob's name after 'knob order'");
    std::string name = q(k.name.name);
    if (!at_ident("of")) fail_expected("'of' and the loops of order knob " + name);
    advance();
    k.order_loops = parse_loop_group("the loops of order knob " + name);
    if (accept(Tok::KwIn)) {
      expect(Tok::LBracket, "'[' to start the orders of knob " + name);
      for (;;) {
        k.orders.push_back(parse_loop_group("an order of the loops"));
        if (accept(Tok::Comma)) continue;
        if (accept(Tok::RBracket)) break;
        fail_expected("',' or ']' after an order of knob " + name);
      }
    }
    if (accept(Tok::Assign)) k.default_order = parse_loop_group("the default order");
    expect(Tok::Semi, "'in', '=' or ';' after the loops of order knob " + name);
    return k;
  }

  KnobDecl parse_knob() {
    advance();  // knob
    KnobDecl k;
    k.name = expect_ident("a knob name after 'knob'");
    if (k.name.name == "split" && at(Tok::LParen)) return parse_knob_split(k.name);
    if (k.name.name == "order" && at(Tok::Ident)) return parse_knob_order();
    std::string name = q(k.name.name);
    expect(Tok::Assign, "'=' and a default value after knob " + name);
    if (at(Tok::Ident)) {  // a tag knob: `knob T = parallel in [none, parallel];`
      k.is_tag = true;
      Ident v = expect_ident("a tag");
      k.tag_value = v.name;
      k.value_pos = v.pos;
    } else {
      k.value = parse_signed_int("an integer (or a tag) default for knob " + name, &k.value_pos);
    }
    expect(Tok::KwIn, "'in' and a list of candidates after the default of knob " + name);
    expect(Tok::LBracket, "'[' to start the candidates of knob " + name);
    for (;;) {
      Pos p;
      if (k.is_tag) {
        Ident t = expect_ident("a tag candidate for tag knob " + name);
        k.tags.push_back(t.name);
        p = t.pos;
      } else {
        k.candidates.push_back(parse_signed_int("an integer candidate for knob " + name, &p));
      }
      k.candidate_pos.push_back(p);
      if (accept(Tok::Comma)) continue;
      if (accept(Tok::RBracket)) break;
      fail_expected("',' or ']' after a candidate of knob " + name);
    }
    // `for avx512f = 64, sve = 32`: defaults by the target's CPU features.
    if (at_ident("for")) {
      advance();
      for (;;) {
        Ident feature = expect_ident("a CPU feature (avx2, avx512f, neon, ...) after 'for'");
        expect(Tok::Assign,
               "'=' and the default of knob " + name + " on targets with " + feature.name);
        Pos p;
        int64_t v = parse_signed_int("an integer default for knob " + name, &p);
        k.target_defaults.emplace_back(feature, v);
        k.target_default_pos.push_back(p);
        if (!accept(Tok::Comma)) break;
      }
    }
    // `fit COND`: the largest candidate that meets COND on the target (its caches, vectors).
    if (at_ident("fit")) {
      advance();
      k.fit = parse_expr();
    }
    expect(Tok::Semi, "'for', 'fit' or ';' after the candidates of knob " + name);
    return k;
  }

  ComputeDecl parse_compute() {
    advance();  // compute
    ComputeDecl c;
    c.name = expect_ident("a computation name after 'compute'");
    std::string name = q(c.name.name);
    expect(Tok::LParen, "'(' and the iterators of " + name + " (use () for none)");
    if (!accept(Tok::RParen)) {
      for (;;) {
        c.iters.push_back(expect_ident("an iterator name"));
        if (accept(Tok::Comma)) continue;
        if (accept(Tok::RParen)) break;
        fail_expected("',' or ')' after iterator " + q(c.iters.back().name));
      }
    }
    if (accept(Tok::KwIn)) {
      for (;;) {
        c.domain.push_back(parse_expr());
        if (accept(Tok::Comma)) continue;
        if (at(Tok::Colon) || at(Tok::Assign)) break;
        fail_expected("',', ':' or '=' after a condition of the domain of " + name);
      }
    } else if (!at(Tok::Colon) && !at(Tok::Assign)) {
      fail_expected("'in', ':' or '=' after the iterators of " + name);
    }
    if (accept(Tok::Colon)) {
      c.stores = true;
      c.target = expect_ident("a buffer to store to after ':' (as in 'C[i, j] = ...')");
      expect(Tok::LBracket, "'[' and indices after buffer " + q(c.target.name) +
                                " (a store writes BUF[i, ...] = value)");
      if (!accept(Tok::RBracket)) {
        for (;;) {
          c.target_indices.push_back(parse_expr());
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::RBracket)) break;
          fail_expected("']' after buffer indices");
        }
      }
      if (at(Tok::LBracket)) bracket_chain_error(c.target.name);
      c.assign_pos = peek().pos;
      switch (peek().kind) {
        case Tok::Assign:
          c.assign = AssignOp::Set;
          break;
        case Tok::PlusAssign:
          c.assign = AssignOp::Add;
          break;
        case Tok::MinusAssign:
          c.assign = AssignOp::Sub;
          break;
        case Tok::StarAssign:
          c.assign = AssignOp::Mul;
          break;
        default:
          fail_expected("'=', '+=', '-=' or '*=' after the store target " +
                        q(c.target.name + "[...]"));
      }
      advance();
      if (at_reduction() && c.assign == AssignOp::Set) {
        c.reduction = parse_reduction();
      } else {
        c.value = parse_expr();
      }
    } else {
      advance();  // =
      c.value = parse_expr();
    }
    expect(Tok::Semi, "';' at the end of computation " + name);
    return c;
  }

  // sum(...) or prod(...); min(...) or max(...) only when iterators and `in`
  // follow, since min(a, b) and max(a, b) are also functions.
  bool at_reduction() const {
    if (!at(Tok::Ident) || peek(1).kind != Tok::LParen) return false;
    std::string_view w = peek().text;
    if (w == "sum" || w == "prod") return true;
    if (w != "min" && w != "max") return false;
    for (size_t k = 2;; k += 2) {
      if (peek(k).kind != Tok::Ident) return false;
      if (peek(k + 1).kind == Tok::KwIn) return true;
      if (peek(k + 1).kind != Tok::Comma) return false;
    }
  }

  ReductionAst parse_reduction() {
    ReductionAst r;
    r.op = expect_ident("a reduction");
    std::string name = q(r.op.name);
    advance();  // (
    for (;;) {
      r.iters.push_back(expect_ident("an iterator name in reduction " + name));
      if (!accept(Tok::Comma)) break;
    }
    expect(Tok::KwIn, "'in' and a domain after the iterators of reduction " + name);
    for (;;) {
      r.domain.push_back(parse_expr());
      if (accept(Tok::Comma)) continue;
      if (accept(Tok::RParen)) break;
      fail_expected("',' or ')' after a condition of reduction " + name);
    }
    r.body = parse_expr();
    return r;
  }

  ScheduleDecl parse_schedule() {
    ScheduleDecl s;
    s.pos = advance().pos;  // schedule
    Pos open = expect(Tok::LBrace, "'{' after 'schedule'").pos;
    while (!accept(Tok::RBrace)) {
      if (at(Tok::End)) {
        fail_expected("'}' to close the schedule block (opened at " + at_pos(open) + ")");
      }
      if (at(Tok::KwKnob)) {
        s.knobs.push_back(parse_knob());
        continue;
      }
      if (at(Tok::KwConstraint)) {  // a knob constraint, beside the knobs it reads
        advance();
        for (;;) {
          s.constraints.push_back(ConstraintDecl{parse_expr()});
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::Semi)) break;
          fail_expected("',' or ';' after a constraint");
        }
        continue;
      }
      ir::ScheduleCommand cmd;
      Ident target = expect_ident("a schedule command (TARGET.OP(...);), a knob or a constraint");
      cmd.target = target.name;
      cmd.where = src_.loc(target.pos);
      expect(Tok::Dot, "'.' after " + q(cmd.target) + " in a schedule command (TARGET.OP(...);)");
      cmd.op = expect_ident("a command name after " + q(cmd.target + ".")).name;
      std::string what = q(cmd.target + "." + cmd.op);
      expect(Tok::LParen, "'(' after " + what);
      if (!accept(Tok::RParen)) {
        for (;;) {
          cmd.args.push_back(parse_schedule_arg(0));
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::RParen)) break;
          fail_expected("',' or ')' after an argument of " + what);
        }
      }
      expect(Tok::Semi, "';' after " + q(cmd.target + "." + cmd.op + "(...)"));
      s.commands.push_back(std::move(cmd));
    }
    return s;
  }

  ir::ScheduleArg parse_schedule_arg(int depth) {
    ir::ScheduleArg a;
    a.where = src_.loc(peek().pos);
    if (at(Tok::Int) || (at(Tok::Minus) && peek(1).kind == Tok::Int)) {
      a.kind = ir::ScheduleArg::Kind::Int;
      a.number = parse_signed_int("an integer");
    } else if (at(Tok::Ident)) {
      a.kind = ir::ScheduleArg::Kind::Name;
      a.text = std::string(advance().text);
    } else if (at(Tok::String)) {
      a.kind = ir::ScheduleArg::Kind::Text;
      a.text = advance().str;
    } else if (at(Tok::LBracket)) {
      if (depth >= kMaxNesting) too_deep(peek().pos);
      advance();
      a.kind = ir::ScheduleArg::Kind::Name;
      if (!accept(Tok::RBracket)) {
        for (;;) {
          a.list.push_back(parse_schedule_arg(depth + 1));
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::RBracket)) break;
          fail_expected("',' or ']' in a list");
        }
      }
    } else {
      fail_expected("a schedule argument (an integer, a name, a string or a [list])");
    }
    return a;
  }

  // ---- expressions, lowest precedence first

  [[noreturn]] void too_deep(Pos p) const {
    src_.parse_error(p, "expression is nested too deeply (the limit is " +
                            std::to_string(kMaxNesting) + " levels)");
  }

  // Counts recursion through parentheses, calls, indices and prefix operators.
  class Nest {
   public:
    Nest(Parser& p, Pos pos) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.too_deep(pos);
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };

  AstPtr node(AstKind kind, Pos pos, Pos start) {
    auto n = std::make_unique<Ast>();
    n->kind = kind;
    n->pos = pos;
    n->start = start;
    return n;
  }

  // Finishes a node: its end and depth (refusing trees deeper than the limit,
  // which long operator chains like a + b + ... can make without recursion).
  AstPtr finish(AstPtr n) {
    n->end = prev_end();
    int d = 0;
    for (const AstPtr& a : n->args) d = std::max(d, a->depth);
    // A chain of k comparisons becomes k - 1 nested `and`s in the IR.
    n->depth = d + static_cast<int>(std::max<size_t>(1, n->cmp_ops.size()));
    if (n->depth > kMaxNesting) too_deep(n->pos);
    return n;
  }

  AstPtr binary(ir::BinaryOp op, Pos pos, AstPtr a, AstPtr b) {
    AstPtr n = node(AstKind::Binary, pos, a->start);
    n->binary_op = op;
    n->args.push_back(std::move(a));
    n->args.push_back(std::move(b));
    return finish(std::move(n));
  }

  AstPtr parse_expr() {
    Nest nest(*this, peek().pos);
    return parse_or();
  }

  AstPtr parse_or() {
    AstPtr a = parse_and();
    while (at(Tok::KwOr) || at(Tok::OrOr)) {
      Pos pos = advance().pos;
      a = binary(ir::BinaryOp::Or, pos, std::move(a), parse_and());
    }
    return a;
  }

  AstPtr parse_and() {
    AstPtr a = parse_not();
    while (at(Tok::KwAnd) || at(Tok::AndAnd)) {
      Pos pos = advance().pos;
      a = binary(ir::BinaryOp::And, pos, std::move(a), parse_not());
    }
    return a;
  }

  AstPtr parse_not() {
    if (!at(Tok::KwNot) && !at(Tok::Bang)) return parse_comparison();
    Nest nest(*this, peek().pos);
    Pos pos = advance().pos;
    AstPtr n = node(AstKind::Unary, pos, pos);
    n->unary_op = ir::UnaryOp::Not;
    n->args.push_back(parse_not());
    return finish(std::move(n));
  }

  AstPtr parse_comparison() {
    AstPtr a = parse_additive();
    if (!is_comparison(peek().kind)) return a;
    AstPtr n = node(AstKind::Compare, peek().pos, a->start);
    n->args.push_back(std::move(a));
    while (is_comparison(peek().kind)) {
      const Token& op = advance();
      n->cmp_ops.push_back(comparison_op(op.kind));
      n->cmp_pos.push_back(op.pos);
      n->args.push_back(parse_additive());
    }
    return finish(std::move(n));
  }

  AstPtr parse_additive() {
    AstPtr a = parse_multiplicative();
    while (at(Tok::Plus) || at(Tok::Minus)) {
      const Token& op = advance();
      auto bop = op.kind == Tok::Plus ? ir::BinaryOp::Add : ir::BinaryOp::Sub;
      a = binary(bop, op.pos, std::move(a), parse_multiplicative());
    }
    return a;
  }

  AstPtr parse_multiplicative() {
    AstPtr a = parse_unary();
    while (at(Tok::Star) || at(Tok::Slash) || at(Tok::Percent)) {
      const Token& op = advance();
      auto bop = op.kind == Tok::Star    ? ir::BinaryOp::Mul
                 : op.kind == Tok::Slash ? ir::BinaryOp::Div
                                         : ir::BinaryOp::Mod;
      a = binary(bop, op.pos, std::move(a), parse_unary());
    }
    return a;
  }

  AstPtr parse_unary() {
    if (!at(Tok::Minus)) return parse_primary();
    Nest nest(*this, peek().pos);
    Pos pos = advance().pos;
    AstPtr n = node(AstKind::Unary, pos, pos);
    n->unary_op = ir::UnaryOp::Neg;
    n->args.push_back(parse_unary());
    return finish(std::move(n));
  }

  [[noreturn]] void bracket_chain_error(const std::string& buf) const {
    src_.parse_error(peek().pos, "a buffer takes all its indices in one pair of brackets: write " +
                                     q(buf + "[i, j]") + ", not " + q(buf + "[i][j]"));
  }

  AstPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::Int: {
        advance();
        AstPtr n = node(AstKind::Int, t.pos, t.pos);
        n->int_value = t.int_value;
        return finish(std::move(n));
      }
      case Tok::Float: {
        advance();
        AstPtr n = node(AstKind::Float, t.pos, t.pos);
        n->float_value = t.float_value;
        return finish(std::move(n));
      }
      case Tok::KwTrue:
      case Tok::KwFalse: {
        advance();
        AstPtr n = node(AstKind::Bool, t.pos, t.pos);
        n->bool_value = t.kind == Tok::KwTrue;
        return finish(std::move(n));
      }
      case Tok::LParen: {
        Pos open = advance().pos;
        AstPtr e = parse_expr();
        expect(Tok::RParen, "')' to close the '(' at " + at_pos(open));
        e->start = open;
        e->end = prev_end();
        return e;
      }
      case Tok::Ident:
        break;
      default:
        fail_expected("an expression");
    }
    if (at_reduction()) {
      src_.parse_error(t.pos, "a reduction (" + q(std::string(t.text)) +
                                  ") is only allowed as the whole right-hand side of a store "
                                  "with '=', as in 'C[i] = sum(k in 0 <= k < K) A[i, k]'");
    }
    advance();
    std::string name(t.text);
    if (at(Tok::LBracket)) {
      Nest nest(*this, peek().pos);
      advance();
      AstPtr n = node(AstKind::Index, t.pos, t.pos);
      n->name = name;
      if (!accept(Tok::RBracket)) {
        for (;;) {
          n->args.push_back(parse_expr());
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::RBracket)) break;
          fail_expected("']' after buffer indices");
        }
      }
      if (at(Tok::LBracket)) bracket_chain_error(name);
      return finish(std::move(n));
    }
    if (at(Tok::LParen)) {
      Nest nest(*this, peek().pos);
      advance();
      AstPtr n = node(AstKind::Call, t.pos, t.pos);
      n->name = name;
      if (!accept(Tok::RParen)) {
        for (;;) {
          n->args.push_back(parse_expr());
          if (accept(Tok::Comma)) continue;
          if (accept(Tok::RParen)) break;
          fail_expected("',' or ')' after an argument of " + q(name));
        }
      }
      return finish(std::move(n));
    }
    AstPtr n = node(AstKind::Name, t.pos, t.pos);
    n->name = name;
    return finish(std::move(n));
  }

  const Source& src_;
  const std::vector<Token>& toks_;
  size_t p_ = 0;
  int nesting_ = 0;
  int loops_ = 0;  // the `for` loops of the func being parsed
};

}  // namespace

ModuleDecl parse(const Source& src, const std::vector<Token>& tokens) {
  return Parser(src, tokens).parse_module();
}

}  // namespace kiln::frontend

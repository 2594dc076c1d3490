// Structured operators (kiln/operator_def.h): an OperatorDef or GraphDef gives
// the IR its .kiln text gives, and every error names the field that is wrong.
#include "kiln/operator_def.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include "kiln/compile.h"
#include "kiln/frontend.h"
#include "kiln/v1/operator.pb.h"

namespace kiln::testing {
namespace {

template <typename Message>
Message from_text(const std::string& text) {
  Message m;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &m)) << text;
  return m;
}

v1::OperatorDef def(const std::string& text) { return from_text<v1::OperatorDef>(text); }

// What a definition's error says, as the CLI prints it: from the frontend,
// or from a later stage (a schedule command), which sees the same positions.
std::string error_of(const v1::OperatorDef& d) {
  try {
    ir::Func f = frontend::parse_operator_def(d);
    compile(CompileRequest{.func = f, .output = CompileOutput::Loops});
  } catch (const CompileError& e) {
    return e.what();
  }
  return "(no error)";
}

// A tiled matmul with a knob, a reduction and a schedule.
const char* kMatmulDef = R"pb(
  name: "matmul"
  params { name: "M" value: 64 }
  params { name: "N" value: 48 }
  params { name: "K" }
  constraints {
    binary {
      op: GT
      lhs { name: "K" }
      rhs { int_value: 0 }
    }
  }
  buffers {
    name: "A"
    kind: INPUT
    dtype: F32
    shape { name: "M" }
    shape { name: "K" }
  }
  buffers {
    name: "B"
    kind: INPUT
    dtype: F32
    shape { name: "K" }
    shape { name: "N" }
  }
  buffers {
    name: "C"
    kind: OUTPUT
    dtype: F32
    shape { name: "M" }
    shape { name: "N" }
  }
  knobs {
    name: "TI"
    value: 16
    candidates: [ 8, 16, 32 ]
  }
  computations {
    name: "C"
    iterators: [ "i", "j" ]
    domain {
      binary {
        op: LE
        lhs { int_value: 0 }
        rhs { name: "i" }
      }
    }
    domain {
      binary {
        op: LT
        lhs { name: "i" }
        rhs { name: "M" }
      }
    }
    domain {
      binary {
        op: LE
        lhs { int_value: 0 }
        rhs { name: "j" }
      }
    }
    domain {
      binary {
        op: LT
        lhs { name: "j" }
        rhs { name: "N" }
      }
    }
    store {
      buffer: "C"
      indices { name: "i" }
      indices { name: "j" }
    }
    reduction {
      op: "sum"
      iterators: "k"
      domain {
        binary {
          op: LE
          lhs { int_value: 0 }
          rhs { name: "k" }
        }
      }
      domain {
        binary {
          op: LT
          lhs { name: "k" }
          rhs { name: "K" }
        }
      }
      body {
        binary {
          op: MUL
          lhs {
            index {
              buffer: "A"
              indices { name: "i" }
              indices { name: "k" }
            }
          }
          rhs {
            index {
              buffer: "B"
              indices { name: "k" }
              indices { name: "j" }
            }
          }
        }
      }
    }
  }
  schedule {
    target: "C"
    op: "split"
    args { name: "i" }
    args { name: "TI" }
    args { name: "io" }
    args { name: "ii" }
  }
  schedule {
    target: "C"
    op: "tag"
    args { name: "io" }
    args { name: "parallel" }
  }
)pb";

const char* kMatmulText = R"(func matmul {
  param M = 64, N = 48, K;
  constraint K > 0;
  input A : f32[M, K];
  input B : f32[K, N];
  output C : f32[M, N];
  knob TI = 16 in [8, 16, 32];
  compute C(i, j) in 0 <= i < M, 0 <= j < N: C[i, j] = sum(k in 0 <= k < K) A[i, k] * B[k, j];
  schedule {
    C.split(i, TI, io, ii);
    C.tag(io, parallel);
  }
})";

TEST(OperatorDef, GivesTheIrItsTextGives) {
  ir::Func from_def = frontend::parse_operator_def(def(kMatmulDef));
  ir::Func from_text = frontend::parse_module(kMatmulText, "matmul.kiln").funcs.at(0);
  EXPECT_EQ(ir::to_string(from_def), ir::to_string(from_text));
}

TEST(OperatorDef, PositionsAreFieldPaths) {
  ir::Func f = frontend::parse_operator_def(def(kMatmulDef));
  EXPECT_EQ(f.where.str(), "name");
  EXPECT_EQ(f.bufs.at(1).where.str(), "buffers[1].name");
  EXPECT_EQ(f.schedule.at(1).where.str(), "schedule[1]");
  EXPECT_EQ(f.knobs.at(0).where.str(), "knobs[0].name");
}

TEST(OperatorDef, TheTextIsCanonicalAndParsesBack) {
  std::string text = frontend::operator_def_text(def(kMatmulDef));
  ir::Func again = frontend::parse_module(text, "again.kiln").funcs.at(0);
  EXPECT_EQ(ir::to_string(again), ir::to_string(frontend::parse_operator_def(def(kMatmulDef))));
}

TEST(OperatorDef, ATagKnobGivesItsTagsAndTheNumberOfItsDefault) {
  v1::OperatorDef d = def(kMatmulDef);
  v1::Knob* k = d.add_knobs();
  k->set_name("T");
  k->set_value(1);
  k->add_tags("none");
  k->add_tags("parallel");
  std::string text = frontend::operator_def_text(d);
  EXPECT_NE(text.find("knob T = parallel in[none, parallel];"), std::string::npos) << text;
  ir::Func f = frontend::parse_operator_def(d);
  EXPECT_EQ(*f.find_knob("T")->tag(), "parallel");
  k->set_value(2);
  EXPECT_EQ(error_of(d),
            "knobs[1].value: validate error: 2 is not the number of one of the knob's 2 tags");
  k->set_value(0);
  k->add_candidates(4);
  EXPECT_EQ(error_of(d),
            "knobs[1].candidates: validate error: a tag knob gives tags, not "
            "candidates");
}

TEST(OperatorDef, ANumberKnobGivesItsDefaultsByTarget) {
  v1::OperatorDef d = def(kMatmulDef);
  v1::Knob* k = d.add_knobs();
  k->set_name("NR");
  k->set_value(16);
  k->add_candidates(16);
  k->add_candidates(64);
  v1::TargetDefault* t = k->add_target_defaults();
  t->set_feature("avx512f");
  t->set_value(64);
  std::string text = frontend::operator_def_text(d);
  EXPECT_NE(text.find("knob NR = 16 in[16, 64] for avx512f = 64;"), std::string::npos) << text;
  ir::Func f = frontend::parse_operator_def(d);
  const ir::Knob* nr = f.find_knob("NR");
  ASSERT_EQ(nr->target_defaults.size(), 1u);
  EXPECT_EQ(nr->target_defaults[0].feature, "avx512f");
  t->set_value(32);
  EXPECT_NE(error_of(d).find("the default 32 of knob 'NR' on targets with avx512f is not one of "
                             "its candidates [16, 64]"),
            std::string::npos)
      << error_of(d);
  k->add_tags("none");
  EXPECT_EQ(error_of(d),
            "knobs[1].target_defaults: validate error: only a number knob has defaults by "
            "target");
}

TEST(OperatorDef, ANumberKnobGivesItsDefaultFittedToTheTarget) {
  v1::OperatorDef d = def(kMatmulDef);
  // knob TI = 16 in [8, 16, 32] fit TI * 4 <= l1d_bytes / 1024;
  *d.mutable_knobs(0)->mutable_fit() = from_text<v1::Expr>(R"pb(
    binary {
      op: LE
      lhs {
        binary {
          op: MUL
          lhs { name: "TI" }
          rhs { int_value: 4 }
        }
      }
      rhs {
        binary {
          op: DIV
          lhs { name: "l1d_bytes" }
          rhs { int_value: 1024 }
        }
      }
    })pb");
  std::string text = frontend::operator_def_text(d);
  EXPECT_NE(text.find("knob TI = 16 in[8, 16, 32] fit((TI * 4) <=(l1d_bytes / 1024));"),
            std::string::npos)
      << text;
  ir::Func f = frontend::parse_operator_def(d);
  ASSERT_TRUE(f.find_knob("TI")->fit);
  // On a target of 48 KiB of L1D, 8 and 16 fit and 32 does not; 64 KiB and more: 32.
  auto fitted = [&](int64_t l1d) {
    ir::TargetFacts facts{[](const std::string&) { return false; }, {{"l1d_bytes", l1d}}};
    return ir::apply_target_defaults(f, facts).find_knob("TI")->value;
  };
  EXPECT_EQ(fitted(48 * 1024), 8);
  EXPECT_EQ(fitted(64 * 1024), 16);
  EXPECT_EQ(fitted(128 * 1024), 32);
  d.mutable_knobs(0)->add_tags("none");
  d.mutable_knobs(0)->clear_candidates();
  d.mutable_knobs(0)->set_value(0);
  EXPECT_EQ(error_of(d),
            "knobs[0].fit: validate error: only a number knob has a default fitted to the "
            "target");
}

TEST(OperatorDef, AnOrderKnobGivesItsLoopsAndOrders) {
  v1::OperatorDef d = def(kMatmulDef);
  v1::Knob* k = d.add_knobs();
  k->set_name("O");
  k->add_order_loops("io");
  k->add_order_loops("jo");
  k->set_value(1);
  std::string text = frontend::operator_def_text(d);
  EXPECT_NE(text.find("knob order O of(io, jo) =(jo, io);"), std::string::npos) << text;
  EXPECT_EQ(frontend::parse_operator_def(d).find_knob("O")->value, 1);
  k->set_value(2);
  EXPECT_EQ(error_of(d),
            "knobs[1].value: validate error: 2 is not the number of one of the knob's 2 orders");
}

TEST(OperatorDef, AKnobSplitGivesItsPartsAndTheInnerOnesDefaults) {
  v1::OperatorDef d = def(kMatmulDef);
  v1::KnobSplit* k = d.add_knob_splits();
  k->add_parts("MO");
  k->add_parts("MI");
  k->add_values(16);
  k->set_extent_param("M");
  k->set_max_factor(32);
  std::string text = frontend::operator_def_text(d);
  EXPECT_NE(text.find("knob split(MO, MI = 16) of M max 32;"), std::string::npos) << text;
  ir::Func f = frontend::parse_operator_def(d);
  EXPECT_EQ(f.find_knob("MO")->value, 4);  // 64 / 16
  k->clear_values();
  EXPECT_EQ(error_of(d),
            "knob_splits[0].values: validate error: 0 defaults for 1 inner parts: "
            "one for each part but the first");
  k->add_values(48);
  EXPECT_EQ(error_of(d),
            "knob_splits[0].parts[1]: validate error: MI=48 does not split 64 (MO, "
            "MI): a part is at most 32 (max)");
}

// Each error names the field, as a text's names FILE:LINE:COL.
// Two statements in a time loop, and a third after it.
const char* kLoopDef = R"pb(
  name: "steps"
  params { name: "T" value: 3 }
  params { name: "N" value: 8 }
  buffers {
    name: "A"
    kind: OUTPUT
    dtype: F32
    shape { name: "N" }
  }
  loops {
    iterator: "t"
    domain {
      binary {
        op: LE
        lhs { int_value: 0 }
        rhs { name: "t" }
      }
    }
    domain {
      binary {
        op: LT
        lhs { name: "t" }
        rhs { name: "T" }
      }
    }
  }
  computations {
    name: "a"
    iterators: "i"
    domain {
      binary {
        op: LE
        lhs { int_value: 0 }
        rhs { name: "i" }
      }
    }
    domain {
      binary {
        op: LT
        lhs { name: "i" }
        rhs { name: "N" }
      }
    }
    store {
      buffer: "A"
      indices { name: "i" }
      assign: ADD_TO
    }
    value { float_value: 0.5 }
    loop: 0
  }
  computations {
    name: "b"
    store {
      buffer: "A"
      indices { int_value: 0 }
    }
    value { float_value: 1.5 }
    loop: 0
  }
  computations {
    name: "c"
    store {
      buffer: "A"
      indices { int_value: 1 }
    }
    value { float_value: 2.5 }
  }
)pb";

TEST(OperatorDef, LoopsGiveTheTextsForLoops) {
  const char* text =
      "func steps {\n  param T = 3, N = 8;\n  output A : f32[N];\n"
      "  for t in 0 <= t < T {\n"
      "    compute a(i) in 0 <= i < N: A[i] += 0.5;\n"
      "    compute b(): A[0] = 1.5;\n"
      "  }\n"
      "  compute c(): A[1] = 2.5;\n}\n";
  ir::Func from_def = frontend::parse_operator_def(def(kLoopDef));
  EXPECT_EQ(ir::to_string(from_def),
            ir::to_string(frontend::parse_module(text, "steps.kiln").funcs.at(0)));
  EXPECT_EQ(from_def.loops.at(0).where.str(), "loops[0]");

  v1::OperatorDef d = def(kLoopDef);
  d.mutable_computations(1)->set_loop(3);
  EXPECT_EQ(error_of(d),
            "computations[1].loop: validate error: loop 3 does not exist: the operator has 1 "
            "loops");
  d = def(kLoopDef);
  d.add_loops()->set_iterator("u");
  d.mutable_loops(0)->set_parent(1);
  EXPECT_EQ(error_of(d),
            "computations[0].loop: validate error: loops[0].parent is 1: a loop's parent comes "
            "before it in loops");
  d = def(kLoopDef);
  d.mutable_computations(2)->set_loop(0);
  d.mutable_computations(1)->clear_loop();
  EXPECT_EQ(error_of(d),
            "computations[2].loop: validate error: loops[0] holds computations that are not "
            "consecutive: the computations of a loop follow one another");
}

TEST(OperatorDef, ErrorsNameTheField) {
  struct Case {
    const char* change;  // appended to the matmul definition (repeated fields add an item)
    const char* expect;  // the whole message
  };
  const Case cases[] = {
      {R"pb(buffers { name: "a b" kind: INPUT dtype: F32 })pb",
       "buffers[3].name: validate error: 'a b' is not a valid buffer name: a name is a letter "
       "or '_' followed by letters, digits and '_'"},
      {R"pb(buffers { name: "x; output z : f32[1]" kind: INPUT dtype: F32 })pb",
       "buffers[3].name: validate error: 'x; output z : f32[1]' is not a valid buffer name: a "
       "name is a letter or '_' followed by letters, digits and '_'"},
      {R"pb(buffers { name: "D" kind: INPUT })pb",
       "buffers[3].dtype: validate error: dtype is missing: one of BOOL, I32, I64, F32, F64"},
      {R"pb(buffers { name: "D" dtype: F32 })pb",
       "buffers[3].kind: validate error: kind is missing: one of INPUT, OUTPUT, TEMP"},
      {R"pb(computations {
              name: "z"
              iterators: "i"
              domain {
                binary {
                  op: LE
                  lhs { int_value: 0 }
                  rhs { name: "i" }
                }
              }
              domain {
                binary {
                  op: LT
                  lhs { name: "i" }
                  rhs { name: "M" }
                }
              }
              store {
                buffer: "Q"
                indices { name: "i" }
              }
              value { float_value: 1 }
            })pb",
       "computations[1].store.buffer: validate error: unknown buffer 'Q'"},
      {R"pb(computations {
              name: "z"
              iterators: "i"
              domain {
                binary {
                  op: LT
                  lhs {
                    binary {
                      op: MUL
                      lhs { name: "i" }
                      rhs { name: "i" }
                    }
                  }
                  rhs { name: "M" }
                }
              }
              store {
                buffer: "C"
                indices { name: "i" }
                indices { int_value: 0 }
              }
              value { float_value: 1 }
            })pb",
       "computations[1].domain[0].binary.lhs.binary: validate error: '(i * i)' is not affine: "
       "one factor of a product in the domain of 'z' must be an integer constant"},
      {R"pb(computations {
              name: "z"
              iterators: "i"
              value {}
            })pb",
       "computations[1].value: validate error: the expression is empty: set one of int_value, "
       "float_value, bool_value, name, index, call, unary, binary"},
      {R"pb(computations {
              name: "z"
              iterators: "i"
              value { float_value: inf }
            })pb",
       "computations[1].value: validate error: inf is not a finite number"},
      {R"pb(schedule {
              target: "C"
              op: "split"
              args { name: "nope" }
              args { number: 4 }
            })pb",
       "schedule[2]: schedule error: split expects 4 arguments: split(LOOP, FACTOR, OUTER, "
       "INNER) (got 2)"},
      {R"pb(schedule {
              target: "C"
              op: "apply_sch"
              args { text: "{ [i, j] -> [j\"] }" }
            })pb",
       "schedule[2].args[0].text: schedule error: apply_sch: cannot parse isl map \"{ [i, j] -> "
       "[j\"] }\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.change);
    std::string what = error_of(def(std::string(kMatmulDef) + c.change));
    EXPECT_EQ(what, c.expect);
  }
}

TEST(OperatorDef, DeepExpressionsAreRefused) {
  v1::OperatorDef d = def(kMatmulDef);
  v1::Expr* e = d.add_constraints();
  for (int k = 0; k < 300; ++k) e = e->mutable_unary()->mutable_operand();
  e->set_name("K");
  EXPECT_TRUE(error_of(d).find("expression is nested too deeply (the limit is 256 levels)") !=
              std::string::npos)
      << error_of(d);
}

const char* kGraphDef = R"pb(
  name: "g"
  operators {
    name: "scale"
    params { name: "N" }
    buffers {
      name: "x"
      kind: INPUT
      dtype: F32
      shape { name: "N" }
    }
    buffers {
      name: "y"
      kind: OUTPUT
      dtype: F32
      shape { name: "N" }
    }
    computations {
      name: "s"
      iterators: "i"
      domain {
        binary {
          op: LE
          lhs { int_value: 0 }
          rhs { name: "i" }
        }
      }
      domain {
        binary {
          op: LT
          lhs { name: "i" }
          rhs { name: "N" }
        }
      }
      store {
        buffer: "y"
        indices { name: "i" }
      }
      value {
        binary {
          op: MUL
          lhs { float_value: 2 }
          rhs {
            index {
              buffer: "x"
              indices { name: "i" }
            }
          }
        }
      }
    }
  }
  tensors { name: "a" kind: INPUT dtype: F32 shape: 4 }
  tensors {
    name: "w"
    kind: CONST
    dtype: F32
    shape: 4
    values { values: [ 1, -2.5, 3, 1e10 ] }
  }
  calls { results: "b" op: "scale" args: "a" }
  calls {
    results: "c"
    op: "scale"
    args: "w"
    bindings { key: "N" value: 4 }
  }
  outputs: [ "b", "c" ]
)pb";

TEST(GraphDef, GivesTheGraphItsTextGives) {
  ir::Module m = frontend::parse_graph_def(from_text<v1::GraphDef>(kGraphDef));
  ASSERT_EQ(m.graphs.size(), 1u);
  const ir::Graph& g = m.graphs[0];
  EXPECT_EQ(g.calls.size(), 2u);
  const ir::GraphTensor* w = g.find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->init.values, (std::vector<double>{1, -2.5, 3, 1e10}));
  EXPECT_EQ(g.calls.at(1).where.str(), "calls[1].op");
}

TEST(GraphDef, ErrorsNameTheField) {
  auto g = from_text<v1::GraphDef>(kGraphDef);
  g.mutable_calls(1)->set_op("missing");
  try {
    frontend::parse_graph_def(g);
    ADD_FAILURE() << "accepted a call to an unknown operator";
  } catch (const CompileError& e) {
    EXPECT_EQ(e.loc().str(), "calls[1].op") << e.what();
  }
}

}  // namespace
}  // namespace kiln::testing

// Updates that parallel iterations share: a computation whose value is an
// update of the element it writes (hist[bin[k]] += w[k]) may let iterations
// that update one element run at the same time, either by making each update
// an atomic read-modify-write (c.atomic()) or by giving each iteration of a
// loop a copy of the target of its own, combined into it after the loop
// (c.privatize(L)). Legality then lets the loop carry c's dependences on
// itself through the target, and only those (legality.cpp); lowering builds
// the atomic stores and the copies (lower.cpp).
#include <algorithm>

#include "access_sites.h"
#include "model.h"

namespace kiln::poly {
namespace {

[[noreturn]] void fail(const SourceLoc& where, const std::string& msg) {
  throw CompileError(ErrorStage::Schedule, where, msg);
}

bool is_target(const ir::Expr& e, const CompModel& c) {
  const auto* l = ir::as<ir::Load>(e);
  if (!l || l->buf != c.target.buf || l->indices.size() != c.target.indices.size()) return false;
  for (size_t k = 0; k < l->indices.size(); ++k)
    if (!ir::equal(l->indices[k], c.target.indices[k])) return false;
  return true;
}

bool reads_buffer(const ir::Expr& e, const std::string& buf) {
  std::set<std::string> read;
  SiteCollector::loads_of(e, read);
  return read.count(buf) > 0;
}

// Why c's value is no update, for the command that needs one.
std::string not_an_update(const CompModel& c) {
  return c.name + " must update the element it writes: " + c.target.buf +
         "[...] += v, -= v, *= v, or = max(" + c.target.buf + "[...], v) or min(...), where v " +
         "does not read " + c.target.buf + "; its value is " + ir::to_string(c.value);
}

void require_update(const CompModel& c, const ir::ScheduleCommand& cmd) {
  if (!update_of(c)) fail(cmd.where, cmd.op + ": " + not_an_update(c));
  if (c.comp->loops.size() > 0 && cmd.is(ir::ScheduleOp::Privatize))
    fail(cmd.where, "privatize: " + c.name +
                        " is inside an algorithm loop ('for'); privatize a computation that is "
                        "not");
}

}  // namespace

std::optional<Update> update_of(const CompModel& c) {
  const auto* b = ir::as<ir::Binary>(c.value);
  if (!b || !(ir::is_int(b->type) || ir::is_float(b->type)) || b->type == ir::DType::Bool)
    return std::nullopt;
  switch (b->op) {
    case ir::BinaryOp::Add:
    case ir::BinaryOp::Sub:
    case ir::BinaryOp::Mul:
    case ir::BinaryOp::Min:
    case ir::BinaryOp::Max:
      break;
    default:
      return std::nullopt;
  }
  ir::Expr operand;
  if (is_target(b->a, c))
    operand = b->b;
  else if (b->op != ir::BinaryOp::Sub && is_target(b->b, c))
    operand = b->a;
  else
    return std::nullopt;
  if (reads_buffer(operand, c.target.buf)) return std::nullopt;
  for (const auto& x : c.target.indices)
    if (reads_buffer(x, c.target.buf)) return std::nullopt;
  for (const auto& d : c.data_params)  // a domain bound read from the target
    if (reads_buffer(d.value, c.target.buf)) return std::nullopt;
  return Update{b->op, operand};
}

Update lowered_update(const CompModel& c) {
  if (auto u = update_of(c)) return *u;
  throw CompileError(ErrorStage::Lower, c.comp->where,
                     std::string(c.atomic ? "atomic()" : "privatize") + " no longer applies to " +
                         c.name + ": a memory schedule rewrote its value so that it no longer " +
                         "reads the element it writes through the indices of its store; do not " +
                         "cache the buffers those indices read");
}

void cmd_atomic(ScheduledFunc::Impl&, CompModel& c, const ir::ScheduleCommand& cmd) {
  if (!cmd.args.empty())
    fail(cmd.where,
         "atomic expects no arguments: atomic() (got " + std::to_string(cmd.args.size()) + ")");
  require_update(c, cmd);
  if (!c.privatized.empty())
    fail(cmd.where, "atomic: " + c.name + " already privatizes loop '" + *c.privatized.begin() +
                        "'; an update is either atomic or privatized");
  c.atomic = true;
}

void cmd_privatize(ScheduledFunc::Impl& m, CompModel& c, const ir::ScheduleCommand& cmd) {
  if (cmd.args.size() != 1 || cmd.args[0].kind != ir::ScheduleArg::Kind::Name)
    fail(cmd.where, "privatize expects 1 argument: privatize(LOOP) (got " +
                        std::to_string(cmd.args.size()) + ")");
  const std::string& loop = cmd.args[0].text;
  if (std::find(c.loop_names.begin(), c.loop_names.end(), loop) == c.loop_names.end()) {
    std::string names;
    for (const auto& n : c.loop_names) names += (names.empty() ? "" : ", ") + n;
    fail(cmd.args[0].where,
         "privatize: " + c.name + " has no loop '" + loop + "' (its loops: " + names + ")");
  }
  require_update(c, cmd);
  if (c.atomic)
    fail(cmd.where,
         "privatize: " + c.name + " is atomic already; an update is either atomic or privatized");
  if (!c.privatized.empty())
    fail(cmd.where, "privatize: " + c.name + " privatizes loop '" + *c.privatized.begin() +
                        "' already; one loop of a computation may be privatized");
  if (!m.func.find_buf(c.target.buf))
    fail(cmd.where,
         "privatize: " + c.name + " writes '" + c.target.buf + "', which has no shape to copy");
  c.privatized.insert(loop);
}

}  // namespace kiln::poly

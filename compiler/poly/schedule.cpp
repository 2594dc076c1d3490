// schedule(): the polyhedral model of a Func with its schedule commands applied and checked.
#include <spdlog/spdlog.h>

#include "kiln/timing.h"
#include "model.h"

namespace kiln::poly {
namespace {

std::string command_text(const ir::ScheduleCommand& cmd) {
  std::function<std::string(const ir::ScheduleArg&)> arg = [&](const ir::ScheduleArg& a) {
    switch (a.kind) {
      case ir::ScheduleArg::Kind::Int:
        return std::to_string(a.number);
      case ir::ScheduleArg::Kind::Text:
        return "\"" + a.text + "\"";
      case ir::ScheduleArg::Kind::Name:
        if (!a.text.empty()) return a.text;
        {
          std::string s = "[";
          for (size_t i = 0; i < a.list.size(); ++i) s += (i ? ", " : "") + arg(a.list[i]);
          return s + "]";
        }
    }
    return std::string();
  };
  std::string s = cmd.target + "." + cmd.op + "(";
  for (size_t i = 0; i < cmd.args.size(); ++i) s += (i ? ", " : "") + arg(cmd.args[i]);
  return s + ")";
}

}  // namespace

ScheduledFunc schedule(const ir::Func& f, bool apply_commands, const Limits& limits) {
  std::unique_ptr<ScheduledFunc::Impl> m;
  try {
    StageTimer timer(ErrorStage::Schedule, limits);
    m = build_model(f, apply_commands, limits);
    {
      TimedPart part("bounds");
      check_access_bounds(*m);
    }
    timer.check(f.where, "after building the model of " + f.name);
    if (apply_commands) {
      std::optional<TimedPart> commands_part(std::in_place, "commands");
      for (const auto& cmd : m->func.schedule) {
        apply_command(*m, cmd);
        m->applied.push_back(command_text(cmd));
        spdlog::debug("{}: applied {}", f.name, m->applied.back());
        timer.check(cmd.where, "after " + m->applied.back());
      }
      commands_part.reset();
      std::optional<TimedPart> range_part(std::in_place, "loop ranges");
      if (auto problem = schedule_range_problem(*m)) {
        // Blame the first command after which a loop leaves the range. (The
        // replay's own parts are not the compilation's.)
        std::vector<PartTime> replay_parts;
        PartSink quiet(replay_parts);
        auto replay = build_model(f, true, limits);
        for (const auto& cmd : replay->func.schedule) {
          apply_command(*replay, cmd);
          if (auto p = schedule_range_problem(*replay))
            throw CompileError(ErrorStage::Schedule, cmd.where,
                               "after " + command_text(cmd) + ", " + *p);
        }
        throw CompileError(ErrorStage::Schedule, f.where, *problem);
      }
      range_part.reset();
      TimedPart part("legality");
      if (!is_legal(*m)) {
        // Blame the first command after which the schedule is illegal.
        std::vector<PartTime> replay_parts;
        PartSink quiet(replay_parts);
        auto replay = build_model(f, true, limits);
        for (const auto& cmd : replay->func.schedule) {
          apply_command(*replay, cmd);
          check_legality(*replay, &cmd);
        }
        check_legality(*m, nullptr);
      }
    }
  } catch (const isl::exception& e) {
    if (m) isl_failed(*m, ErrorStage::Schedule, "apply the schedule of " + f.name, e);
    throw CompileError(ErrorStage::Schedule, f.where,
                       "isl could not build the model of " + f.name + ": " + e.what());
  }
  return ScheduledFunc(std::move(m));
}

bool isl_quota_exceeded(isl::ctx ctx) {
  // Every isl allocation counts as an operation: one more fails with the
  // quota error when, and only when, the quota is used up.
  isl_ctx_reset_error(ctx.get());
  isl_val* probe = isl_val_int_from_si(ctx.get(), 1);
  bool exceeded = probe == nullptr && isl_ctx_last_error(ctx.get()) == isl_error_quota;
  isl_val_free(probe);
  return exceeded;
}

void isl_failed(const ScheduledFunc::Impl& m, ErrorStage stage, const std::string& what,
                const isl::exception& e) {
  if (isl_quota_exceeded(m.ctx.get())) {
    throw CompileError(stage, m.func.where,
                       "isl needs more than " + std::to_string(m.limits.max_isl_operations) +
                           " operations to " + what +
                           " (max_isl_operations, docs/limits.md): simplify the schedule or "
                           "split the operator");
  }
  throw CompileError(stage, m.func.where, "isl could not " + what + ": " + e.what());
}

}  // namespace kiln::poly

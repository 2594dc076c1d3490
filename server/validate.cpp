// kilnd's boundary checks (validate.h).
#include "validate.h"

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>
#include <sched.h>

#include <cmath>
#include <functional>
#include <optional>
#include <tuple>

#include "kiln/v1/service.pb.h"

namespace kiln::server {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// A problem found: the field's path and what is wrong with it.
struct Problem {
  std::string field, why;
};

size_t max_bytes(const FieldDescriptor& f) {
  // a schedule argument's isl map; a target's features (LLVM's list for a host is ~900 bytes)
  if (f.full_name() == "kiln.v1.ScheduleArg.text" || f.full_name() == "kiln.v1.Target.features")
    return kMaxTextBytes;
  if (f.full_name() == "kiln.v1.SourceText.filename") return kMaxFilenameBytes;
  return kMaxNameBytes;
}

std::optional<Problem> check_string(const FieldDescriptor& f, const std::string& path,
                                    const std::string& s) {
  if (size_t limit = max_bytes(f); s.size() > limit)
    return Problem{path, fmt::format("{} bytes, more than the {} a {} may hold", s.size(), limit,
                                     limit == kMaxNameBytes ? "name" : "field")};
  if (size_t nul = s.find('\0'); nul != std::string::npos)
    return Problem{path, fmt::format("holds a NUL byte (byte {} of {}): a NUL ends a name where "
                                     "kiln and its agents pass it on",
                                     nul, s.size())};
  return std::nullopt;
}

// Every string of m and of the messages in it, map keys and values included.
std::optional<Problem> check_strings(const Message& m, const std::string& prefix) {
  const Reflection* r = m.GetReflection();
  std::vector<const FieldDescriptor*> fields;
  r->ListFields(m, &fields);
  for (const FieldDescriptor* f : fields) {
    std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (f->is_map()) {
      // map<string, V>: the entry's key names the element in the path.
      const FieldDescriptor* key = f->message_type()->map_key();
      const FieldDescriptor* value = f->message_type()->map_value();
      for (int i = 0; i < r->FieldSize(m, f); ++i) {
        const Message& entry = r->GetRepeatedMessage(m, f, i);
        const Reflection* er = entry.GetReflection();
        std::string at = fmt::format("{}[{}]", path, i);
        if (key->type() == FieldDescriptor::TYPE_STRING) {
          std::string k = er->GetString(entry, key);
          if (auto p = check_string(*key, path + " key", k)) return p;
          at = fmt::format("{}[{}]", path, quoted(k));
        }
        if (value->type() == FieldDescriptor::TYPE_STRING) {
          if (auto p = check_string(*value, at, er->GetString(entry, value))) return p;
        } else if (value->type() == FieldDescriptor::TYPE_MESSAGE) {
          if (auto p = check_strings(er->GetMessage(entry, value), at)) return p;
        }
      }
      continue;
    }
    if (f->type() == FieldDescriptor::TYPE_STRING) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(m, f); ++i)
          if (auto p =
                  check_string(*f, fmt::format("{}[{}]", path, i), r->GetRepeatedString(m, f, i)))
            return p;
      } else if (auto p = check_string(*f, path, r->GetString(m, f))) {
        return p;
      }
    } else if (f->type() == FieldDescriptor::TYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int i = 0; i < r->FieldSize(m, f); ++i)
          if (auto p =
                  check_strings(r->GetRepeatedMessage(m, f, i), fmt::format("{}[{}]", path, i)))
            return p;
      } else if (auto p = check_strings(r->GetMessage(m, f), path)) {
        return p;
      }
    }
  }
  return std::nullopt;
}

// The most threads the runtime's pool takes (KILN_MAX_THREADS, runtime/src/topology.h).
constexpr int kMaxThreads = 1024;
// Re-measurements of a noisy point, and finalists re-timed, a tuning job may ask for.
constexpr int kMaxRemeasure = 10;
constexpr int kMaxRetime = 100;

// The CPUs this process may run on.
int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(CPU_COUNT(&set), 1);
}

// The numbers of a request's own fields that have a sign or a ceiling.
class Numbers {
 public:
  explicit Numbers(const Ceilings& c) : c_(c) {}

  std::optional<Problem> operator()(const Message& m) {
    if (auto* r = dynamic_cast<const v1::RunRequest*>(&m)) return run(*r);
    if (auto* r = dynamic_cast<const v1::MeasureRequest*>(&m)) return measure(*r);
    if (auto* r = dynamic_cast<const v1::TuneRequest*>(&m)) return tune(*r);
    if (auto* r = dynamic_cast<const v1::ResumeTuneRequest*>(&m))
      return not_negative("trials", r->trials());
    if (auto* r = dynamic_cast<const v1::BestConfigRequest*>(&m)) {
      if (auto p = not_negative("retime", r->retime())) return p;
      if (r->retime() > kMaxRetime)
        return Problem{"retime", fmt::format("{} is more than the {} a request may ask for",
                                             r->retime(), kMaxRetime)};
      return std::nullopt;
    }
    if (auto* r = dynamic_cast<const v1::ListJobsRequest*>(&m))
      return not_negative("limit", r->limit());
    if (auto* r = dynamic_cast<const v1::QueryRecordsRequest*>(&m)) {
      if (auto p = not_negative("offset", r->offset())) return p;
      return not_negative("limit", r->limit());
    }
    return std::nullopt;
  }

 private:
  static std::optional<Problem> not_negative(const std::string& field, int64_t v) {
    if (v >= 0) return std::nullopt;
    return Problem{field, fmt::format("{} is negative", v)};
  }

  // A limit that is a number: finite, and 0 or more.
  static std::optional<Problem> not_a_limit(const std::string& field, double v) {
    if (v >= 0 && !std::isinf(v)) return std::nullopt;
    return Problem{field, fmt::format("{} is not a limit (a number, 0 or more)", v)};
  }

  static std::optional<Problem> buffers(
      const google::protobuf::RepeatedPtrField<v1::BufferData>& bs, const std::string& field) {
    for (int i = 0; i < bs.size(); ++i)
      for (int d = 0; d < bs[i].shape_size(); ++d)
        if (bs[i].shape(d) < 0)
          return Problem{fmt::format("{}[{}].shape[{}]", field, i, d),
                         fmt::format("{} is a negative extent", bs[i].shape(d))};
    return std::nullopt;
  }

  std::optional<Problem> run(const v1::RunRequest& r) const {
    for (auto [field, v] : {std::pair{"number", r.number()}, std::pair{"repeat", r.repeat()},
                            std::pair{"threads", r.threads()}})
      if (auto p = not_negative(field, v)) return p;
    // A run is on kilnd's machine: a thread per CPU it may use is the most that helps, and
    // each thread costs its stack in the runner's address space.
    if (int cpus = usable_cpus(); r.threads() > cpus)
      return Problem{"threads", fmt::format("{} is more than the {} CPUs this machine gives kilnd "
                                            "(0: one per physical core)",
                                            r.threads(), cpus)};
    return buffers(r.inputs(), "inputs");
  }

  std::optional<Problem> measure(const v1::MeasureRequest& r) const {
    if (r.has_gpu())
      if (auto p = not_negative("gpu", r.gpu())) return p;
    return settings(r.settings());
  }

  std::optional<Problem> tune(const v1::TuneRequest& r) const {
    for (auto [field, v] : {std::pair{"trials", r.trials()}, std::pair{"batch", r.batch()},
                            std::pair{"early_stop", r.early_stop()}})
      if (auto p = not_negative(field, v)) return p;
    if (r.has_gpu())
      if (auto p = not_negative("gpu", r.gpu())) return p;
    for (auto [field, v, most] : {std::tuple{"remeasure", r.remeasure(), kMaxRemeasure},
                                  std::tuple{"retime", r.retime(), kMaxRetime}}) {
      if (auto p = not_negative(field, v)) return p;
      if (v > most)
        return Problem{field, fmt::format("{} is more than the {} a job may ask for", v, most)};
    }
    for (auto [field, v] :
         {std::pair{"max_cv", r.max_cv()}, std::pair{"max_host_load", r.max_host_load()},
          std::pair{"max_cpu_pressure", r.max_cpu_pressure()},
          std::pair{"stop_slower_than", r.stop_slower_than()}, std::pair{"budget_s", r.budget_s()}})
      if (auto p = not_a_limit(field, v)) return p;
    return settings(r.settings());
  }

  std::optional<Problem> settings(const v1::MeasureSettings& s) const {
    for (auto [field, v] :
         {std::pair{"warmup", s.warmup()}, std::pair{"number", s.number()},
          std::pair{"repeat", s.repeat()}, std::pair{"min_repeat_ms", s.min_repeat_ms()},
          std::pair{"cooldown_ms", s.cooldown_ms()}, std::pair{"threads", s.threads()},
          std::pair{"time_limit_ms", s.time_limit_ms()},
          std::pair{"min_total_ms", s.min_total_ms()}})
      if (auto p = not_negative(std::string("settings.") + field, v)) return p;
    if (auto p = not_a_limit("settings.stop_above_ms", s.stop_above_ms())) return p;
    if (s.threads() > kMaxThreads)
      return Problem{
          "settings.threads",
          fmt::format("{} is more than the {} threads a pool may have", s.threads(), kMaxThreads)};
    if (s.time_limit_ms() > c_.measure_time_limit_ms)
      return Problem{"settings.time_limit_ms",
                     fmt::format("{} ms is more than this kilnd allows a measurement ({} ms, "
                                 "--measure-timeout-ms)",
                                 s.time_limit_ms(), c_.measure_time_limit_ms)};
    if (c_.measure_memory_bytes > 0 && s.memory_limit_bytes() > c_.measure_memory_bytes)
      return Problem{"settings.memory_limit_bytes",
                     fmt::format("{} bytes is more than this kilnd allows a measurement ({} "
                                 "bytes, --measure-memory-mb)",
                                 s.memory_limit_bytes(), c_.measure_memory_bytes)};
    return std::nullopt;
  }

  const Ceilings& c_;
};

}  // namespace

Status validate(const Message& request, const Ceilings& ceilings) {
  std::optional<Problem> p = check_strings(request, "");
  if (!p) p = Numbers(ceilings)(request);
  if (!p) return {};
  return {Code::InvalidArgument, p->field + ": " + p->why};
}

std::string quoted(std::string_view s) {
  std::string out = "'";
  size_t n = std::min(s.size(), kMaxQuotedBytes);
  for (size_t i = 0; i < n; ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  out += "'";
  if (n < s.size()) out += fmt::format(" (the first {} of {} bytes)", n, s.size());
  return out;
}

std::string bounded(std::string message) {
  // gRPC sends the message percent-encoded: a byte outside ' '..'~' (or '%') takes three.
  auto encoded = [](unsigned char c) -> size_t { return c < 0x20 || c > 0x7e || c == '%' ? 3 : 1; };
  size_t size = 0;
  for (char c : message) size += encoded(static_cast<unsigned char>(c));
  if (size <= kMaxStatusMessageBytes) return message;
  std::string note = fmt::format(" ... (cut: {} bytes in all)", message.size());
  size_t keep = 0, used = note.size();
  while (keep < message.size() &&
         used + encoded(static_cast<unsigned char>(message[keep])) <= kMaxStatusMessageBytes)
    used += encoded(static_cast<unsigned char>(message[keep++]));
  // not inside a UTF-8 character: back off continuation bytes (10xxxxxx)
  while (keep > 0 && keep < message.size() &&
         (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80)
    --keep;
  message.resize(keep);
  return message + note;
}

}  // namespace kiln::server

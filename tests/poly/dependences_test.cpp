// The dependences a process remembers for an operator (compute_dependences):
// a second scheduling of a program, which reads them back, describes them
// exactly as the first, which computed them, and decides legality the same
// way. (That what is stored reads back equal to what the analysis found is
// checked where it is stored, with is_equal, on every first compilation.)
// ctest runs each test in a process of its own, so the first scheduling in a
// test finds nothing remembered.
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include "programs.h"

namespace kiln::testing {
namespace {

// Every func of the examples and of the polybench kernels, with and without
// its schedule (a program's stored values differ with it). Every stored form
// read back equal, or compute_dependences would have said so in the log and
// remembered nothing (both compilations computing alike would pass the rest).
TEST(RememberedDependences, AreTheComputedOnes) {
  auto log = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1024);
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("dependences", log));
  int funcs = 0;
  for (const char* dir : {"examples", "tests/data/polybench"}) {
    for (const std::string& path : kiln_files(dir)) {
      ir::Module m = frontend::parse_module(read_source(path), path);
      for (const ir::Func& f : m.funcs) {
        for (bool commands : {false, true}) {
          SCOPED_TRACE(path + ": " + f.name + (commands ? " with its schedule" : ""));
          std::string computed, remembered;
          try {
            computed = poly::schedule(f, commands).describe_schedule();
          } catch (const CompileError& e) {
            computed = e.what();
          }
          try {
            remembered = poly::schedule(f, commands).describe_schedule();
          } catch (const CompileError& e) {
            remembered = e.what();
          }
          EXPECT_EQ(computed, remembered);
          EXPECT_NE(computed.find("dependences"), std::string::npos) << computed;
        }
        ++funcs;
      }
    }
  }
  spdlog::set_default_logger(previous);
  EXPECT_GE(funcs, 20);
  for (const std::string& line : log->last_formatted())
    EXPECT_EQ(line.find("did not read back equal"), std::string::npos) << line;
}

// The domains, accesses and schedules isl reads from the model's text are
// remembered too (read_set, read_map): a second compilation, which reads them
// back from their constraints, gives the loop nest and words every error
// exactly as the first, which read the text. The hostile and illegal programs
// are there for their errors, whose instances isl samples from these sets.
// (How the model describes itself may differ: isl simplifies the accesses in
// place while it computes the dependences, which the second compilation
// remembers rather than computes.)
TEST(RememberedReads, GiveTheLoopsAndErrorsOfTheFirstReading) {
  int funcs = 0, errors = 0;
  for (const char* dir :
       {"examples", "tests/data/polybench", "tests/data/hostile", "tests/data/illegal"}) {
    for (const std::string& path : kiln_files(dir)) {
      ir::Module m;
      try {
        m = frontend::parse_module(read_source(path), path);
      } catch (const CompileError&) {
        continue;  // a program the frontend refuses never reaches isl
      }
      for (const ir::Func& f : m.funcs) {
        SCOPED_TRACE(path + ": " + f.name);
        auto compile = [&] {
          try {
            return ir::to_string(poly::lower(poly::schedule(f)));
          } catch (const CompileError& e) {
            return std::string("error: ") + e.what();
          }
        };
        std::string first = compile();
        EXPECT_EQ(first, compile());
        errors += first.rfind("error: ", 0) == 0;
        ++funcs;
      }
    }
  }
  EXPECT_GE(funcs, 60);
  EXPECT_GE(errors, 20);
}

// Storage reuse reads the live ranges of a temp, which are remembered with
// the dependences: a fusion that reorders the live ranges is accepted, and a
// write inside a live range is refused, the second time as the first.
TEST(RememberedDependences, KeepTheLiveRangesOfATemp) {
  ir::Func reuse = parse_one(reused_temp("d.after(c, i); a.after(d, i); b.after(a, i);", 29));
  ir::Func clobber = parse_one(reused_temp("c.after(a, i); b.after(c, i); d.after(b, i);", 29));
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "first" : "again");
    EXPECT_EQ(schedule_error(reuse), "(accepted)");
    std::string e = schedule_error(clobber);
    EXPECT_NE(e.find("breaks a live range of temp T"), std::string::npos) << e;
  }
}

// Every illegal schedule of tests/data/illegal is refused with the same
// message when its dependences are remembered.
TEST(RememberedDependences, RefuseEveryIllegalScheduleAgain) {
  for (const std::string& path : kiln_files("tests/data/illegal")) {
    SCOPED_TRACE(path);
    ir::Module m = frontend::parse_module(read_source(path), path);
    std::string first = schedule_error(m.funcs.at(0));
    EXPECT_NE(first, "(accepted)");
    EXPECT_EQ(schedule_error(m.funcs.at(0)), first);
  }
}

}  // namespace
}  // namespace kiln::testing

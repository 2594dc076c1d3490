// The kiln command line as data: which command, which files, which options.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/target.h"

namespace kiln::cli {

enum class Command {
  None,
  Check,
  Emit,
  Interp,
  Run,
  Compile,
  Agents,
  Measure,
  Tune,
  Records,
  Tasks
};

// What `emit --stage` prints.
enum class Stage { Ast, Ir, Schedule, Algorithm, Sketch, Loops, Llvm, Asm, Cuda, Graph };

struct Options {
  Command command = Command::None;
  bool help = false;     // --help: print the usage of `command` (or of kiln) and stop
  bool version = false;  // --version
  bool verbose = false;  // --verbose: debug logs on stderr

  std::vector<std::string> files;
  std::optional<std::string> func;   // --func NAME: only this func of each file
  std::optional<std::string> graph;  // --graph NAME: only this graph of each file
  ir::Overrides overrides;           // --set NAME=INT, last one wins
  bool no_schedule = false;          // --no-schedule: the algorithm's own order

  std::optional<Stage> stage;                      // emit
  bool check = false;                              // interp, run --check
  bool json = false;                               // interp, run --json
  uint64_t seed = 0;                               // interp, run --seed
  std::map<std::string, std::string> input_files;  // run --input NAME=FILE.npy
  std::optional<std::string> save_outputs;         // run --save-outputs DIR
  std::map<std::string, int64_t> dims;             // --dim NAME=N: a model's symbolic dims

  bool bench = false;  // run --bench
  int repeat = 5;      // run --repeat: timed repeats
  bool repeat_given = false;
  int number = 0;                // run --number: runs per repeat; 0 = from the warm-up run
  std::optional<int> threads;    // run --threads: size of the runtime's thread pool
  std::optional<int> gpu;        // run --gpu N: run on this machine's GPU N
  int opt_level = 3;             // -O0..-O3: run, compile, emit --stage loops|llvm|asm
  bool opt_level_given = false;  // -O appeared: emit --stage loops shows the optimized loops

  // run, compile, emit --stage loops|llvm|asm: the pass pipeline (DESIGN.md section 4).
  std::set<std::string> print_after;      // --print-after PASS (repeatable; `all`)
  bool time_passes = false;               // --time-passes
  std::set<std::string> disabled_passes;  // --disable-pass NAME (repeatable)
  std::set<std::string> required_passes;  // --require-pass NAME (repeatable)

  // compile, emit --stage llvm|asm: the target (default: this machine).
  std::optional<std::string> target;    // --target TRIPLE
  std::optional<std::string> cpu;       // --cpu NAME
  std::optional<std::string> features;  // --features +f1,-f2
  // --caches L1D,L2,L3 (32K,512K,8M): the target's caches, for knob defaults fitted to them.
  std::optional<std::array<int64_t, 3>> caches;
  std::optional<std::string> output;  // compile -o FILE

  // check, emit, run, compile: do the work on kilnd (clients/cli/remote.h).
  std::optional<std::string> server;      // --server HOST:PORT, else $KILN_SERVER
  std::optional<std::string> token_file;  // --token-file FILE
  std::optional<std::string> tls_ca;      // --tls-ca FILE: TLS, trusting this CA
  std::optional<std::string> tls_cert;    // --tls-cert FILE: a client certificate
  std::optional<std::string> tls_key;     // --tls-key FILE

  // measure: where and how (kiln.v1.MeasureRequest, MeasureSettings).
  std::optional<std::string> key;  // --key KEY: the agents' device class
  std::string agent;               // --agent ID: one agent of the key ("": any)
  int priority = 0;                // --priority N
  int min_repeat_ms = 0;           // --min-repeat-ms MS (0: the agent's default)
  int min_total_ms = 0;            // --min-total-ms MS (0: none, or the tuner's default)
  bool flush_cache = false;        // --flush-cache: each run's data from memory
  int time_limit_ms = 0;           // --time-limit-ms MS (0: kilnd's)
  int memory_limit_mb = 0;         // --memory-limit-mb MB (0: kilnd's)

  // tune (kiln.v1.TuneRequest): --key, --set, --seed and the measure options above too.
  int trials = 0;                             // --trials N (0: kilnd's default, 64)
  double budget_s = 0;                        // --budget DURATION: a model's wall time
  int batch = 0;                              // --batch N
  int early_stop = 0;                         // --early-stop N
  std::optional<int> retime, remeasure;       // --retime N, --remeasure N
  std::optional<double> stop_slower_than;     // --stop-slower-than X
  std::optional<std::string> search;          // --search xgb-rank|xgb-reg|evo-rank|evo-reg|...
  std::optional<std::string> model_features;  // --features knob|iter
  bool detach = false;                        // --detach: start the job and return
  bool transfer = false;                      // --transfer: warm-start from other shapes
  int64_t resume = 0, cancel = 0;             // --resume JOB, --cancel JOB

  // compile --best [--key KEY]: the best recorded configuration (needs kilnd).
  bool best = false;
  // --auto: each func's own schedule left out, so that kiln sketches one (tune; and with
  // --best, compile, emit --stage schedule and measure read that tuning's records).
  bool auto_schedule = false;

  // records jobs|query|best|export|plot, with filters.
  std::string subcommand;
  int64_t job = 0;                               // --job JOB
  std::optional<std::string> name, workload;     // --name NAME, --workload HASH
  std::optional<std::string> error;              // --error CLASS; --ok: ""
  bool sort_fastest = false;                     // --sort fastest|arrival
  int limit = 0, offset = 0;                     // --limit N (0: 20), --offset N
  int64_t since_unix_ms = 0, until_unix_ms = 0;  // --since, --until
};

// A command line kiln cannot make sense of. `command` says whose usage to
// show with it (Command::None: kiln's own).
class UsageError : public std::runtime_error {
 public:
  UsageError(Command command, const std::string& message)
      : std::runtime_error(message), command_(command) {}
  Command command() const { return command_; }

 private:
  Command command_;
};

// Parses argv. Throws UsageError for an unknown command or option, a missing
// or malformed value, or missing files. Reads no file: whether the files and
// funcs exist is for the commands to find out.
Options parse_command_line(int argc, const char* const* argv);

const char* command_name(Command c);  // "check", ..., "tune", "records"; "" for None
const char* stage_name(Stage s);      // "ast", "ir", "schedule", "loops", "llvm", "asm"

// The one-line synopsis of a command (or of kiln for None), for usage errors.
std::string synopsis(Command c);
// The full --help text of a command (or of kiln for None).
std::string help_text(Command c);

// The target the options name (--target, --cpu, --features, --caches; this machine's by
// default): what is compiled for, here or by kilnd.
Target target_of(const Options& o);

}  // namespace kiln::cli

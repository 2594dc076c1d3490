// The kiln command line as data: which command, which files, which options.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::cli {

enum class Command { None, Check, Emit, Interp };

// What `emit --stage` prints.
enum class Stage { Ast, Ir, Schedule, Loops };

struct Options {
  Command command = Command::None;
  bool help = false;     // --help: print the usage of `command` (or of kiln) and stop
  bool version = false;  // --version
  bool verbose = false;  // --verbose: debug logs on stderr

  std::vector<std::string> files;
  std::optional<std::string> func;  // --func NAME: only this func of each file
  ir::Overrides overrides;          // --set NAME=INT, last one wins
  bool no_schedule = false;         // --no-schedule: the algorithm's own order

  std::optional<Stage> stage;  // emit
  bool check = false;          // interp --check
  bool json = false;           // interp --json
  uint64_t seed = 0;           // interp --seed
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

const char* command_name(Command c);  // "check", "emit", "interp"; "" for None
const char* stage_name(Stage s);      // "ast", "ir", "schedule", "loops"

// The one-line synopsis of a command (or of kiln for None), for usage errors.
std::string synopsis(Command c);
// The full --help text of a command (or of kiln for None).
std::string help_text(Command c);

}  // namespace kiln::cli

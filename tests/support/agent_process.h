// A real kiln-agent for an end-to-end test: dials `server` with a key, a
// token file and an id (logging warnings only), killed at the end.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "spawned_process.h"

namespace kiln::testing {

class AgentProcess : public SpawnedProcess {
 public:
  // `binary --server SERVER --key KEY --token-file TOKEN --id ID extra...`; a
  // non-empty `runner` (qemu and its options) is put in front.
  AgentProcess(const std::string& binary, const std::string& server, const std::string& key,
               const std::string& token_file, const std::string& id,
               std::vector<std::string> extra = {}, std::vector<std::string> runner = {})
      : SpawnedProcess(
            arguments(binary, server, key, token_file, id, std::move(extra), std::move(runner))) {}

 private:
  static std::vector<std::string> arguments(const std::string& binary, const std::string& server,
                                            const std::string& key, const std::string& token_file,
                                            const std::string& id, std::vector<std::string> extra,
                                            std::vector<std::string> runner) {
    std::vector<std::string> args = std::move(runner);
    for (std::string a : {binary, std::string("--server"), server, std::string("--key"), key,
                          std::string("--token-file"), token_file, std::string("--id"), id,
                          std::string("--log-level"), std::string("warning")})
      args.push_back(std::move(a));
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

}  // namespace kiln::testing

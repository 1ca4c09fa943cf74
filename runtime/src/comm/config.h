// Parsing of user-facing configuration strings (env values). Each failure is a ConfigError that
// names the variable and the offending piece.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "nezha/nezha.hpp"

namespace nezha {

// "name=iface:transport,..." (NEZHA_RAILS).
std::vector<RailSpec> parseRails(const std::string& text, const std::string& what = "NEZHA_RAILS");
// "host:port" (NEZHA_RENDEZVOUS).
std::pair<std::string, int> parseHostPort(const std::string& text, const std::string& what);
// Checks an Options built by hand or from env (ranks, rails, sizes); throws ConfigError.
void validateOptions(const Options& o);
// Every knob Options::fromEnv reads except the job's identity (NEZHA_RAILS, rank, world size,
// rendezvous): what a process that runs the engine outside a rendezvous job reads (the NCCL
// plugin, one two-rank job per connection). Throws ConfigError naming the variable; does not
// validate (the caller sets rank and size first).
void readEngineKnobsFromEnv(Options& o);
// Throws ConfigError unless the token carries >= 32 random bytes (see config.cc).
void checkTokenStrength(const std::string& token);
// The job token from NEZHA_JOB_TOKEN_FILE or NEZHA_JOB_TOKEN (both set must agree); "" when
// neither is set. Throws ConfigError naming the variable (unreadable file, disagreement).
std::string jobTokenFromEnv();

}  // namespace nezha

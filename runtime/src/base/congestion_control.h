// Which congestion control a rail's TCP sockets run (NEZHA_TCP_CONGESTION): "auto" (the
// default), "host", or an algorithm's name.
//
// Why a default other than the host's: a split operation ends with its slowest flow, so an
// algorithm that pauses flows on purpose costs a multi-rail job more than one bulk flow. BBR v1,
// the default of many hosts, drains every flow to 4 packets for ~200 ms every 10 s (PROBE_RTT);
// on the test bed striping under BBR reaches 0.955 of the rails' sum against 0.996 under reno
// (bench/README.md, "Congestion control"). "auto" therefore picks the first of
// kAutoCongestionControls that this network namespace may use; an algorithm listed in
// net.ipv4.tcp_allowed_congestion_control needs no privilege, and reno is always allowed.
#pragma once

#include <string>

namespace nezha {

// Preference of "auto", best first; the order is the bed's measurement (see above).
inline constexpr const char* kAutoCongestionControls[] = {"reno", "cubic"};

struct CongestionChoice {
  std::string setting;       // what was asked: "auto", "host" or a name
  std::string algorithm;     // what the sockets run: a name, the host default's included
  std::string socketOption;  // what TCP_CONGESTION is set to; "" = leave the host's default
  // One line for the init log and /status, e.g. "reno (auto; host default bbr)".
  std::string describe() const;
};

// Resolves `setting`; throws ConfigError naming `source` for an empty or malformed name, or an
// algorithm the kernel refuses here (with the kernel's and the namespace's lists).
CongestionChoice resolveCongestionControl(const std::string& setting, const std::string& source);

// The host's default (net.ipv4.tcp_congestion_control of this network namespace).
std::string hostCongestionControl();

}  // namespace nezha

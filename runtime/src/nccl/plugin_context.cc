#include "nccl/plugin_context.h"

#include <arpa/inet.h>

#include <cstdio>

#include "core/config.h"
#include "core/error.h"
#include "core/params.h"
#include "util/socket.h"

namespace nezha::ncclnet {

PluginConfig PluginConfig::fromEnv() {
  PluginConfig c;
  for (const auto& r : parseRails(paramString("NEZHA_RAILS"))) {
    PluginRail pr;
    pr.name = r.name;
    pr.iface = r.iface;
    pr.ip = interfaceAddress(r.iface, r.name);
    in_addr a{};
    inet_pton(AF_INET, pr.ip.c_str(), &a);
    pr.ipv4 = a.s_addr;
    pr.expectedMbps = r.expectedMbps;
    c.rails.push_back(pr);
  }
  if (c.rails.size() > kMaxRails) {
    throw ConfigError(strCat("NEZHA_RAILS lists ", c.rails.size(),
                             " rails; the NCCL plugin's connect handle holds at most ", kMaxRails));
  }
  c.chunkBytes = static_cast<uint32_t>(paramBytes("NEZHA_NCCL_CHUNK", kMinChunk, kMaxChunk));
  c.stall = std::chrono::milliseconds(paramInt("NEZHA_NCCL_STALL_MS", 50, 600000));
  c.readmitInterval = std::chrono::milliseconds(paramInt("NEZHA_NCCL_READMIT_MS", 10, 600000));
  c.verbose = paramInt("NEZHA_VERBOSE", 0, 1) == 1;
  c.connectTimeout =
      std::chrono::milliseconds(paramInt("NEZHA_NCCL_CONNECT_TIMEOUT_MS", 100, 3600000));
  return c;
}

PluginContext::PluginContext(PluginConfig config, ncclDebugLogger_t logger)
    : config_(std::move(config)), logger_(logger) {}

void PluginContext::warn(const std::string& msg) const {
  if (logger_ != nullptr) {
    logger_(NCCL_LOG_WARN, NCCL_LOG_SUBSYS_NET, __FILE__, __LINE__, "NET/Nezha : %s", msg.c_str());
  } else {
    std::fprintf(stderr, "NET/Nezha : %s\n", msg.c_str());
  }
}

void PluginContext::info(const std::string& msg) const {
  if (logger_ != nullptr) {
    logger_(NCCL_LOG_INFO, NCCL_LOG_SUBSYS_NET | NCCL_LOG_SUBSYS_INIT, __FILE__, __LINE__,
            "NET/Nezha : %s", msg.c_str());
  } else if (config_.verbose) {
    std::fprintf(stderr, "NET/Nezha : %s\n", msg.c_str());
  }
}

void PluginContext::noteFailure(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  lastFailure_ = what;
}

std::string PluginContext::statsJson() const {
  std::string out = "{\"rails\":[";
  for (size_t i = 0; i < config_.rails.size(); ++i) {
    const auto& c = counters_[i];
    out += strCat(i ? "," : "", "{\"name\":\"", config_.rails[i].name, "\",\"bytes_sent\":",
                  c.bytesSent.load(), ",\"bytes_received\":", c.bytesReceived.load(),
                  ",\"failures\":", c.failures.load(), ",\"readmissions\":",
                  c.readmissions.load(), ",\"chunks_replayed\":", c.chunksReplayed.load(), "}");
  }
  std::lock_guard<std::mutex> lock(mu_);
  std::string escaped;
  for (char ch : lastFailure_) {
    if (ch == '"' || ch == '\\') escaped += '\\';
    escaped += (static_cast<unsigned char>(ch) < 0x20) ? ' ' : ch;
  }
  return out + "],\"last_failure\":\"" + escaped + "\"}";
}

}  // namespace nezha::ncclnet

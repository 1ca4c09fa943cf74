// The environment's parsers: the first byte picks one, the rest is its input. Any input gives a
// value or a ConfigError naming the variable.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/congestion_control.h"
#include "base/params.h"
#include "base/socket.h"
#include "comm/config.h"
#include "control/control_address.h"
#include "nezha/nezha.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 7) {
      case 0:
        nezha::parseRails(text);
        break;
      case 1:
        nezha::parseBytes(text, "NEZHA_X");
        break;
      case 2:
        nezha::parseInt(text, "NEZHA_X", -5, 1 << 20);
        break;
      case 3:
        nezha::parseHostPort(text, "NEZHA_RENDEZVOUS");
        break;
      case 4:
        nezha::checkTokenStrength(text);
        break;
      case 5:
        // The route table is input too; an address that resolves must not be a rail's.
        nezha::resolveControlAddress(text.substr(0, text.find('\n')), 1, {"10.0.0.1"},
                                     text.find('\n') == std::string::npos
                                         ? std::string()
                                         : text.substr(text.find('\n') + 1));
        break;
      case 6:
        // NEZHA_TCP_CONGESTION. A well-formed name goes to the kernel (setsockopt), which as
        // root may exec modprobe for it: fuzz the parsing, not the module loader.
        if (text == "auto" || text == "host" || !nezha::isCongestionControlName(text))
          nezha::resolveCongestionControl(text, "NEZHA_TCP_CONGESTION");
        break;
    }
  } catch (const nezha::ConfigError&) {
  }
  return 0;
}

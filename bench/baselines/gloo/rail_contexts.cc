#include "rail_contexts.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <string>

namespace gloobench {
namespace {

std::shared_ptr<gloo::transport::Device> DeviceOn(const std::string& iface) {
  gloo::transport::tcp::attr attr;
  attr.iface = iface;
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw UsageError("--iface: cannot use interface '" + iface + "': " + e.what());
  }
}

}  // namespace

std::vector<std::shared_ptr<gloo::Context>> ConnectRails(const BenchOptions& opts) {
  // Devices first, so a bad interface name fails before any rank waits in a rendezvous.
  std::vector<std::shared_ptr<gloo::transport::Device>> devices;
  for (const auto& iface : opts.split.ifaces) devices.push_back(DeviceOn(iface));

  // The stores are only read during connectFullMesh; the contexts keep their devices.
  gloo::rendezvous::FileStore store(opts.storeDir);
  std::vector<std::shared_ptr<gloo::Context>> rails;
  for (size_t i = 0; i < devices.size(); i++) {
    auto context = std::make_shared<gloo::rendezvous::Context>(opts.rank, opts.worldSize);
    context->setTimeout(std::chrono::milliseconds(opts.timeoutMs));
    if (opts.HandSplit()) {
      gloo::rendezvous::PrefixStore prefixed(opts.split.ifaces[i], store);
      context->connectFullMesh(prefixed, devices[i]);
    } else {
      context->connectFullMesh(store, devices[i]);
    }
    rails.push_back(context);
  }
  return rails;
}

}  // namespace gloobench

#include "op_order.h"

#include <c10/util/Exception.h>

#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>

namespace nezha_torch {

void OrderChannel::announce(uint64_t seq) {
  char msg[8];
  for (int i = 0; i < 8; ++i) msg[i] = static_cast<char>(seq >> (8 * i));
  for (int p = 1; p < size_; ++p) links_.send(p, kTag, msg, sizeof(msg));
}

uint64_t OrderChannel::next() {
  struct Slot {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    uint64_t seq = 0;
    std::exception_ptr error;
  };
  // Shared: the reader thread may deliver after a throwing caller is gone (never, today: the
  // wait below has no timeout; kept safe anyway).
  auto slot = std::make_shared<Slot>();
  links_.post(0, kTag, [slot](int, const std::vector<char>* msg, std::exception_ptr err) {
    std::lock_guard<std::mutex> lock(slot->mu);
    if (!err && msg->size() != 8) {
      err = std::make_exception_ptr(
          std::runtime_error("nezha backend: malformed scheduling decision from rank 0 (" +
                             std::to_string(msg->size()) + " bytes)"));
    }
    if (err) {
      slot->error = err;
    } else {
      for (int i = 0; i < 8; ++i) {
        slot->seq |= uint64_t(static_cast<uint8_t>((*msg)[i])) << (8 * i);
      }
    }
    slot->done = true;
    slot->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(slot->mu);
  slot->cv.wait(lock, [&] { return slot->done; });
  if (slot->error) std::rethrow_exception(slot->error);
  return slot->seq;
}

}  // namespace nezha_torch

#include "concurrent.h"

#include <exception>
#include <thread>
#include <vector>

namespace gloobench {
namespace {

// Joins every started thread when it goes out of scope, also when starting a later one throws.
class JoinAll {
 public:
  explicit JoinAll(std::vector<std::thread>& threads) : threads_(threads) {}
  ~JoinAll() {
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  JoinAll(const JoinAll&) = delete;
  JoinAll& operator=(const JoinAll&) = delete;

 private:
  std::vector<std::thread>& threads_;
};

}  // namespace

void RunConcurrently(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  std::vector<std::exception_ptr> errors(n);
  auto guarded = [&](size_t i) {
    try {
      fn(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  {
    std::vector<std::thread> threads;
    threads.reserve(n - 1);
    JoinAll join(threads);
    for (size_t i = 1; i < n; i++) threads.emplace_back(guarded, i);
    guarded(0);
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace gloobench

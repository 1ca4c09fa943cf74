// The pointers the plugin handed NCCL that are still alive. NCCL passes comms and requests back
// as void*; a misuse (a comm used after its close, a request tested after it completed, a
// connect handle of random bytes whose scratch names no comm) must come back as an error code,
// never as a dereference of freed or foreign memory. Every entry point looks its pointer up
// here before it touches it.
#pragma once

#include <mutex>
#include <unordered_set>

namespace nezha::ncclnet {

template <typename T>
class LiveSet {
 public:
  void add(T* p) {
    std::lock_guard<std::mutex> lock(mu_);
    set_.insert(p);
  }
  // False when `p` was not alive (then nothing is removed).
  bool remove(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return set_.erase(p) == 1;
  }
  // Removes (and hands to `drop`, which frees them) the members `pred` picks.
  template <typename Pred, typename Drop>
  void eraseIf(Pred&& pred, Drop&& drop) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = set_.begin(); it != set_.end();) {
      T* member = static_cast<T*>(const_cast<void*>(*it));
      if (!pred(*member)) {
        ++it;
        continue;
      }
      it = set_.erase(it);
      drop(member);
    }
  }
  // `p` as a T when it is alive, else nullptr. The pointer is compared, never dereferenced.
  T* find(const void* p) const {
    std::lock_guard<std::mutex> lock(mu_);
    return set_.count(p) != 0 ? static_cast<T*>(const_cast<void*>(p)) : nullptr;
  }

 private:
  mutable std::mutex mu_;
  std::unordered_set<const void*> set_;
};

}  // namespace nezha::ncclnet

// Runs one call per rail at once: what a hand split needs to keep every rail busy during an op.
#pragma once

#include <cstddef>
#include <functional>

namespace gloobench {

// Calls fn(0) .. fn(n-1) concurrently: fn(0) on the calling thread, each other one on a thread
// of its own, and returns once all have returned. If calls throw, the exception of the lowest
// index is rethrown, but only after every call has ended, so no thread outlives the buffers it
// works on.
//
// Threads are started per call rather than pooled: starting one costs tens of microseconds,
// well under 1 % of an op at the sizes a hand split is measured at (>= 16 MiB takes >= 100 ms on
// the test bed's rails), and there is no pool state to get wrong.
void RunConcurrently(size_t n, const std::function<void(size_t)>& fn);

}  // namespace gloobench

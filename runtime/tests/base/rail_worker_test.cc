// RailWorker: tasks on a rail never overlap and keep their order, whether they run on the
// rail's thread (submit) or on the caller's (runHere, the one-rail fast path).
#include "base/rail_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

namespace nezha {
namespace {

TEST(RailWorkerTest, RunHereRunsOnTheCallersThreadWhenIdle) {
  RailWorker w;
  TaskHandle h;
  std::thread::id ranOn;
  ASSERT_TRUE(w.runHere([&] { ranOn = std::this_thread::get_id(); }, &h));
  EXPECT_TRUE(h.done());
  h.wait();
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  EXPECT_GE(h.seconds(), 0.0);
}

TEST(RailWorkerTest, RunHereDeclinesWhileATaskRunsOrWaits) {
  RailWorker w;
  std::promise<void> started, release;
  std::shared_future<void> go = release.get_future().share();
  TaskHandle running, queued, here;
  w.submit(
      [&] {
        started.set_value();
        go.wait();
      },
      &running);
  started.get_future().wait();
  EXPECT_FALSE(w.runHere([] { ADD_FAILURE() << "ran beside a running task"; }, &here));
  w.submit([] {}, &queued);
  release.set_value();
  running.wait();
  queued.wait();
  TaskHandle after;
  EXPECT_TRUE(w.runHere([] {}, &after));  // idle again
}

TEST(RailWorkerTest, TaskSubmittedDuringRunHereWaitsForIt) {
  RailWorker w;
  TaskHandle here, next;
  std::atomic<bool> hereFinished{false};
  std::promise<bool> nextSawFinished;
  std::promise<void> nextStarted;
  std::future<void> nextStartedF = nextStarted.get_future();
  ASSERT_TRUE(w.runHere(
      [&] {
        w.submit(
            [&] {
              nextStarted.set_value();
              nextSawFinished.set_value(hereFinished.load());
            },
            &next);
        // Were the worker to start `next` now, it would do so well within this window.
        EXPECT_EQ(nextStartedF.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout)
            << "the worker ran a task beside runHere's";
        hereFinished = true;
      },
      &here));
  next.wait();
  EXPECT_TRUE(nextSawFinished.get_future().get());
}

TEST(RailWorkerTest, RunHereReportsTheTasksError) {
  RailWorker w;
  TaskHandle h;
  ASSERT_TRUE(w.runHere([] { throw std::runtime_error("rail r0: gone"); }, &h));
  EXPECT_THROW(h.wait(), std::runtime_error);
  TaskHandle after;
  w.submit([] {}, &after);  // the worker still runs tasks
  after.wait();
}

}  // namespace
}  // namespace nezha

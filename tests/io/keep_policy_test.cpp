// tests/io/keep_policy_test.cpp - io's keep (io/keep_policy.hpp): how long a
// worker that delivered from the ring keeps what that made ready, and when
// the average of the kept ops stops granting keeps.
#include <chrono>
#include <cstdint>
#include <thread>

#include <gtest/gtest.h>

#include "keep_policy.hpp"

namespace ordo::io::detail {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

// A keep says yes until its time is up, then no, and ends no sooner. (How
// many yes answers it gave is not checked: a preempted test thread may find
// the time up at its first question.)
TEST(KeepPolicy, AKeepLastsItsTimeThenEnds) {
  KeepPolicy policy;
  const Clock::time_point t0 = Clock::now();
  ordo::detail::IdleKeep* keep = policy.grant();
  ASSERT_NE(keep, nullptr) << "no op measured yet: the first delivery is kept";
  // Bounded: a keep that never ends fails the test rather than hang it.
  while (keep->go_on()) {
    if (ns_since(t0) > 100 * KeepPolicy::kKeepNs) {
      FAIL() << "the keep still goes on after " << ns_since(t0) << " ns";
    }
  }
  EXPECT_GE(ns_since(t0), KeepPolicy::kKeepNs) << "the keep ended before its time";
  EXPECT_FALSE(keep->go_on()) << "an ended keep went on";
}

// Once kept ops average kKeepOpNs or more, one delivery in kProbe is kept,
// the others hand their ops to the pool at once; quick ops bring keeps back.
TEST(KeepPolicy, SlowKeptOpsLeaveOnlyProbesKept) {
  KeepPolicy policy;
  ordo::detail::IdleKeep* keep = policy.grant();
  ASSERT_NE(keep, nullptr);
  // One op that took twice the bound (a busy wait, not a sleep: the time is the op's).
  const Clock::time_point t0 = Clock::now();
  ASSERT_TRUE(keep->go_on());
  while (ns_since(t0) < 2 * KeepPolicy::kKeepOpNs) {
  }
  policy.kept(*keep);
  int granted = 0;
  int last = -1;
  for (std::uint32_t i = 1; i <= 2 * KeepPolicy::kProbe; ++i) {
    if (policy.grant() != nullptr) {
      ++granted;
      last = static_cast<int>(i);
    }
  }
  EXPECT_EQ(granted, 2) << "slow ops: only the probes are kept";
  EXPECT_EQ(last, static_cast<int>(2 * KeepPolicy::kProbe));
  // Many quick ops in one keep pull the average under the bound.
  for (int round = 0; round < 64; ++round) {
    keep = nullptr;
    while (keep == nullptr) keep = policy.grant();  // a probe comes within kProbe grants
    for (int i = 0; i < 1000 && keep->go_on(); ++i) {
    }
    policy.kept(*keep);
  }
  EXPECT_NE(policy.grant(), nullptr) << "quick ops again, and still only probes kept";
}

// Each worker thread has its own keep: a keep granted on one is not the
// other's, so two workers keeping at once do not share a count.
TEST(KeepPolicy, EachWorkerHasItsOwnKeep) {
  KeepPolicy policy;
  ordo::detail::IdleKeep* mine = policy.grant();
  ordo::detail::IdleKeep* theirs = nullptr;
  std::thread([&] { theirs = policy.grant(); }).join();
  ASSERT_NE(mine, nullptr);
  ASSERT_NE(theirs, nullptr);
  EXPECT_NE(mine, theirs);
}

}  // namespace
}  // namespace ordo::io::detail

// Ranks that push different sequences of ops, no push failing (issue 43):
// a rank skips a push, pushes on another variable, in another order, or
// places an op on another rank. Every rank's next wait_for_all must fail
// within a second with a DivergedError naming the rank, the push where the
// sequences first differ and what each rank pushed there; a transfer made by
// another push must fail the wait it reaches instead of delivering its
// value. Before, rank 0 waited for ever for a value the culprit never sent,
// or read a value another push had sent.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "dist/dist_test_util.hpp"

namespace ordo::dist::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// The rank whose program slips: the last one (a third party to ranks 0 and 1 at -np 4).
int culprit(const Dist& d) { return d.size() - 1; }

enum class Slip { skip, other_variable, swap, other_rank };

const char* name(Slip s) {
  switch (s) {
    case Slip::skip:
      return "skip";
    case Slip::other_variable:
      return "other_variable";
    case Slip::swap:
      return "swap";
    case Slip::other_rank:
      return "other_rank";
  }
  return "?";
}

/// x, y and z live on rank 0 (ids 0, 1, 2). Every rank pushes x = 1, then
/// y = 2x and z = 3x on the culprit (rank 0 sends x there and waits for y
/// and z to come back); the culprit slips at push #2.
struct Program {
  explicit Program(Dist& dist) : d(dist) {
    vx = d.register_value(x, 0);
    vy = d.register_value(y, 0);
    vz = d.register_value(z, 0);
  }
  void y_op(int at) { d.push([this] { y = 2 * x; }, {vx}, {vy}, {.name = "y = 2x"}, at); }
  void z_op() { d.push([this] { z = 3 * x; }, {vx}, {vz}, {.name = "z = 3x"}, culprit(d)); }
  void run(Slip slip) {
    d.push([this] { x = 1; }, {}, {vx}, {.name = "x = 1"});
    if (d.rank() != culprit(d)) {
      y_op(culprit(d));
      z_op();
      return;
    }
    switch (slip) {
      case Slip::skip:
        z_op();
        break;
      case Slip::other_variable:
        d.push([this] { z = 2 * x; }, {vx}, {vz}, {.name = "y = 2x"}, culprit(d));
        z_op();
        break;
      case Slip::swap:
        z_op();
        y_op(culprit(d));
        break;
      case Slip::other_rank:
        y_op(0);
        z_op();
        break;
    }
  }
  Dist& d;
  std::uint64_t x = 0, y = 0, z = 0;
  DistVar vx, vy, vz;
};

/// Runs wait_for_all, expecting it to fail; returns the error's text.
std::string expect_wait_for_all_fails(Dist& d, std::uint64_t first_push) {
  const auto t0 = Clock::now();
  std::string what;
  try {
    d.wait_for_all();
    ADD_FAILURE() << "rank " << d.rank() << ": wait_for_all returned";
  } catch (const DivergedError& e) {
    what = e.what();
    EXPECT_EQ(e.rank(), culprit(d)) << what;
    EXPECT_EQ(e.push(), first_push) << what;
    EXPECT_NE(what.find("rank " + std::to_string(culprit(d))), std::string::npos) << what;
  }
  const auto waited = Clock::now() - t0;
  std::printf("[ timing   ] rank %d: wait_for_all failed after %lld us\n", d.rank(),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(waited).count()));
  EXPECT_LT(waited, 1s * kScale) << "rank " << d.rank() << " learned of the divergence after "
                                 << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms";
  return what;
}

/// The Dist stays failed, and its destructor has nothing left to wait for.
void expect_failed_for_good(std::unique_ptr<Dist> d, const DistVar& v) {
  EXPECT_THROW(d->push([] {}, {}, {v}, {.name = "later"}), DivergedError);
  EXPECT_THROW(d->wait_for_all(), DivergedError);
  const auto t0 = Clock::now();
  d.reset();
  EXPECT_LT(Clock::now() - t0, 10s) << "the destructor waited for a transfer no rank will make";
}

TEST(DistDiverged, EveryRanksWaitForAllFailsNamingTheRanksThePushAndTheVariable) {
  for (const Slip slip : {Slip::skip, Slip::other_variable, Slip::swap, Slip::other_rank}) {
    SCOPED_TRACE(name(slip));
    Engine engine(engine_options());
    auto d = std::make_unique<Dist>(engine, Options{.shutdown_timeout = 120s});
    Program p(*d);
    p.run(slip);
    const std::string what = expect_wait_for_all_fails(*d, 2);
    EXPECT_NE(what.find("first differ at push #2"), std::string::npos) << what;
    // Rank 0's push #2: y = 2x on the culprit; the culprit's, z (or y elsewhere).
    EXPECT_NE(what.find("writing variable 1 that runs on rank " + std::to_string(culprit(*d))), std::string::npos)
        << what;
    if (slip == Slip::other_rank) {
      EXPECT_NE(what.find("writing variable 1 that runs on rank 0"), std::string::npos) << what;
    } else {
      EXPECT_NE(what.find("writing variable 2"), std::string::npos) << what;
    }
    if (slip == Slip::skip) {
      EXPECT_NE(what.find("rank " + std::to_string(culprit(*d)) + " made 2 pushes"), std::string::npos) << what;
    }
    if (d->rank() == 0) {
      EXPECT_EQ(p.y, 0U) << "rank 0 holds a y that no agreed push made";
    }
    expect_failed_for_good(std::move(d), p.vx);
  }
}

TEST(DistDiverged, ATransferFromAnotherPushFailsTheWaitForVarItReaches) {
  // The culprit swaps y = 2x and z = 3x: rank 0's transfer of x made by
  // push #2 (y) meets the culprit's receive made by its push #2 (z), same
  // variable, same transfer number, another push. Its value must not land.
  Engine engine(engine_options());
  auto d = std::make_unique<Dist>(engine, Options{.shutdown_timeout = 120s});
  Program p(*d);
  p.run(Slip::swap);
  auto expect_diverged = [&](const DistVar& v, int from) {
    const auto t0 = Clock::now();
    try {
      d->wait_for_var(v);
      ADD_FAILURE() << "rank " << d->rank() << ": wait_for_var(" << v.id() << ") returned";
    } catch (const DivergedError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.push(), 2U) << what;
      if (what.find("transfer #") != std::string::npos) {
        EXPECT_EQ(e.rank(), from) << what;
        EXPECT_NE(what.find("from rank " + std::to_string(from)), std::string::npos) << what;
      } else {
        // At 4 ranks the announcement of a rank already in wait_for_all may
        // tell the culprit first: a verdict on the two rings.
        EXPECT_NE(what.find("first differ at push #2"), std::string::npos) << what;
      }
    }
    EXPECT_LT(Clock::now() - t0, 1s * kScale);
  };
  if (d->rank() == culprit(*d)) expect_diverged(p.vz, 0);  // x came from rank 0's push #2, y = 2x
  if (d->rank() == 0) expect_diverged(p.vy, culprit(*d));   // y came back from the culprit's push #3
  EXPECT_EQ(p.z, 0U);
  expect_wait_for_all_fails(*d, 2);
  expect_failed_for_good(std::move(d), p.vx);
}

TEST(DistDiverged, ADifferenceOlderThanTheRecentPushesIsBoundedFromTheLastCheck) {
  Engine engine(engine_options());
  auto d = std::make_unique<Dist>(engine, Options{.shutdown_timeout = 120s});
  std::uint64_t w = 0;
  Program p(*d);
  const DistVar vw = d->register_value(w, 0);
  for (int i = 0; i < 3; ++i) d->push([&] { ++w; }, {}, {vw});
  d->wait_for_all();  // pushes #1 to #3 agree on every rank
  if (d->rank() != culprit(*d)) d->push([&] { ++w; }, {}, {vw});  // #4, skipped by the culprit
  // Then pushes of another variable (the same ones as #4 would leave the
  // culprit's sequence a prefix of the others', different only in length).
  for (int i = 0; i < 100; ++i) d->push([&] { ++p.y; }, {}, {p.vy});
  const std::string what = expect_wait_for_all_fails(*d, 4);
  EXPECT_NE(what.find("agree up to push #3 and first differ in pushes #4 to #"), std::string::npos) << what;
  expect_failed_for_good(std::move(d), vw);
}

TEST(DistDiverged, SamePushesWithDifferentBodiesAreNotDetected) {
  // The check covers the variables, access modes and placement of each
  // push, not what its body computes (docs/dist.md): this job passes.
  Engine engine(engine_options());
  Dist d(engine);
  std::uint64_t x = 0;
  const DistVar vx = d.register_value(x, 0);
  const std::uint64_t add = d.rank() == culprit(d) ? 2 : 1;  // only rank 0's body runs
  d.push([&x, add] { x += add; }, {}, {vx});
  d.wait_for_all();
  d.barrier();
  if (d.rank() == 0) {
    EXPECT_EQ(x, 1U);
  }
}

TEST(DistDiverged, BarrierComparesTheSequencesToo) {
  Engine engine(engine_options());
  Dist d(engine, Options{.shutdown_timeout = 120s});
  std::uint64_t a = 0, b = 0;
  const DistVar va = d.register_value(a, 0), vb = d.register_value(b, 0);
  // Ops on rank 0's variables that run there: no transfer, only the books differ.
  d.push([&] { ++a; }, {}, {d.rank() == culprit(d) ? vb : va});
  try {
    d.barrier();
    ADD_FAILURE() << "rank " << d.rank() << ": barrier returned";
  } catch (const DivergedError& e) {
    EXPECT_EQ(e.rank(), culprit(d)) << e.what();
    EXPECT_EQ(e.push(), 1U) << e.what();
  }
  EXPECT_THROW(d.wait_for_all(), DivergedError);
}

TEST(DistDiverged, AWaitForVarWithNoMessageComingFailsWhileThePeersFailTheirWaitForAll) {
  // Rank 0 waits for a transfer the culprit never makes (it skips the push,
  // or pushes an op that sends nothing to rank 0 instead), while every other
  // rank is in wait_for_all: the culprit's announcement of that check tells
  // rank 0, whose wait_for_var fails, and rank 0's progress thread joins the
  // check, so the others' wait_for_all fail too. Before, all of them waited
  // until the job was killed.
  for (const Slip slip : {Slip::skip, Slip::other_variable}) {
    SCOPED_TRACE(name(slip));
    Engine engine(engine_options());
    auto d = std::make_unique<Dist>(engine, Options{.shutdown_timeout = 120s});
    const int c = culprit(*d);
    std::uint64_t x = 0, y = 7, w = 0;
    const DistVar vx = d->register_value(x, 0), vy = d->register_value(y, c), vw = d->register_value(w, c);
    d->push([&] { x = 1; }, {}, {vx}, {.name = "x = 1"});
    if (d->rank() != c) {
      d->push([&] { x += y; }, {vy}, {vx}, {.name = "x += y"});  // y comes from the culprit
    } else if (slip == Slip::other_variable) {
      d->push([&] { w = 5; }, {}, {vw}, {.name = "w = 5"});
    }
    const auto t0 = Clock::now();
    try {
      if (d->rank() == 0) {
        d->wait_for_var(vx);
        ADD_FAILURE() << "rank 0: wait_for_var(x) returned";
      } else {
        d->wait_for_all();
        ADD_FAILURE() << "rank " << d->rank() << ": wait_for_all returned";
      }
    } catch (const DivergedError& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.rank(), c) << what;
      EXPECT_EQ(e.push(), 2U) << what;
      EXPECT_NE(what.find("first differ at push #2"), std::string::npos) << what;
      // Rank 0 (and any rank that agrees with it): the push of x += y.
      EXPECT_NE(what.find(": an op writing variable 0 that runs on rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find(slip == Slip::skip ? "rank " + std::to_string(c) + ": no push #2"
                                             : "rank " + std::to_string(c) + ": an op writing variable 2"),
                std::string::npos)
          << what;
    }
    const auto waited = Clock::now() - t0;
    std::printf("[ timing   ] rank %d: %s failed after %lld us\n", d->rank(),
                d->rank() == 0 ? "wait_for_var" : "wait_for_all",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(waited).count()));
    EXPECT_LT(waited, 1s * kScale) << "rank " << d->rank();
    if (d->rank() == 0) {
      EXPECT_EQ(x, 1U) << "rank 0 read a y that no transfer brought";
      // The check the others were in: rank 0 joined it already, and fails at once.
      const auto t1 = Clock::now();
      EXPECT_THROW(d->wait_for_all(), DivergedError);
      EXPECT_LT(Clock::now() - t1, 1s * kScale);
    }
    expect_failed_for_good(std::move(d), vx);
  }
}

}  // namespace
}  // namespace ordo::dist::test

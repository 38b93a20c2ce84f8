// No ready op is hidden from an idle worker: N readers of one variable,
// released together by a write or pushed with nothing pending, each waiting
// at a barrier for all N, all meet with N workers, on every threaded engine
// kind and CPU pool; the same right after a run of 100k short ops (which a
// batching worker would have learned to take many at a time).
#include <condition_variable>
#include <mutex>
#include <string>

#include "test_util.hpp"

namespace ordo::test {
namespace {

/// A barrier that gives up: arrive_and_wait() returns false if not all `n`
/// arrived within the limit (a reader hidden behind another never arrives),
/// or once another arrival gave up (the test then fails in one limit, not n).
class Meeting {
 public:
  explicit Meeting(int n) : n_(n) {}
  bool arrive_and_wait(std::chrono::seconds limit) {
    std::unique_lock lock(m_);
    if (++arrived_ == n_) cv_.notify_all();
    const bool met = cv_.wait_for(lock, limit, [&] { return arrived_ >= n_ || gave_up_; }) && !gave_up_;
    if (!met && !gave_up_) {
      gave_up_ = true;
      arrived_at_give_up_ = arrived_;
      cv_.notify_all();
    }
    return met;
  }
  /// How many had arrived when the first one gave up.
  int arrived_at_give_up() {
    std::lock_guard lock(m_);
    return arrived_at_give_up_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  bool gave_up_ = false;
  int arrived_at_give_up_ = 0;
};

enum class Release { by_a_write, at_push };

struct MeetCase {
  EngineKind kind;
  FnProperty prop;  // normal: the CPU pool; cpu_prioritized: the priority pool (per_device)
  int workers;
  Release release;
  bool after_short_ops;
};

std::string describe(const MeetCase& c) {
  return std::string(c.kind == EngineKind::pooled ? "pooled" : "per_device") +
         (c.prop == FnProperty::normal ? "_cpu" : "_cpu_priority") + "_" + std::to_string(c.workers) +
         (c.release == Release::by_a_write ? "_released_by_a_write" : "_pushed_free") +
         (c.after_short_ops ? "_after_100k_short_ops" : "");
}
std::string meet_name(const ::testing::TestParamInfo<MeetCase>& info) { return describe(info.param); }
void PrintTo(const MeetCase& c, std::ostream* os) { *os << describe(c); }

std::vector<MeetCase> meet_cases() {
  std::vector<MeetCase> out;
  for (EngineKind kind : {EngineKind::pooled, EngineKind::per_device}) {
    for (FnProperty prop : {FnProperty::normal, FnProperty::cpu_prioritized}) {
      if (kind == EngineKind::pooled && prop != FnProperty::normal) continue;  // one CPU pool only
      for (int n = 2; n <= 8; ++n) {
        for (Release r : {Release::by_a_write, Release::at_push}) {
          for (bool warm : {false, true}) out.push_back({kind, prop, n, r, warm});
        }
      }
    }
  }
  return out;
}

class ReadyOps : public ::testing::TestWithParam<MeetCase> {};

TEST_P(ReadyOps, NReadersWithNWorkersAllRunAtOnce) {
  const MeetCase& c = GetParam();
  const auto n = static_cast<unsigned>(c.workers);
  Options opts{.kind = c.kind, .cpu_workers = n};
  if (c.kind == EngineKind::per_device) opts.cpu_priority_workers = n;
  // Declared before the engine: its ops use them until it is destroyed.
  std::vector<std::uint64_t> slots(64);
  Gate writer_may_end;
  Meeting meeting(c.workers);
  std::atomic<int> met{0};
  Engine engine(opts);
  const OpAttrs attrs{.prop = c.prop};
  if (c.after_short_ops) {
    // Short ops on 64 variables, left in flight: the readers below are
    // pushed while the workers are still busy with them.
    std::vector<Var> vars;
    for (std::size_t i = 0; i < slots.size(); ++i) vars.push_back(engine.new_variable());
    for (int i = 0; i < 100'000; ++i) {
      const std::size_t k = static_cast<std::size_t>(i) % vars.size();
      engine.push_sync([&slots, k] { slots[k] = mix(slots[k], k); }, Context::cpu(), {}, {vars[k]}, attrs);
    }
  }
  Var v = engine.new_variable();
  if (c.release == Release::by_a_write) {
    // The readers queue behind this write and are released together by its completion.
    engine.push_sync([&] { writer_may_end.wait(); }, Context::cpu(), {}, {v}, attrs);
  }
  for (int i = 0; i < c.workers; ++i) {
    engine.push_sync(
        [&] {
          if (meeting.arrive_and_wait(std::chrono::seconds(10))) met.fetch_add(1);
        },
        Context::cpu(), {v}, {}, attrs);
  }
  writer_may_end.open();
  engine.wait_for_all();
  EXPECT_EQ(met.load(), c.workers) << "when the first reader gave up (10 s), only " << meeting.arrived_at_give_up()
                                   << " of " << c.workers
                                   << " readers were running: a ready reader waited behind a running one";
}

INSTANTIATE_TEST_SUITE_P(Engines, ReadyOps, ::testing::ValuesIn(meet_cases()), meet_name);

}  // namespace
}  // namespace ordo::test

// tests/graph/graph_test_util.hpp - what the graph tests share: the
// expected-error check, a random trace's variables and operators on an
// engine and its ops pushed, and the two threads the equivalence tests run
// beside a replayed (or automatically captured) trace.
#pragma once

#include <atomic>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/differential_trace.hpp"
#include "core/test_util.hpp"
#include "ordo/graph.hpp"

namespace ordo::test {

inline Options threaded(unsigned workers = 2) { return Options{.kind = EngineKind::pooled, .cpu_workers = workers}; }

/// Expects `fn` to throw ordo::Error with `code` and a message containing `needle`.
template <class F>
void expect_error(F&& fn, Errc code, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no ordo::Error thrown (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

/// Ops of a trace pushed as pre-built operators (their body is fixed): some
/// of the sync ones.
inline bool is_operator(const Trace& t, std::size_t i) { return t.ops[i].kind == Kind::sync && i % 7 == 3; }

/// A trace's variables and operators on one engine (the operators deleted
/// when it goes), and its ops pushed as the differential tests push them,
/// with bodies that fold an index into the values.
class TraceOps {
 public:
  TraceOps(Engine& engine, const Trace& t, std::vector<std::uint64_t>& vals, bool inline_ok,
           ThreadExecutor& completer)
      : engine_(engine), vals_(vals), inline_ok_(inline_ok), completer_(completer), opers_(t.ops.size()) {
    for (int i = 0; i < t.vars; ++i) vars_.push_back(engine.new_variable());
    for (std::size_t i = 0; i < t.ops.size(); ++i) {
      if (!is_operator(t, i)) continue;
      auto [reads, writes] = lists(t.ops[i]);
      opers_[i] = engine.new_operator([&t, i, &vals] { apply_op(t.ops[i], i, vals); }, reads, writes);
    }
  }
  ~TraceOps() {
    for (Operator& o : opers_) {
      if (!o.empty()) engine_.delete_operator(o);
    }
  }
  TraceOps(const TraceOps&) = delete;
  TraceOps& operator=(const TraceOps&) = delete;

  [[nodiscard]] const std::vector<Var>& vars() const { return vars_; }
  /// The trace's op i pushed as its operator.
  void push_operator(std::size_t i) { engine_.push(opers_[i], Context::cpu()); }
  /// `op` pushed as its kind says, its body folding index() in.
  template <class Index>
  void push(const OpSpec& op, Index index) {
    auto [reads, writes] = lists(op);
    std::vector<std::uint64_t>& vals = vals_;
    switch (op.kind) {
      case Kind::sync:
      case Kind::oper:
        engine_.push_sync([&op, index, &vals] { apply_op(op, index(), vals); }, Context::cpu(), reads, writes,
                          {.inline_ok = inline_ok_});
        break;
      case Kind::prioritized:
        engine_.push_sync([&op, index, &vals] { apply_op(op, index(), vals); }, Context::cpu(), reads, writes,
                          {.prop = FnProperty::cpu_prioritized, .priority = op.priority});
        break;
      case Kind::async_inline:
        engine_.push_async(
            [&op, index, &vals](RunContext, OnComplete done) {
              apply_op(op, index(), vals);
              done();
            },
            Context::cpu(), reads, writes);
        break;
      case Kind::async_thread:
        engine_.push_async(
            [&op, index, &vals, completer = &completer_](RunContext, OnComplete done) {
              apply_op(op, index(), vals);
              completer->post([done] { done(); });
            },
            Context::cpu(), reads, writes, {.prop = FnProperty::async});
        break;
    }
  }
  /// `op`'s variable lists.
  [[nodiscard]] std::pair<std::vector<Var>, std::vector<Var>> lists(const OpSpec& op) const {
    std::pair<std::vector<Var>, std::vector<Var>> rw;
    for (int r : op.reads) rw.first.push_back(vars_[static_cast<std::size_t>(r)]);
    for (int w : op.writes) rw.second.push_back(vars_[static_cast<std::size_t>(w)]);
    return rw;
  }

 private:
  Engine& engine_;
  std::vector<std::uint64_t>& vals_;
  bool inline_ok_;
  ThreadExecutor& completer_;
  std::vector<Var> vars_;
  std::vector<Operator> opers_;
};

/// Every value each variable takes in a serial run: fed the values after
/// each op (observe), it keeps what a conflicting op pushed between two of
/// the trace's ops may see.
class SerialHistory {
 public:
  explicit SerialHistory(std::size_t vars) : seen_(vars, std::set<std::uint64_t>{0}) {}
  void observe(const std::vector<int>& writes, const std::vector<std::uint64_t>& vals) {
    for (int w : writes) seen_[static_cast<std::size_t>(w)].insert(vals[static_cast<std::size_t>(w)]);
  }
  [[nodiscard]] bool had(std::size_t var, std::uint64_t value) const { return seen_[var].count(value) != 0; }

 private:
  std::vector<std::set<std::uint64_t>> seen_;
};

/// Two threads pushing, until stop(), ops that each hold a write on a random
/// shared variable, check that its value is one the serial run had (ordered
/// between two of the trace's ops, never inside one), and hide it while they
/// run (an op of the trace running at the same time would fold the hidden
/// value in: the result differs).
class ForeignPushers {
 public:
  ForeignPushers(Engine& engine, const std::vector<Var>& vars, std::vector<std::uint64_t>& vals,
                 const SerialHistory& history, std::uint64_t seed)
      : engine_(engine), vars_(vars), vals_(vals), history_(history) {
    a_ = std::thread([this, seed] { loop(seed ^ 0xA5A5); });
    b_ = std::thread([this, seed] { loop(seed ^ 0x5A5A); });
  }
  ~ForeignPushers() { stop(); }
  ForeignPushers(const ForeignPushers&) = delete;
  ForeignPushers& operator=(const ForeignPushers&) = delete;

  void stop() {
    stop_.store(true);
    if (a_.joinable()) a_.join();
    if (b_.joinable()) b_.join();
  }
  /// Conflicting ops that saw a value the serial run never had.
  [[nodiscard]] int bad() const { return bad_.load(); }

 private:
  void loop(std::uint64_t s) {
    std::mt19937_64 rng(s);
    const std::size_t n = vars_.size();
    while (!stop_.load(std::memory_order_relaxed)) {
      const auto w = static_cast<std::size_t>(rng() % n);
      const auto r = static_cast<std::size_t>(rng() % n);
      const std::uint64_t key = rng() | 1;
      engine_.push_sync(
          [this, w, key] {
            if (!history_.had(w, vals_[w])) bad_.fetch_add(1, std::memory_order_relaxed);
            vals_[w] ^= key;
            volatile int sink = 0;
            for (int k = 0; k < 200; ++k) sink = sink + k;
            vals_[w] ^= key;
          },
          Context::cpu(), vars_[r], vars_[w]);
      std::this_thread::yield();
    }
  }

  Engine& engine_;
  const std::vector<Var>& vars_;
  std::vector<std::uint64_t>& vals_;
  const SerialHistory& history_;
  std::atomic<bool> stop_{false};
  std::atomic<int> bad_{0};
  std::thread a_, b_;
};

}  // namespace ordo::test

// The code of docs/coroutines.md that the docs_snippets test checks: each
// [snippet:NAME] ... [end] region is quoted verbatim there, and this program
// runs as a smoke test, so every snippet compiles and works.
#undef NDEBUG  // the asserts are this smoke test's checks, in every build type
#include <ordo/channel.hpp>
#include <ordo/coro.hpp>
#include <ordo/for_each.hpp>
#include <ordo/generator.hpp>
#include <ordo/ordo.hpp>
#include <ordo/schedule.hpp>
#include <ordo/semaphore.hpp>
#include <ordo/task.hpp>
#include <ordo/timer.hpp>
#include <ordo/when_any.hpp>

#include <cassert>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

ordo::Task<bool> own_lease(ordo::Engine& engine, ordo::Var v) {
  bool refused = false;
  // [snippet:coro_own_lease]
  ordo::Lease lease = co_await ordo::push(engine, ordo::reads(), ordo::writes(v));
  try {
    co_await ordo::push(engine, ordo::reads(v), ordo::writes(), [] {}, {.name = "reader"});
  } catch (const ordo::Error& e) {  // e.code() == ordo::Errc::deadlock; e.what():
    // "co_await of op 'reader' would wait for ever: it queues on var 3 behind a
    // lease this coroutine holds; ..."
    refused = e.code() == ordo::Errc::deadlock;
  }
  lease.release();  // the reader, still pushed, runs now
  // [end]
  co_return refused;
}

ordo::Task<void> attributes(ordo::Engine& engine, ordo::Var a, ordo::Var b) {
  // [snippet:coro_attrs]
  // Access form: push(engine, reads, writes, ctx, attrs, stop)
  ordo::Lease lease = co_await ordo::push(engine, ordo::reads(a), ordo::writes(b), ordo::Context::cpu(), {.name = "x"});
  lease.release();
  // Function form: push(engine, reads, writes, fn, ctx, attrs, stop)
  int n = co_await ordo::push(engine, ordo::reads(a), ordo::writes(), [] { return 7; }, ordo::Context::cpu(),
                              {.prop = ordo::FnProperty::cpu_prioritized, .priority = 5, .name = "count"});
  // The member spelling, with the same arguments.
  ordo::Lease fill = co_await engine.push(ordo::reads(), ordo::writes(b), ordo::Context::cpu(), {.name = "fill"});
  fill.release();
  // Attributes without a context: the CPU context.
  int m = co_await engine.push(ordo::reads(a), ordo::writes(), [] { return 8; }, {.name = "count-cpu"});
  ordo::Lease named = co_await ordo::push(engine, ordo::reads(), ordo::writes(b), {.name = "named"});
  named.release();
  // [end]
  assert(n == 7 && m == 8);
}

// The toolkit (docs/coroutines.md, "The toolkit").
ordo::Task<void> bounded(ordo::Engine& engine, ordo::Var total_var, long& total) {
  std::vector<std::string> paths{"a.txt", "bb.txt", "ccc.txt", "dddd.txt", "eeeee.txt"};
  // [snippet:toolkit_for_each]
  // At most 4 files in flight; each adds its size to one variable's total.
  co_await ordo::for_each(paths, 4, [&](const std::string& path) -> ordo::Task<void> {
    long n = co_await ordo::push(engine, ordo::reads(), ordo::writes(), [&] { return static_cast<long>(path.size()); });
    co_await ordo::push(engine, ordo::reads(), ordo::writes(total_var), [&total, n] { total += n; });
  });
  // [end]
}

ordo::Task<void> semaphore(ordo::Engine& engine) {
  ordo::Var v = engine.new_variable();
  // [snippet:toolkit_semaphore]
  ordo::Semaphore lanes(2);
  {
    ordo::SemaphorePermit permit = co_await lanes.permit();  // suspends while both are taken
    co_await ordo::push(engine, ordo::reads(v), ordo::writes(), [] {});
  }  // given back here
  // [end]
  assert(lanes.available() == 2);
}

ordo::Task<void> channel(ordo::Engine& engine) {
  // [snippet:toolkit_channel]
  ordo::Channel<int> ch(8);  // holds up to 8 values: a full channel suspends the sender
  auto producer = [&]() -> ordo::Task<void> {
    for (int i = 0; i < 100; ++i) co_await ch.send(i);
    ch.close();
  };
  auto consumer = [&]() -> ordo::Task<long> {
    long sum = 0;
    while (std::optional<int> x = co_await ch.receive()) sum += *x;  // ends once closed and drained
    co_return sum;
  };
  auto [done, sum] = co_await ordo::when_all(producer(), consumer());
  // [end]
  (void)done;
  (void)engine;
  assert(sum == 4950);
}

ordo::Task<void> race(ordo::Engine& engine) {
  ordo::Var slow_var = engine.new_variable();
  // [snippet:toolkit_when_any]
  auto slow = [&](std::stop_token st) -> ordo::Task<int> {
    co_await ordo::sleep_for(engine, std::chrono::hours(1), st);  // cancelled by the winner
    co_return co_await ordo::push(engine, ordo::reads(slow_var), ordo::writes(), [] { return 1; }, st);
  };
  auto fast = [&]() -> ordo::Task<std::string> { co_return "fast"; };
  std::stop_source stop;
  std::variant<int, std::string> r = co_await ordo::when_any(stop, slow(stop.get_token()), fast());
  assert(r.index() == 1);  // `slow` was stopped and joined before when_any returned
  // [end]
}

ordo::Task<void> timers(ordo::Engine& engine) {
  // [snippet:toolkit_timers]
  co_await ordo::sleep_for(engine, std::chrono::milliseconds(1));  // resumes on a worker
  co_await ordo::sleep_until(engine, std::chrono::steady_clock::now() + std::chrono::milliseconds(1));
  try {
    co_await ordo::with_timeout(engine, std::chrono::milliseconds(1), [&](std::stop_token st) -> ordo::Task<void> {
      co_await ordo::sleep_for(engine, std::chrono::hours(1), st);  // cut short by the deadline
    });
  } catch (const ordo::Error& e) {
    assert(e.code() == ordo::Errc::timed_out);
  }
  // [end]
}

ordo::Task<void> hops(ordo::Engine& engine) {
  // [snippet:toolkit_schedule]
  co_await ordo::schedule(engine);  // now on a CPU worker of the engine
  for (int i = 0; i < 3; ++i) {
    co_await ordo::yield(engine);   // let queued work run, then continue on a worker
  }
  // [end]
}

ordo::Task<void> server(ordo::Engine& engine, ordo::Var key, std::string& value) {
  // [snippet:toolkit_error_policy]
  const ordo::OpAttrs request{.name = "set", .error_to_awaiter = true};
  try {
    co_await ordo::push(engine, ordo::reads(), ordo::writes(key), [] { throw std::runtime_error("bad request"); },
                        ordo::Context::cpu(), request);
  } catch (const std::runtime_error&) {
    // this request failed; the key carries no error
  }
  co_await ordo::push(engine, ordo::reads(), ordo::writes(key), [&] { value = "ok"; }, ordo::Context::cpu(), request);
  // [end]
}

ordo::Task<void> wait_forever(ordo::Engine& engine, std::stop_token st) {
  co_await ordo::sleep_for(engine, std::chrono::hours(1), st);
}

void scope_stop(ordo::Engine& engine) {
  // [snippet:toolkit_scope_stop]
  ordo::AsyncScope scope;
  scope.spawn([&](std::stop_token st) { return wait_forever(engine, st); });  // made with the scope's token
  scope.request_stop();  // every pending wait given a scope token is cancelled now
  try {
    scope.sync_join();
  } catch (const ordo::CancelledError&) {  // the task let its CancelledError escape
  }
  // [end]
}

ordo::Task<int> sum_squares(ordo::Engine& engine) {
  // [snippet:toolkit_generator]
  auto squares = [&engine](int n) -> ordo::AsyncGenerator<int> {
    for (int i = 0; i < n; ++i) {
      co_yield co_await ordo::push(engine, ordo::reads(), ordo::writes(), [i] { return i * i; });
    }
  };
  int sum = 0;
  auto gen = squares(4);
  while (std::optional<int> x = co_await gen.next()) sum += *x;  // 0 + 1 + 4 + 9
  // [end]
  co_return sum;
}

}  // namespace

int main() {
  ordo::Engine engine;
  ordo::Var a = engine.new_variable(), b = engine.new_variable();
  ordo::sync_wait(attributes(engine, a, b));
  assert(ordo::sync_wait(own_lease(engine, a)));
  long total = 0;
  ordo::Var total_var = engine.new_variable();
  ordo::sync_wait(bounded(engine, total_var, total));
  engine.wait_for_var(total_var);
  assert(total == 5 + 6 + 7 + 8 + 9);
  ordo::sync_wait(semaphore(engine));
  ordo::sync_wait(channel(engine));
  ordo::sync_wait(race(engine));
  ordo::sync_wait(timers(engine));
  ordo::sync_wait(hops(engine));
  std::string value;
  ordo::Var key = engine.new_variable();
  ordo::sync_wait(server(engine, key, value));
  engine.wait_for_var(key);  // no error on the key
  assert(value == "ok");
  scope_stop(engine);
  assert(ordo::sync_wait(sum_squares(engine)) == 14);
  engine.wait_for_all();
  std::printf("coroutine examples OK\n");
  return 0;
}

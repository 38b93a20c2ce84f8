// A program outside the ordo tree, built against an installed ordo: the
// engine (ordo::core), the header-only coroutine layer, the toolkit's
// algorithms over a std::vector, and a misuse caught as the ordo::Error the
// library threw. Built with g++ and clang++ (the toolkit's range handling
// once failed with clang 14 and libstdc++ 12: issue 43).
#include <ordo/coro.hpp>
#include <ordo/for_each.hpp>
#include <ordo/ordo.hpp>
#include <ordo/task.hpp>
#include <ordo/when_any.hpp>

#include <cstdio>
#include <stop_token>
#include <utility>
#include <vector>

namespace {

ordo::Task<int> add_one(ordo::Engine& engine, ordo::Var v, int& value) {
  ordo::Lease lease = co_await ordo::push(engine, ordo::reads(), ordo::writes(v));
  value += 1;
  co_return value;
}

ordo::Task<int> twice(int x) { co_return 2 * x; }

// Every toolkit algorithm that takes a container, given a std::vector.
ordo::Task<int> toolkit(ordo::Engine& engine, ordo::Var v, std::vector<int>& values) {
  int sum = 0;
  auto add = [&](int x) -> ordo::Task<void> {
    co_await ordo::push(engine, ordo::reads(), ordo::writes(v), [&sum, x] { sum += x; }, {.name = "add"});
  };
  co_await ordo::for_each(values, 2, add);  // an lvalue vector
  const std::vector<int>& const_values = values;
  co_await ordo::for_each(const_values, 3, add);
  std::vector<ordo::Task<int>> tasks;
  for (int x : values) tasks.push_back(twice(x));
  for (int r : co_await ordo::when_all(std::move(tasks))) sum += r;
  tasks.clear();
  for (int x : values) tasks.push_back(twice(x));
  for (int r : co_await ordo::when_all(std::move(tasks), 2)) sum += r;
  tasks.clear();
  tasks.push_back(twice(5));
  std::stop_source stop;
  sum += (co_await ordo::when_any(stop, std::move(tasks))).second;
  co_return sum;
}

}  // namespace

int main() {
  ordo::Engine engine;
  ordo::Var v = engine.new_variable();
  int value = 0;
  for (int i = 0; i < 100; ++i) engine.push_sync([&value] { value += 1; }, ordo::Context::cpu(), {}, {v});
  engine.wait_for_var(v);
  const int after = ordo::sync_wait(add_one(engine, v, value));
  std::vector<int> values{1, 2, 3};
  const int toolkit_sum = ordo::sync_wait(toolkit(engine, v, values));
  // An rvalue vector, moved into the task (outside co_await: g++ 12 rejects
  // a braced list there, docs/coroutines.md).
  ordo::sync_wait(ordo::for_each(std::vector<int>{4, 5}, 2, [](int) -> ordo::Task<void> { co_return; }));
  engine.delete_variable(v);
  bool caught = false;
  try {
    engine.push_sync([] {}, ordo::Context::cpu(), {v}, {});
  } catch (const ordo::Error& e) {
    caught = e.code() == ordo::Errc::deleted_var;
  }
  std::printf("consumer_core: value=%d after coroutine=%d, toolkit=%d, misuse caught: %d\n", value, after,
              toolkit_sum, caught);
  // 6 + 6 (for_each twice) + 12 + 12 (when_all twice) + 10 (when_any)
  return value == 101 && after == 101 && toolkit_sum == 46 && caught ? 0 : 1;
}

// A program outside the ordo tree, built against an installed ordo: the
// engine (ordo::core), the header-only coroutine layer, and a misuse caught
// as the ordo::Error the library threw.
#include <ordo/coro.hpp>
#include <ordo/ordo.hpp>
#include <ordo/task.hpp>

#include <cstdio>

namespace {

ordo::Task<int> add_one(ordo::Engine& engine, ordo::Var v, int& value) {
  ordo::Lease lease = co_await ordo::push(engine, ordo::reads(), ordo::writes(v));
  value += 1;
  co_return value;
}

}  // namespace

int main() {
  ordo::Engine engine;
  ordo::Var v = engine.new_variable();
  int value = 0;
  for (int i = 0; i < 100; ++i) engine.push_sync([&value] { value += 1; }, ordo::Context::cpu(), {}, {v});
  engine.wait_for_var(v);
  const int after = ordo::sync_wait(add_one(engine, v, value));
  engine.delete_variable(v);
  bool caught = false;
  try {
    engine.push_sync([] {}, ordo::Context::cpu(), {v}, {});
  } catch (const ordo::Error& e) {
    caught = e.code() == ordo::Errc::deleted_var;
  }
  std::printf("consumer_core: value=%d after coroutine=%d, misuse caught: %d\n", value, after, caught);
  return value == 101 && after == 101 && caught ? 0 : 1;
}

// The code of docs/coroutines.md that the docs_snippets test checks: each
// [snippet:NAME] ... [end] region is quoted verbatim there, and this program
// runs as a smoke test, so every snippet compiles and works.
#undef NDEBUG  // the asserts are this smoke test's checks, in every build type
#include <ordo/coro.hpp>
#include <ordo/ordo.hpp>
#include <ordo/task.hpp>

#include <cassert>
#include <cstdio>

namespace {

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
  // [end]
  assert(n == 7);
}

}  // namespace

int main() {
  ordo::Engine engine;
  ordo::Var a = engine.new_variable(), b = engine.new_variable();
  ordo::sync_wait(attributes(engine, a, b));
  engine.wait_for_all();
  std::printf("coroutine examples OK\n");
  return 0;
}

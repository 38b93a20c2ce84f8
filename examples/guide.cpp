// The code of docs/guide.md. Each [snippet:NAME] ... [end] region is quoted
// verbatim in the guide; the `docs_snippets` test checks they stay in sync,
// and this program runs as a smoke test, so every snippet compiles and works.
#undef NDEBUG  // the asserts are this smoke test's checks, in every build type
#include <ordo/error_code.hpp>
#include <ordo/ordo.hpp>

#include <cassert>
#include <chrono>
#include <cstdio>
#include <system_error>
#include <stdexcept>
#include <thread>
#include <vector>

namespace {

void basics() {
  // [snippet:basics]
  ordo::Engine engine;  // per_device engine, one CPU worker per core
  ordo::Var in = engine.new_variable();
  ordo::Var out = engine.new_variable();
  std::vector<float> input, output;

  engine.push_sync([&] { input.assign(1024, 1.0f); }, ordo::Context::cpu(), {}, {in});
  engine.push_sync(
      [&](ordo::RunContext rc) {  // rc.worker: which worker runs it
        output.clear();
        for (float x : input) output.push_back(2 * x);
      },
      ordo::Context::cpu(), /*reads=*/{in}, /*writes=*/{out}, {.name = "double"});
  engine.wait_for_var(out);  // every write of `out` pushed so far is done
  // [end]
  assert(output.size() == 1024 && output[0] == 2.0f);
}

void async_ops() {
  ordo::Engine engine;
  ordo::Var buffer = engine.new_variable();
  std::vector<char> data;
  // [snippet:async]
  engine.push_async(
      [&](ordo::RunContext, ordo::OnComplete done) {
        // Hand the slow part to another thread; the op ends when done() is called.
        std::thread([&data, done] {
          data.assign(4096, 'x');
          done();  // or done(std::current_exception()) on failure
        }).detach();
      },
      ordo::Context::cpu(), {}, {buffer}, {.prop = ordo::FnProperty::async, .name = "fetch"});
  engine.push_sync([&] { std::printf("fetched %zu bytes\n", data.size()); }, ordo::Context::cpu(), {buffer}, {});
  // [end]
  engine.wait_for_all();
}

void operators() {
  ordo::Engine engine;
  ordo::Var counter = engine.new_variable();
  long n = 0;
  // [snippet:operator]
  ordo::Operator step = engine.new_operator([&n] { ++n; }, {}, {counter}, {.name = "step"});
  for (int i = 0; i < 1000; ++i) engine.push(step, ordo::Context::cpu());  // no list copying per push
  engine.delete_operator(step);  // pushes already made still run
  // [end]
  engine.wait_for_all();
  assert(n == 1000);
}

void errors() {
  ordo::Engine engine;
  ordo::Var raw = engine.new_variable(), clean = engine.new_variable();
  // [snippet:errors]
  engine.push_sync([] { throw std::runtime_error("bad record"); }, ordo::Context::cpu(), {}, {raw});
  engine.push_sync([] { /* skipped: its input carries an error */ }, ordo::Context::cpu(), {raw}, {clean});
  try {
    engine.wait_for_var(clean);  // rethrows the original exception, then clears it from `clean`
  } catch (const std::runtime_error& e) {
    std::printf("caught: %s\n", e.what());
  }
  // Recover: an always_run op runs despite the error and, on success, clears it.
  engine.push_sync([] { /* reset raw */ }, ordo::Context::cpu(), {}, {raw}, {.always_run = true});
  // [end]
  engine.wait_for_all();  // no throw: the error was already rethrown once, by wait_for_var
}

void misuse() {
  ordo::Engine engine;
  ordo::Var v = engine.new_variable();
  // [snippet:misuse]
  engine.delete_variable(v);  // runs after every op already pushed on v
  try {
    engine.push_sync([] {}, ordo::Context::cpu(), {v}, {});
  } catch (const ordo::Error& e) {
    assert(e.code() == ordo::Errc::deleted_var);  // what(): "push of an unnamed op: var 0 was deleted"
  }
  // [end]
}

void error_codes() {
  ordo::Engine engine;
  // [snippet:errc]
  ordo::Var never_made;  // default-constructed: names no variable
  try {
    engine.push_sync([] {}, ordo::Context::cpu(), {never_made}, {});
  } catch (const ordo::Error& e) {
    assert(e.code() == ordo::Errc::empty_var);  // which rule; what() says where
    std::error_code ec = ordo::error_code_of(e);  // <ordo/error_code.hpp>: category "ordo"
    assert(ec == ordo::Errc::empty_var && ec.message() == "empty variable handle");
  }
  // [end]
}

void engines() {
  // [snippet:engines]
  ordo::Engine debug(ordo::Options{.kind = ordo::EngineKind::naive});  // inline, in push order
  ordo::Engine pooled(ordo::Options{.kind = ordo::EngineKind::pooled, .cpu_workers = 4});
  ordo::Engine unbounded(ordo::Options{.max_in_flight = 0});  // default: 4096 ops in flight
  ordo::Engine chosen(ordo::Options::from_env());  // ORDO_ENGINE=naive|pooled|per_device, ...
  // [end]
}

void environment() {
  // [snippet:env]
  ordo::Options mine{.cpu_workers = 2};
  mine.profile.trace_path = "run-trace.json";           // where ORDO_PROFILE=1 would write the trace
  ordo::Engine engine(ordo::Options::from_env(mine));  // the ORDO_* variables that are set win over `mine`
  // [end]
}

void shutdown() {
  // [snippet:shutdown]
  std::vector<ordo::ErrorReport> reports;
  {
    ordo::Engine engine(ordo::Options{.shutdown_timeout = std::chrono::milliseconds(50),
                                      .on_unobserved_error = [&](const ordo::ErrorReport& r) { reports.push_back(r); }});
    ordo::Var v = engine.new_variable();
    engine.push_async([](ordo::RunContext, ordo::OnComplete) { /* drops its OnComplete: never completes */ },
                      ordo::Context::cpu(), {}, {v}, {.prop = ordo::FnProperty::async, .name = "lost"});
  }  // ~Engine: no progress for 50 ms, so it reports "lost" and abandons it
  assert(reports.size() == 1 && reports[0].op_name == "lost");
  // [end]
  std::printf("shutdown report: %s: %s\n", reports[0].op_name.c_str(), reports[0].message.c_str());
}

}  // namespace

int main() {
  basics();
  async_ops();
  operators();
  errors();
  misuse();
  error_codes();
  engines();
  environment();
  shutdown();
  std::printf("guide examples OK\n");
  return 0;
}

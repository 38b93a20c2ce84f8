// demo: ops running in parallel where they may and in dependency order where
// they must. Prints which worker ran what, and when.
//
//   demo [--trace out.json] [--dot graph.dot]
//     --trace: profile the run and write a Chrome / Perfetto trace (open it in
//              ui.perfetto.dev); ORDO_PROFILE=out.json does the same
//     --dot:   profile the run and write the dependency graph as Graphviz DOT
#include <ordo/ordo.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

/// Busy work standing in for real computation (no sleeping: workers stay busy).
void work(std::chrono::milliseconds d) {
  const auto until = Clock::now() + d;
  while (Clock::now() < until) {
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Options{} plus the environment (ORDO_ENGINE, ORDO_PROFILE, ...), plus the flags.
  ordo::Options options = ordo::Options::from_env();
  std::string dot_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--trace") == 0 && i + 1 < argc) {
      options.profile.enabled = true;
      options.profile.trace_path = argv[++i];  // written when the engine is destroyed
    } else if (std::strcmp(argv[i], "--dot") == 0 && i + 1 < argc) {
      options.profile.enabled = true;
      dot_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--trace out.json] [--dot graph.dot]\n", argv[0]);
      return 2;
    }
  }
  ordo::Engine engine(options);  // per_device engine by default, one CPU worker per core
  const auto t0 = Clock::now();
  std::mutex log_mutex;
  auto log = [&](const char* what, const ordo::RunContext& rc) {
    const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::lock_guard lock(log_mutex);
    std::printf("  %7.2f ms  worker %d  %s\n", ms, rc.worker, what);
  };

  // a = load(); b = f(a); c = g(a); d = b + c  -- b and c may overlap, d waits for both.
  ordo::Var a = engine.new_variable(), b = engine.new_variable(), c = engine.new_variable(),
            d = engine.new_variable();
  double va = 0, vb = 0, vc = 0, vd = 0;
  const ordo::Context cpu = ordo::Context::cpu();
  std::printf("pushing: load a; b = 2a; c = a + 1; d = b + c (b and c read a: they may run together)\n");
  engine.push_sync([&](ordo::RunContext rc) { log("load a    start", rc); work(std::chrono::milliseconds(20)); va = 20; log("load a    end", rc); },
                   cpu, {}, {a}, {.name = "load"});
  engine.push_sync([&](ordo::RunContext rc) { log("b = 2a    start", rc); work(std::chrono::milliseconds(30)); vb = 2 * va; log("b = 2a    end", rc); },
                   cpu, {a}, {b}, {.name = "twice"});
  engine.push_sync([&](ordo::RunContext rc) { log("c = a + 1 start", rc); work(std::chrono::milliseconds(30)); vc = va + 1; log("c = a + 1 end", rc); },
                   cpu, {a}, {c}, {.name = "plus_one"});
  engine.push_sync([&](ordo::RunContext rc) { log("d = b + c start", rc); vd = vb + vc; log("d = b + c end", rc); },
                   cpu, {b, c}, {d}, {.name = "sum"});
  engine.wait_for_var(d);
  std::printf("d = %.0f (expected 61)\n\n", vd);

  // A chain on one variable runs strictly in push order, while independent
  // chains on other variables run beside it.
  std::printf("three chains of 4 increments each, on three variables:\n");
  std::vector<ordo::Var> chains = {engine.new_variable(), engine.new_variable(), engine.new_variable()};
  std::vector<std::string> order(3);
  std::vector<std::string> labels;
  for (int step = 0; step < 4; ++step) {
    for (int k = 0; k < 3; ++k) {
      engine.push_sync(
          [&, k, step](ordo::RunContext rc) {
            work(std::chrono::milliseconds(5));
            order[static_cast<std::size_t>(k)] += std::to_string(step);
            const std::string what = "chain " + std::to_string(k) + " step " + std::to_string(step);
            log(what.c_str(), rc);
          },
          cpu, {}, {chains[static_cast<std::size_t>(k)]}, {.name = "chain step"});
    }
  }
  engine.wait_for_all();
  bool ok = vd == 61;
  for (int k = 0; k < 3; ++k) {
    std::printf("chain %d ran steps in order %s\n", k, order[static_cast<std::size_t>(k)].c_str());
    ok = ok && order[static_cast<std::size_t>(k)] == "0123";
  }

  // An exception travels along the data flow to whoever waits on it.
  ordo::Var e = engine.new_variable(), f = engine.new_variable();
  engine.push_sync([] { throw std::runtime_error("sensor offline"); }, cpu, {}, {e}, {.name = "read_sensor"});
  engine.push_sync([] { std::printf("never runs\n"); }, cpu, {e}, {f}, {.name = "filter"});
  try {
    engine.wait_for_var(f);
    ok = false;
  } catch (const std::runtime_error& err) {
    std::printf("\nwait_for_var(f) rethrew the error of read_sensor: %s\n", err.what());
  }
  engine.wait_for_all();
  if (engine.profiler().enabled()) {
    std::cout << "\nprofile (ordo/profiler.hpp):\n" << engine.profiler().summary();
    if (!dot_path.empty()) {
      engine.profiler().write_dot(dot_path);
      std::printf("dependency graph written to %s (dot -Tsvg %s -o graph.svg)\n", dot_path.c_str(), dot_path.c_str());
    }
    if (!options.profile.trace_path.empty()) {
      std::printf("trace: %s, written when the engine is destroyed; open it in https://ui.perfetto.dev\n",
                  options.profile.trace_path.c_str());
    }
  }
  std::printf("%s\n", ok ? "demo OK" : "demo FAILED");
  return ok ? 0 : 1;
}

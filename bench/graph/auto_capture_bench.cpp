// bench/graph/auto_capture_bench.cpp - a step that repeats, made three
// ways: pushed op by op, through ordo::AutoCapture (recorded, compared with
// the learned graph, replayed with the step's own bodies), and captured
// once then replayed (Engine::capture + Engine::replay, the step's number as
// the replay's argument). Timed: all the steps and the final wait; the
// median of --runs runs, in ns per op and M ops/s.
//
//   ordo_auto_capture_bench [--workload w1|loader|all] [--mode pushed|auto|explicit|all]
//                           [--ops N] [--runs N]
//
// w1: 1,000 independent ops per step, one variable each (W1 of
// ordo_workloads, made a step); loader: 2 ops per step (a fill of a batch
// buffer from the step's number, then a fold of it into a sum), on 3
// variables, as examples/loader.cpp's step. --ops (default 200,000) is the
// total over all steps. The bodies capture the step's number by value
// (pushed, auto) or read it as ordo::replay_arg (explicit), and every run's
// result is checked against the pushed one's.
//
// Instructions per op of the automatic path (callgrind): run --mode auto
// --runs 1 at two --ops counts and divide the difference of the totals by
// the difference of the ops (the learning iteration and the engine's
// start-up cancel out).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ordo/graph.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

enum class Mode { pushed, automatic, explicit_capture };
const char* name(Mode m) {
  return m == Mode::pushed ? "pushed" : m == Mode::automatic ? "auto" : "explicit";
}

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b;
  return z ^ (z >> 29);
}

struct Result {
  double seconds = 0;
  std::uint64_t check = 0;
};

/// `steps` steps, each push_step(s) (push_step(-1): the step captured, its
/// bodies reading the step's number as the replay's argument), made as
/// `mode` says; timed to the end of the final wait.
template <class PushStep>
Result timed(ordo::Engine& engine, Mode mode, long steps, PushStep push_step) {
  ordo::Graph g;
  if (mode == Mode::explicit_capture) g = engine.capture([&] { push_step(-1); });
  ordo::AutoCapture loop(engine);
  const auto t0 = clock_type::now();
  for (long s = 0; s < steps; ++s) {
    if (mode == Mode::pushed) {
      push_step(s);
    } else if (mode == Mode::automatic) {
      loop.run([&] { push_step(s); });
    } else {
      engine.replay(g, s);
    }
  }
  engine.wait_for_all();
  Result r;
  r.seconds = std::chrono::duration<double>(clock_type::now() - t0).count();
  if (mode == Mode::automatic && loop.replayed() != static_cast<std::uint64_t>(steps - 1)) {
    std::fprintf(stderr, "auto: %llu of %ld steps replayed (%s)\n", static_cast<unsigned long long>(loop.replayed()),
                 steps, loop.last_mismatch().c_str());
    std::exit(1);
  }
  return r;
}

/// W1 as a step: `width` independent ops, each folding the step's number
/// into its own variable's value.
Result run_w1(Mode mode, long ops) {
  const int width = 1000;
  const long steps = std::max(1L, ops / width);
  ordo::Engine engine;
  std::vector<ordo::Var> vars;
  std::vector<std::uint64_t> vals(width, 0);
  for (int i = 0; i < width; ++i) vars.push_back(engine.new_variable());
  auto push_step = [&](long step) {
    for (int i = 0; i < width; ++i) {
      std::uint64_t* v = &vals[static_cast<std::size_t>(i)];
      if (step >= 0) {
        engine.push_sync([v, step] { *v = mix(*v, static_cast<std::uint64_t>(step)); }, ordo::Context::cpu(), {},
                         vars[static_cast<std::size_t>(i)]);
      } else {
        engine.push_sync([v] { *v = mix(*v, static_cast<std::uint64_t>(ordo::replay_arg<long>())); },
                         ordo::Context::cpu(), {}, vars[static_cast<std::size_t>(i)]);
      }
    }
  };
  Result r = timed(engine, mode, steps, push_step);
  for (std::uint64_t v : vals) r.check = mix(r.check, v);
  return r;
}

/// The loader's step: fill a batch buffer from the step's number, then fold
/// it into a running sum (examples/loader.cpp's read and process, without
/// the io).
Result run_loader(Mode mode, long ops) {
  const long steps = std::max(1L, ops / 2);
  ordo::Engine engine;
  ordo::Var batch = engine.new_variable(), sum = engine.new_variable(), source = engine.new_variable();
  std::uint64_t buffer[8] = {};
  std::uint64_t total = 0;
  auto push_step = [&](long step) {
    if (step >= 0) {
      engine.push_sync(
          [&buffer, step] {
            for (int i = 0; i < 8; ++i) buffer[i] = mix(static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(i));
          },
          ordo::Context::cpu(), source, batch, {.name = "read"});
    } else {
      engine.push_sync(
          [&buffer] {
            const long s = ordo::replay_arg<long>();
            for (int i = 0; i < 8; ++i) buffer[i] = mix(static_cast<std::uint64_t>(s), static_cast<std::uint64_t>(i));
          },
          ordo::Context::cpu(), source, batch, {.name = "read"});
    }
    engine.push_sync(
        [&buffer, &total] {
          for (std::uint64_t w : buffer) total = mix(total, w);
        },
        ordo::Context::cpu(), batch, sum, {.name = "process"});
  };
  Result r = timed(engine, mode, steps, push_step);
  r.check = total;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string workload = "all";
  std::string mode_arg = "all";
  long ops = 200000;
  int runs = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--workload") {
      workload = next();
    } else if (a == "--mode") {
      mode_arg = next();
    } else if (a == "--ops") {
      ops = std::atol(next());
    } else if (a == "--runs") {
      runs = std::atoi(next());
    } else {
      std::fprintf(stderr, "usage: %s [--workload w1|loader|all] [--mode pushed|auto|explicit|all] [--ops N] [--runs N]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<Mode> modes;
  for (Mode m : {Mode::pushed, Mode::automatic, Mode::explicit_capture}) {
    if (mode_arg == "all" || mode_arg == name(m)) modes.push_back(m);
  }
  std::vector<std::string> workloads;
  for (const char* w : {"w1", "loader"}) {
    if (workload == "all" || workload == w) workloads.emplace_back(w);
  }
  if (modes.empty() || workloads.empty() || runs < 1 || ops < 2) {
    std::fprintf(stderr, "nothing to run: check --workload, --mode, --ops and --runs\n");
    return 2;
  }
  int status = 0;
  for (const std::string& w : workloads) {
    std::uint64_t reference = 0;
    bool have_reference = false;
    for (Mode m : modes) {
      std::vector<double> secs;
      for (int r = 0; r < runs; ++r) {
        const Result res = w == "w1" ? run_w1(m, ops) : run_loader(m, ops);
        secs.push_back(res.seconds);
        if (!have_reference) {
          reference = res.check;
          have_reference = true;
        } else if (res.check != reference) {
          std::fprintf(stderr, "%s %s: result differs from the first run's\n", w.c_str(), name(m));
          status = 1;
        }
      }
      std::sort(secs.begin(), secs.end());
      const double med = secs[secs.size() / 2];
      const long done = w == "w1" ? std::max(1L, ops / 1000) * 1000 : std::max(1L, ops / 2) * 2;
      std::printf("workload=%s mode=%s ops=%ld runs=%d median_ns_per_op=%.1f mops=%.2f\n", w.c_str(), name(m), done,
                  runs, med * 1e9 / static_cast<double>(done), static_cast<double>(done) / med / 1e6);
    }
  }
  return status;
}

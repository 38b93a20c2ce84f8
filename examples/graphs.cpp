// The code of docs/graphs.md. Each [snippet:NAME] ... [end] region is quoted
// verbatim there; the `docs_snippets` test checks they stay in sync, and this
// program runs as a smoke test (example_graphs), so every snippet compiles
// and runs.
//
// A training-style step (decode a batch, augment it, update the weights,
// log the loss) captured once and replayed per batch, with its two kinds of
// parameters: the batch index as the replay's argument, the learning rate
// as a variable's contents. The same steps pushed op by op must give the
// same weights, bit for bit; the program prints both timings.
//
//   graphs [--batches N] [--width W]
#include <ordo/coro.hpp>
#include <ordo/graph.hpp>
#include <ordo/ordo.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace {

std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  std::uint64_t z = a * 0x9E3779B97F4A7C15ULL + b;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  return z ^ (z >> 31);
}

/// The model: what the step's variables guard.
struct Model {
  int width = 0;
  std::vector<std::uint64_t> batch, augmented, weights;
  std::uint64_t rate = 1;  // the learning rate: set between steps by a push
  std::vector<std::uint64_t> losses;
  explicit Model(int w) : width(w), batch(w), augmented(w), weights(w, 1) {}
};

struct Vars {
  ordo::Var batch, augmented, weights, rate, log;
};

// One step: the batch index comes from the caller (pushed) or from the
// replay's argument (captured); the learning rate from the `rate` variable.
void push_step(ordo::Engine& engine, Model& m, const Vars& v, int fixed_batch) {
  // [snippet:step]
  auto batch_index = [fixed_batch] { return fixed_batch >= 0 ? fixed_batch : ordo::replay_arg<int>(); };
  engine.push_sync([&m, batch_index] {
    const int b = batch_index();
    for (int i = 0; i < m.width; ++i) m.batch[i] = mix(static_cast<std::uint64_t>(b), static_cast<std::uint64_t>(i));
  }, ordo::Context::cpu(), {}, {v.batch}, {.name = "decode"});
  engine.push_sync([&m] {
    for (int i = 0; i < m.width; ++i) m.augmented[i] = mix(m.batch[i], 7);
  }, ordo::Context::cpu(), {v.batch}, {v.augmented}, {.name = "augment"});
  engine.push_sync([&m] {
    for (int i = 0; i < m.width; ++i) m.weights[i] = mix(m.weights[i], m.augmented[i] * m.rate);
  }, ordo::Context::cpu(), {v.augmented, v.rate}, {v.weights}, {.name = "update"});
  engine.push_sync([&m] {
    m.losses.push_back(m.weights[0] ^ m.augmented[0]);
  }, ordo::Context::cpu(), {v.weights, v.augmented}, {v.log}, {.name = "log"});
  // [end]
}

Vars make_vars(ordo::Engine& engine) {
  return {engine.new_variable(), engine.new_variable(), engine.new_variable(), engine.new_variable(),
          engine.new_variable()};
}

/// Between steps: a new learning rate, pushed like any op.
void set_rate(ordo::Engine& engine, Model& m, const Vars& v, int step) {
  engine.push_sync([&m, step] { m.rate = 1 + static_cast<std::uint64_t>(step / 10); }, ordo::Context::cpu(), {},
                   {v.rate});
}

double run_pushed(Model& m, int batches) {
  ordo::Engine engine;
  const Vars v = make_vars(engine);
  const auto t0 = std::chrono::steady_clock::now();
  for (int b = 0; b < batches; ++b) {
    set_rate(engine, m, v, b);
    push_step(engine, m, v, b);
  }
  engine.wait_for_all();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double run_replayed(Model& m, int batches) {
  ordo::Engine engine;
  const Vars v = make_vars(engine);
  // [snippet:capture]
  ordo::Graph step = engine.capture([&] { push_step(engine, m, v, -1); });
  // step.size() == 4 recorded ops; step.edges() == 4 dependencies among them
  // [end]
  if (step.size() != 4 || step.edges() != 4) throw std::logic_error("the step's graph is not as recorded");
  const auto t0 = std::chrono::steady_clock::now();
  // [snippet:replay]
  for (int b = 0; b < batches; ++b) {
    set_rate(engine, m, v, b);  // a push between two replays: ordered against both
    engine.replay(step, b);     // the bodies read b as ordo::replay_arg<int>()
  }
  engine.wait_for_all();
  // [end]
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ordo::Task<void> last_step(ordo::Engine& engine, const ordo::Graph& step, int b) {
  // [snippet:await]
  co_await ordo::replay(engine, step, b);  // resumes once the replay's ops are done; rethrows its error
  // [end]
}

}  // namespace

int main(int argc, char** argv) {
  int batches = 2000, width = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--batches") == 0) batches = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--width") == 0) width = std::atoi(argv[i + 1]);
  }
  Model pushed(width), replayed(width);
  const double tp = run_pushed(pushed, batches);
  const double tr = run_replayed(replayed, batches);
  {
    ordo::Engine engine;
    Model m(width);
    const Vars v = make_vars(engine);
    ordo::Graph step = engine.capture([&] { push_step(engine, m, v, -1); });
    ordo::sync_wait(last_step(engine, step, 3));
    if (m.losses.size() != 1) throw std::logic_error("the awaited replay did not run its ops");
  }
  const bool same = pushed.weights == replayed.weights && pushed.losses == replayed.losses;
  std::printf("%d steps of 4 ops: pushed %.1f ns/op, replayed %.1f ns/op (%.2fx); weights %s\n", batches,
              tp * 1e9 / (batches * 5.0), tr * 1e9 / (batches * 5.0), tp / tr, same ? "identical" : "DIFFER");
  return same ? 0 : 1;
}

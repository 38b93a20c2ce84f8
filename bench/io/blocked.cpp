// bench/io/blocked.cpp - no worker ever waits for I/O. An engine with 2 CPU
// workers runs a batch of small CPU-only ops, alone and then with
// `slow_reads` reads outstanding on pipes whose writers answer late (after
// the batch, and not before `late_ms`). If a pending read held a worker, the
// batch would crawl (or, with 1,000 reads and 2 workers, never finish before
// the writers answer). Figure: the batch's ops/s with the reads outstanding
// over its ops/s alone (target >= 0.9), both backends, interleaved runs.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>

#include "io_bench.hpp"
#include "ordo/ordo.hpp"

namespace iobench {
namespace {

constexpr unsigned kCpuVars = 64;

/// The fixed body of every CPU op: ~1 us of integer work.
void cpu_body(std::uint64_t& acc) {
  std::uint64_t x = acc | 1;
  for (int i = 0; i < 300; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  acc = x;
}

/// Pushes the batch (op i mutates variable i % 64) and waits for it; ops/s.
double cpu_batch(ordo::Engine& engine, const std::vector<ordo::Var>& vars, std::vector<std::uint64_t>& accs,
                 std::size_t ops) {
  const auto start = Clock::now();
  for (std::size_t i = 0; i < ops; ++i) {
    std::uint64_t& acc = accs[i % kCpuVars];
    engine.push_sync([&acc] { cpu_body(acc); }, ordo::Context::cpu(), {}, {vars[i % kCpuVars]});
  }
  for (const ordo::Var& v : vars) engine.wait_for_var(v);
  return static_cast<double>(ops) / std::chrono::duration<double>(Clock::now() - start).count();
}

struct Outcome {
  double ops_per_s = 0;
  bool ok = true;
  double deliver_ms = 0;  ///< with reads: from the writers' answer to the last read delivered
};

Outcome run_once(const Config& cfg, ordo::io::Backend backend, bool with_reads) {
  ordo::Engine engine(ordo::Options{.kind = ordo::EngineKind::pooled, .cpu_workers = 2});
  ordo::io::Reactor io(engine, ordo::io::IoOptions{.backend = backend, .log = [](std::string_view) {}});
  std::vector<ordo::Var> vars;
  for (unsigned i = 0; i < kCpuVars; ++i) vars.push_back(engine.new_variable());
  std::vector<std::uint64_t> accs(kCpuVars, 1);

  Outcome out;
  if (!with_reads) {
    out.ops_per_s = cpu_batch(engine, vars, accs, cfg.cpu_ops);
    return out;
  }
  struct Pipe {
    int r = -1, w = -1;
    std::uint64_t got = 0;
    ordo::Var var;
  };
  std::vector<Pipe> pipes(cfg.slow_reads);
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw std::system_error(errno, std::generic_category(), "pipe2 (fd limit?)");
    pipes[i].r = p[0];
    pipes[i].w = p[1];
    pipes[i].var = engine.new_variable();
  }
  const auto reads_start = Clock::now();
  for (Pipe& p : pipes) {
    io.push_read(p.var, p.r, std::as_writable_bytes(std::span(&p.got, 1)), ordo::io::Reactor::kCurrent);
  }
  // The read ops start on the workers: wait (setup, untimed) until every read is in the backend.
  while (io.in_flight() < pipes.size()) std::this_thread::sleep_for(std::chrono::microseconds(200));

  out.ops_per_s = cpu_batch(engine, vars, accs, cfg.cpu_ops);
  const bool still_pending = io.in_flight() >= pipes.size();  // nothing answered the reads yet

  std::this_thread::sleep_until(reads_start + std::chrono::milliseconds(cfg.late_ms));
  const auto answer = Clock::now();
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    const std::uint64_t v = 0xABCD0000ULL + i;
    if (::write(pipes[i].w, &v, sizeof v) != sizeof v) out.ok = false;
  }
  for (const Pipe& p : pipes) engine.wait_for_var(p.var);
  out.deliver_ms = std::chrono::duration<double, std::milli>(Clock::now() - answer).count();
  for (std::size_t i = 0; i < pipes.size(); ++i) {
    out.ok = out.ok && pipes[i].got == 0xABCD0000ULL + i;
    ::close(pipes[i].r);
    ::close(pipes[i].w);
  }
  out.ok = out.ok && still_pending;
  return out;
}

}  // namespace

std::vector<Row> run_blocked(const Config& cfg, std::string& md) {
  std::vector<Row> rows;
  md += "## Worker never blocked\n\n";
  md += "Engine: pooled, 2 CPU workers. " + std::to_string(cfg.cpu_ops) +
        " CPU-only ops (~1 us of integer work each, on 64 variables) pushed and awaited, alone and with " +
        std::to_string(cfg.slow_reads) + " `Reactor::push_read` ops outstanding on pipes whose writers answer after the batch "
        "(and not before " + std::to_string(cfg.late_ms) + " ms). ops/s, median of " + std::to_string(cfg.runs) +
        " runs (min-max); the reads are checked to be still pending when the batch ends, and their data after. "
        "Each run measures both, back to back (alternating which comes first); `ratio` is the median of the "
        "runs' own ratios (min-max), so that the machine's load drifting between runs cancels out.\n\n";
  md += "| backend | CPU ops/s alone | with reads outstanding | ratio | the " + std::to_string(cfg.slow_reads) +
        " reads delivered in |\n|---|---:|---:|---:|---:|\n";
  for (ordo::io::Backend b : cfg.backends) {
    Row alone, loaded;
    Figure deliver;
    Figure ratios;  ///< per run: with reads / alone, measured back to back
    for (unsigned r = 0; r < cfg.runs; ++r) {
      for (int k = 0; k < 2; ++k) {
        const bool with_reads = ((k + r) % 2) == 1;
        progress(cfg, std::string("worker-never-blocked ") + backend_name(b) + " run " + std::to_string(r + 1) + "/" +
                          std::to_string(cfg.runs) + (with_reads ? ": with reads" : ": alone"));
        const Outcome o = [&] {
          try {
            return run_once(cfg, b, with_reads);
          } catch (const std::exception& ex) {
            std::fprintf(stderr, "ordo_io_bench: worker-never-blocked %s: %s\n", backend_name(b), ex.what());
            return Outcome{0, false, 0};
          }
        }();
        Row& row = with_reads ? loaded : alone;
        row.fig.runs.push_back(o.ops_per_s);
        row.ok = row.ok && o.ok;
        if (with_reads) deliver.runs.push_back(o.deliver_ms);
      }
      const double a = alone.fig.runs.back();
      ratios.runs.push_back(a > 0 ? loaded.fig.runs.back() / a : 0);
    }
    const double ratio = ratios.median();
    char buf[64];
    std::snprintf(buf, sizeof buf, "ratio=%.3f ratio_min=%.3f ratio_max=%.3f target_90pct=%s", ratio, ratios.min(),
                  ratios.max(), ratio >= 0.9 ? "met" : "missed");
    for (Row* row : {&alone, &loaded}) {
      row->workload = row == &alone ? "cpu-ops-alone" : "cpu-ops-with-" + std::to_string(cfg.slow_reads) + "-slow-reads";
      row->engine = std::string("ordo-") + backend_name(b);
      row->unit = "ops/s";
      if (row == &loaded) {
        row->extra = buf;
        char d[48];
        std::snprintf(d, sizeof d, " deliver_ms=%.1f", deliver.median());
        row->extra += d;
      }
      print_result(*row);
      rows.push_back(*row);
    }
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s (%s-%s) | %s (%s-%s) | %.2f (%.2f-%.2f) | %.1f ms |\n",
                  backend_name(b), human(alone.fig.median()).c_str(), human(alone.fig.min()).c_str(),
                  human(alone.fig.max()).c_str(), human(loaded.fig.median()).c_str(), human(loaded.fig.min()).c_str(),
                  human(loaded.fig.max()).c_str(), ratio, ratios.min(), ratios.max(), deliver.median());
    md += line;
    if (!alone.ok || !loaded.ok) md += "\n(FAILED: see the RESULT lines)\n";
  }
  md += "\n";
  return rows;
}

}  // namespace iobench

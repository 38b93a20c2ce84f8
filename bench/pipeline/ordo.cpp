// bench/pipeline/ordo.cpp - the pipeline on ordo, written as a new user
// would: each file read with ordo::io (read_file; with O_DIRECT, open /
// fstat / read / close into an aligned buffer), its words counted in an
// engine op, the counts merged into the one histogram by an op that
// mutates the histogram's variable. Shapes:
//  - unbounded: every file's task started at once (when_all);
//  - bounded:   ordo::for_each(paths, limit, ...): `limit` files at a time;
//  - channels:  read -> parse -> reduce stages connected by ordo::Channels,
//               `limit` readers (for_each) and `limit` parsers, one reducer;
//  - read_only: bounded, the file read and nothing else (the per-file
//               overhead table: how much of it is the I/O alone).
#include <fcntl.h>
#include <sys/stat.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include <ordo/channel.hpp>
#include <ordo/coro.hpp>
#include <ordo/for_each.hpp>
#include <ordo/io.hpp>
#include <ordo/io/files.hpp>
#include <ordo/ordo.hpp>

#include "pipeline_bench.hpp"

namespace pipebench {

namespace {

struct Ctx {
  ordo::Engine& engine;
  ordo::io::Reactor& io;
  const Job& job;
  ordo::Var hist_var;
  Hist total{};  ///< mutated only by ops that write hist_var
  std::atomic<std::uint64_t> read_bytes{0};  ///< read_only: bytes read (relaxed: summed after the join)
};

/// A file's content: a string (read_file) or an aligned block (O_DIRECT).
struct Text {
  std::string s;
  Aligned a;
  bool direct = false;
  [[nodiscard]] std::span<const char> view() const noexcept { return direct ? a.text() : std::span<const char>(s); }
};

/// O_DIRECT: read_file's steps into a 4 KiB-aligned buffer of whole blocks.
ordo::Task<Aligned> read_direct(ordo::io::Reactor& io, std::string path) {
  const int fd = co_await io.open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
  Aligned a;
  std::exception_ptr error;
  try {
    const struct statx st = co_await io.fstat(fd, STATX_SIZE);
    a = aligned_buffer(static_cast<std::size_t>(st.stx_size) + 1);
    const std::size_t cap = round_up(static_cast<std::size_t>(st.stx_size) + 1);
    std::size_t got = 0;
    while (got < cap) {
      const std::size_t want = cap - got;
      const std::size_t n = co_await io.read(fd, std::as_writable_bytes(std::span(a.mem.get() + got, want)), got);
      got += n;
      if (n < want) break;
    }
    a.size = got;
  } catch (...) {
    error = std::current_exception();
  }
  try {
    co_await io.close(fd);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
  co_return a;
}

ordo::Task<Text> load(Ctx& c, std::string path) {
  Text t;
  if (c.job.mode == Mode::direct) {
    t.a = co_await read_direct(c.io, std::move(path));
    t.direct = true;
  } else {
    t.s = co_await ordo::io::read_file(c.io, std::move(path));
  }
  co_return t;
}

/// One file, start to end: read, count (an op), merge (an op on hist_var).
ordo::Task<void> one_file(Ctx& c, std::string path) {
  const Text text = co_await load(c, std::move(path));
  Hist local{};
  co_await ordo::push(c.engine, ordo::reads(), ordo::writes(), [&] { process(c.job, text.view(), local); },
                      ordo::Context::cpu(), {.name = "count"});
  co_await ordo::push(c.engine, ordo::reads(), ordo::writes(c.hist_var), [&] { merge(c.job, c.total, local); },
                      ordo::Context::cpu(), {.name = "merge"});
}

/// The read alone (no ops): the I/O's share of the per-file overhead.
ordo::Task<void> read_only(Ctx& c, std::string path) {
  const Text text = co_await load(c, std::move(path));
  c.read_bytes.fetch_add(text.view().size(), std::memory_order_relaxed);
}

ordo::Task<void> read_and_send(Ctx& c, ordo::Channel<Text>& out, std::string path) {
  co_await out.send(co_await load(c, std::move(path)));
}

/// examples/pipeline.cpp's shape: a failing stage records the first failure
/// and closes both channels, so no stage waits on one that is gone.
struct Stages {
  explicit Stages(std::size_t width) : texts(width), counts(width) {}
  ordo::Channel<Text> texts;
  ordo::Channel<std::unique_ptr<Hist>> counts;
  std::mutex m;
  std::exception_ptr error;  ///< the first failure; guarded by m
  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(m);
      if (!error) error = std::move(e);
    }
    texts.close();
    counts.close();
  }
};

ordo::Task<void> read_stage(Ctx& c, Stages& s, std::size_t width) {
  try {
    co_await ordo::for_each(c.job.paths, width, [&](const std::string& p) { return read_and_send(c, s.texts, p); });
    s.texts.close();
  } catch (...) {
    s.fail(std::current_exception());
  }
}

ordo::Task<void> parse(Ctx& c, Stages& s) {
  try {
    while (std::optional<Text> t = co_await s.texts.receive()) {
      auto h = std::make_unique<Hist>();
      co_await ordo::push(c.engine, ordo::reads(), ordo::writes(), [&] { process(c.job, t->view(), *h); },
                          ordo::Context::cpu(), {.name = "count"});
      co_await s.counts.send(std::move(h));
    }
  } catch (...) {
    s.fail(std::current_exception());
  }
}

ordo::Task<void> parse_stage(Ctx& c, Stages& s, std::size_t width) {
  std::vector<ordo::Task<void>> parsers;
  for (std::size_t i = 0; i < width; ++i) parsers.push_back(parse(c, s));
  co_await ordo::when_all(std::move(parsers));
  s.counts.close();
}

ordo::Task<void> reduce_stage(Ctx& c, Stages& s) {
  try {
    while (std::optional<std::unique_ptr<Hist>> h = co_await s.counts.receive()) {
      co_await ordo::push(c.engine, ordo::reads(), ordo::writes(c.hist_var), [&] { merge(c.job, c.total, **h); },
                          ordo::Context::cpu(), {.name = "merge"});
    }
  } catch (...) {
    s.fail(std::current_exception());
  }
}

ordo::Task<void> run_channels(Ctx& c, std::size_t width) {
  Stages s(width);
  co_await ordo::when_all(read_stage(c, s, width), parse_stage(c, s, width), reduce_stage(c, s));
  if (s.error) std::rethrow_exception(s.error);
}

ordo::Task<void> body(Ctx& c, const OrdoArgs& a) {
  switch (a.shape) {
    case OrdoArgs::Shape::unbounded: {
      std::vector<ordo::Task<void>> tasks;
      tasks.reserve(c.job.paths.size());
      for (const std::string& p : c.job.paths) tasks.push_back(one_file(c, p));
      co_await ordo::when_all(std::move(tasks));
      break;
    }
    case OrdoArgs::Shape::bounded:
      co_await ordo::for_each(c.job.paths, a.limit, [&](const std::string& p) { return one_file(c, p); });
      break;
    case OrdoArgs::Shape::channels:
      co_await run_channels(c, a.limit);
      break;
    case OrdoArgs::Shape::read_only:
      co_await ordo::for_each(c.job.paths, a.limit, [&](const std::string& p) { return read_only(c, p); });
      break;
  }
}

}  // namespace

Hist run_ordo(const Job& job, Stopwatch& sw, const void* arg) {
  const OrdoArgs& a = *static_cast<const OrdoArgs*>(arg);
  ordo::Engine engine(ordo::Options::from_env());
  ordo::io::Reactor io(engine, ordo::io::IoOptions::from_env());
  Ctx c{engine, io, job, engine.new_variable()};
  sw.start();
  ordo::sync_wait(body(c, a));
  sw.stop();
  if (a.shape == OrdoArgs::Shape::read_only) c.total[0] = c.read_bytes.load();  // compared with the bytes of no-work runs
  return c.total;
}

}  // namespace pipebench

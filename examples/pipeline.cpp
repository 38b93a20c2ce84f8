// pipeline: a file pipeline in three stages connected by channels.
//
//   read --(docs)--> parse --(counts)--> reduce
//
//  - read: ordo::for_each(paths, kReaders, ...) reads kReaders files at a
//    time with ordo::io::read_file (no worker waits for the disk) and sends
//    each text into `docs`, a Channel holding kReaders texts. When the
//    parsers fall behind, send() suspends the readers (backpressure): the
//    texts in memory stay bounded however many files there are.
//  - parse: kParsers coroutines take texts from `docs` and count the words
//    of each in an engine op (the counting runs on a CPU worker, one op per
//    file), then send the counts into `counts`.
//  - reduce: one coroutine merges the counts into the total, in an op that
//    mutates the total's variable: an op pushed later that reads it sees
//    every merge.
// A stage that is done closes its output channel, which ends the next
// stage's receive loop. A stage that fails records its failure and closes
// both channels, so the others stop rather than wait for it; run() then
// rethrows the first failure. The result is checked against a serial count
// (exits non-zero on a mismatch), and so are the bounds: never more than
// kReaders reads, nor kParsers counts, at once. --missing adds a file that
// does not exist: the run must end with that file's IoError (exit 0 if it
// does), not hang.
//
//   pipeline [--files N] [--dir D] [--missing]   (default: 48 files under $TMPDIR or /var/tmp)
//   ORDO_IO_BACKEND=threads|uring pipeline   (IoOptions::from_env)
#include <unistd.h>

#include <ordo/channel.hpp>
#include <ordo/coro.hpp>
#include <ordo/for_each.hpp>
#include <ordo/io.hpp>
#include <ordo/io/files.hpp>
#include <ordo/ordo.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

constexpr std::size_t kReaders = 4;  // files read at once (I/O in flight)
constexpr std::size_t kParsers = 2;  // files counted at once (about one per core)

using Counts = std::unordered_map<std::string, std::uint64_t>;

Counts count_words(std::string_view text) {
  Counts c;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && (text[i] < 'a' || text[i] > 'z')) ++i;
    const std::size_t start = i;
    while (i < text.size() && text[i] >= 'a' && text[i] <= 'z') ++i;
    if (i > start) ++c[std::string(text.substr(start, i - start))];
  }
  return c;
}

void merge(Counts& into, const Counts& from) {
  for (const auto& [word, n] : from) into[word] += n;
}

/// Keeps the highest value `now` reached.
void note_peak(std::atomic<int>& peak, int now) {
  int seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

class Pipeline {
 public:
  Pipeline(ordo::Engine& engine, ordo::io::Reactor& io) : engine_(engine), io_(io), total_var_(engine.new_variable()) {}

  /// The three stages, run together; returns once all three are done, and
  /// rethrows the first failure of any.
  // [snippet:pipeline_run]
  ordo::Task<void> run(std::vector<std::string> paths) {
    Stages s;
    co_await ordo::when_all(read_stage(paths, s), parse_stage(s), reduce_stage(s));
    if (s.error) std::rethrow_exception(s.error);
  }
  // [end]

  [[nodiscard]] const Counts& total() const { return total_; }
  [[nodiscard]] int peak_reads() const { return peak_reads_.load(); }
  [[nodiscard]] int peak_counts() const { return peak_counts_.load(); }

 private:
  /// What the stages of one run share: the channels between them and the
  /// first failure. A stage that fails records it and closes both channels,
  /// so the others stop instead of waiting on it: their sends throw
  /// Errc::closed (recorded too, but not first) and their receive loops end.
  // [snippet:pipeline_stages]
  struct Stages {
    ordo::Channel<std::string> docs{kReaders};  // read -> parse: texts
    ordo::Channel<Counts> counts{kParsers};     // parse -> reduce: one file's counts
    std::mutex m;
    std::exception_ptr error;  // the first failure; guarded by m

    void fail(std::exception_ptr e) {
      {
        std::lock_guard lock(m);
        if (!error) error = std::move(e);
      }
      docs.close();
      counts.close();
    }
  };
  // [end]

  // ---- read: kReaders files at a time, each text sent on as it arrives.
  // [snippet:pipeline_read]
  ordo::Task<void> read_stage(const std::vector<std::string>& paths, Stages& s) {
    try {
      co_await ordo::for_each(paths, kReaders, [&](const std::string& p) { return read_one(p, s.docs); });
      s.docs.close();  // done: the parsers drain what was sent, then stop
    } catch (...) {
      s.fail(std::current_exception());
    }
  }
  ordo::Task<void> read_one(std::string path, ordo::Channel<std::string>& docs) {
    note_peak(peak_reads_, ++reads_);
    std::string text;
    try {
      text = co_await ordo::io::read_file(io_, std::move(path));
    } catch (...) {
      --reads_;
      throw;
    }
    --reads_;
    co_await docs.send(std::move(text));  // waits while `docs` is full
  }
  // [end]

  // ---- parse: kParsers coroutines, one count op per file.
  // [snippet:pipeline_parse_reduce]
  ordo::Task<void> parse_stage(Stages& s) {
    std::vector<ordo::Task<void>> parsers;
    for (std::size_t p = 0; p < kParsers; ++p) parsers.push_back(parse(s));
    co_await ordo::when_all(std::move(parsers));
    s.counts.close();  // every parser is done: the reducer drains, then stops
  }
  ordo::Task<void> parse(Stages& s) {
    try {
      while (std::optional<std::string> doc = co_await s.docs.receive()) {  // ends once `docs` is closed and empty
        Counts c = co_await ordo::push(engine_, ordo::reads(), ordo::writes(), [&] {
          note_peak(peak_counts_, ++counting_);
          Counts words = count_words(*doc);
          --counting_;
          return words;
        }, ordo::Context::cpu(), {.name = "count"});
        co_await s.counts.send(std::move(c));
      }
    } catch (...) {
      s.fail(std::current_exception());
    }
  }

  // ---- reduce: every file's counts into the total, in order of arrival.
  ordo::Task<void> reduce_stage(Stages& s) {
    try {
      while (std::optional<Counts> c = co_await s.counts.receive()) {
        co_await ordo::push(engine_, ordo::reads(), ordo::writes(total_var_), [&] { merge(total_, *c); },
                            ordo::Context::cpu(), {.name = "merge"});
      }
    } catch (...) {
      s.fail(std::current_exception());
    }
  }
  // [end]

  ordo::Engine& engine_;
  ordo::io::Reactor& io_;
  ordo::Var total_var_;
  Counts total_;  ///< mutated only by ops that write total_var_
  std::atomic<int> reads_{0}, counting_{0};
  std::atomic<int> peak_reads_{0}, peak_counts_{0};
};

// ---------------------------------------------------------------- the files

std::uint64_t splitmix(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// `n` text files of 1-64 KiB, words drawn from a small vocabulary (the
/// first words more often), seeded: the same files every run.
std::vector<std::string> make_files(const std::filesystem::path& dir, std::size_t n) {
  static const char* const kWords[] = {"the", "engine", "runs", "ops", "in", "order", "of", "their",
                                       "data", "and", "in", "parallel", "everywhere", "else", "channels",
                                       "connect", "stages", "coroutines", "read", "files"};
  constexpr std::size_t kCount = std::size(kWords);
  std::uint64_t rng = 32;
  std::vector<std::string> paths;
  for (std::size_t f = 0; f < n; ++f) {
    const std::size_t bytes = 1024 + splitmix(rng) % (63 * 1024);
    std::string text;
    while (text.size() < bytes) {
      const std::uint64_t r = splitmix(rng);
      text += kWords[std::min(r % kCount, (r >> 32) % kCount)];  // the min favours the first words
      text += (r >> 16) % 10 == 0 ? '\n' : ' ';
    }
    paths.push_back((dir / ("doc" + std::to_string(f) + ".txt")).string());
    std::ofstream(paths.back(), std::ios::binary) << text;
  }
  return paths;
}

/// The same result, one file after the other, with no engine.
Counts serial(const std::vector<std::string>& paths) {
  Counts total;
  for (const std::string& p : paths) {
    std::ifstream in(p, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    merge(total, count_words(text));
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) try {
  std::size_t files = 48;
  std::string base;
  bool missing = false;
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') base = t;
  if (base.empty()) base = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--missing") {
      missing = true;
    } else if (i + 1 < argc && a == "--files") {
      files = std::stoul(argv[++i]);
    } else if (i + 1 < argc && a == "--dir") {
      base = argv[++i];
    } else {
      throw std::invalid_argument("unknown option or missing value: " + a);
    }
  }
  const std::filesystem::path dir = std::filesystem::path(base) / ("ordo_pipeline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::filesystem::path d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  std::vector<std::string> paths = make_files(dir, files);

  ordo::Engine engine;
  ordo::io::Reactor io(engine, ordo::io::IoOptions::from_env());
  Pipeline pipeline(engine, io);
  if (missing) {
    // A file that does not exist, in the middle: its read fails, the stages
    // stop, and the run ends with that failure.
    paths.insert(paths.begin() + static_cast<std::ptrdiff_t>(paths.size() / 2), (dir / "missing.txt").string());
    try {
      ordo::sync_wait(pipeline.run(paths));
    } catch (const ordo::io::IoError& e) {
      const bool expected = e.code() == std::errc::no_such_file_or_directory;
      std::printf("pipeline: the run failed with %s: %s\n", e.what(), expected ? "as expected" : "UNEXPECTED");
      return expected ? 0 : 1;
    }
    std::printf("pipeline: the missing file did not fail the run\n");
    return 1;
  }
  ordo::sync_wait(pipeline.run(paths));
  engine.wait_for_all();

  std::vector<std::pair<std::string, std::uint64_t>> top(pipeline.total().begin(), pipeline.total().end());
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;  // most frequent first, then by word
  });
  std::uint64_t words = 0;
  for (const auto& [w, n] : top) words += n;
  std::printf("pipeline: %zu files (backend %s): %llu words, %zu distinct; most frequent:", files,
              io.backend_reason().c_str(), static_cast<unsigned long long>(words), top.size());
  for (std::size_t i = 0; i < top.size() && i < 5; ++i) {
    std::printf(" %s %llu%s", top[i].first.c_str(), static_cast<unsigned long long>(top[i].second), i < 4 ? "," : "");
  }
  std::printf("\n  at most %d reads at once (limit %zu), %d counts at once (limit %zu)\n", pipeline.peak_reads(),
              kReaders, pipeline.peak_counts(), kParsers);
  const bool same = pipeline.total() == serial(paths);
  const bool bounded = pipeline.peak_reads() <= static_cast<int>(kReaders) &&
                       pipeline.peak_counts() <= static_cast<int>(kParsers);
  std::printf("  counts against a serial run: %s; bounds: %s\n", same ? "match" : "MISMATCH",
              bounded ? "held" : "EXCEEDED");
  return same && bounded ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "pipeline: %s\n", e.what());
  return 1;
}

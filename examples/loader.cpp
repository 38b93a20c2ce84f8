// loader: a mixed disk + network data loader on ordo::io.
//
// Two sources feed one pipeline, read -> check -> tally, whose stages are
// connected by ordo::Channels (the pieces of examples/pipeline.cpp):
//  - read: the network source, a client coroutine, receives fixed-size
//    records from a loopback TCP server (a coroutine too) with io.recv; the
//    disk source reads the shard files chunk by chunk, `slots` chunks at a
//    time (ordo::for_each), each shard opened with O_DIRECT (falling back
//    to buffered I/O, with the reason printed, where the file system refuses
//    it, e.g. tmpfs). Every record and chunk lands in a buffer from one
//    BufferPool: `co_await pool.acquire` waits while the pool is at its
//    limit, which bounds the memory of the whole pipeline (backpressure all
//    the way to the sockets and the disk). Both send their buffers into
//    `chunks`.
//  - check: `checkers` coroutines take buffers from `chunks` and check each
//    in an engine op that reads the buffer's variable, then release the
//    buffer (back to the pool behind that op) and send the verdict on.
//  - tally: one coroutine adds up the verdicts per source.
// A stage that fails records the failure and closes both channels, so the
// others finish instead of waiting on it; the first failure is rethrown.
// No worker ever waits for the disk or the network.
//
// Every byte is produced by a deterministic generator and checked on
// arrival: the program prints throughput and exits non-zero on a mismatch.
//
// Then a training-style loop over the same shards with ordo's storage and
// resources (ordo/storage.hpp, ordo/resource.hpp): each batch is read into a
// buffer from a fixed BufferPool (co_await pool.acquire waits while every
// buffer is out: backpressure), processed by an op that takes scratch space
// from a TempSpace arena and a random augmentation from a RandomStream, and
// released behind that op. The pool's memory is printed as the batches go:
// it stays flat. (That loop needs no channels: the engine orders each
// batch's read, processing and release by the buffer's variable alone.)
// The same loop again, captured (ordo/graph.hpp): one graph per buffer
// holding the batch's read and process ops, replayed with the batch number.
//
//   loader [--records N] [--record-kib K] [--shards S] [--shard-mib M] [--dir D]
//          [--batches B] [--batch-kib K]
//   ORDO_IO_BACKEND=threads|uring loader      (IoOptions::from_env)
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <ordo/channel.hpp>
#include <ordo/coro.hpp>
#include <ordo/for_each.hpp>
#include <ordo/io.hpp>
#include <ordo/ordo.hpp>
#include <ordo/resource.hpp>
#include <ordo/storage.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  std::size_t records = 256;                  // network records
  std::size_t record_bytes = 64 * 1024;       // bytes per record
  std::size_t shards = 4;                     // shard files
  std::size_t shard_bytes = 8 * 1024 * 1024;  // bytes per shard
  std::size_t chunk_bytes = 256 * 1024;       // bytes per disk read (a multiple of 4 KiB for O_DIRECT)
  std::size_t slots = 4;                      // disk chunks read at once; the channels' capacity
  std::size_t checkers = 2;                   // buffers checked at once (about one per core)
  std::string dir;                            // where the shards go (default: $TMPDIR or /var/tmp)
  std::size_t batches = 10000;                // pooled loop: batches read, processed, released
  std::size_t batch_bytes = 64 * 1024;        // bytes per batch (a multiple of 4 KiB for O_DIRECT)
  std::size_t pool_buffers = 8;               // the pool's limit, in batches
};

// ---------------------------------------------------------------- content

/// The 8 bytes at `offset` (a multiple of 8) of stream `stream` (a shard, or
/// the network): the generator both the writers and the checks use.
std::uint64_t content(std::uint64_t stream, std::uint64_t offset) {
  std::uint64_t z = (stream + 1) * 0x9E3779B97F4A7C15ULL + offset / 8;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

void write_stream(std::uint64_t stream, std::uint64_t offset, std::span<std::byte> out) {
  for (std::size_t i = 0; i < out.size(); i += 8) {
    const std::uint64_t w = content(stream, offset + i);
    std::memcpy(out.data() + i, &w, std::min<std::size_t>(8, out.size() - i));
  }
}

/// Bytes of `data` that differ from the stream.
std::size_t mismatches(std::uint64_t stream, std::uint64_t offset, std::span<const std::byte> data) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < data.size(); i += 8) {
    const std::uint64_t w = content(stream, offset + i);
    const std::size_t n = std::min<std::size_t>(8, data.size() - i);
    for (std::size_t b = 0; b < n; ++b) bad += data[i + b] != reinterpret_cast<const std::byte*>(&w)[b];
  }
  return bad;
}

constexpr std::uint64_t kNetStream = 1000;  // the shards are streams 0..shards-1

// ---------------------------------------------------------------- the pipeline

/// A record or chunk on its way from a source to a checker.
struct Chunk {
  std::uint64_t stream;  ///< a shard, or kNetStream
  std::uint64_t offset;  ///< in the stream
  ordo::Buffer buf;      ///< from the pipeline's pool
};

/// A checker's verdict on one chunk.
struct Checked {
  std::uint64_t stream;
  std::size_t bytes;
  std::size_t bad;
};

/// What the tally stage found, per source (written by the tally coroutine only).
struct Tally {
  std::uint64_t bytes = 0;
  std::uint64_t bad = 0;
  Clock::time_point last{};
};

// ---------------------------------------------------------------- network

/// The server: accepts one client and streams it `records` records.
ordo::Task<void> serve(ordo::io::Reactor& io, int listen_fd, const Config& cfg) {
  const int conn = co_await io.accept(listen_fd);
  std::vector<std::byte> record(cfg.record_bytes);
  for (std::size_t r = 0; r < cfg.records; ++r) {
    write_stream(kNetStream, r * cfg.record_bytes, record);
    co_await io.send(conn, record).exact();  // the whole record, however many sends it takes
  }
  co_await io.close(conn);
}

/// The network source: receives every record into a buffer of the pool
/// and sends it into `out`.
ordo::Task<void> receive(ordo::io::Reactor& io, std::uint16_t port, const Config& cfg, ordo::BufferPool& pool,
                         ordo::Channel<Chunk>& out) {
  const int sock = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock < 0) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  co_await io.connect(sock, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  for (std::size_t r = 0; r < cfg.records; ++r) {
    ordo::Buffer buf = co_await pool.acquire(cfg.record_bytes);  // waits while the pool is at its limit
    co_await io.recv(sock, buf.bytes()).exact();
    Chunk chunk{kNetStream, r * cfg.record_bytes, std::move(buf)};
    co_await out.send(std::move(chunk));  // waits while the checkers are behind
  }
  std::byte extra[1];
  if (co_await io.recv(sock, extra) != 0) throw std::runtime_error("the server sent more than expected");
  co_await io.close(sock);
}

// ---------------------------------------------------------------- disk

/// Opens `path` with O_DIRECT, or buffered where the file system refuses
/// O_DIRECT (EINVAL, e.g. tmpfs); says which.
ordo::Task<int> open_direct(ordo::io::Reactor& io, const std::string& path, bool& direct) {
  try {
    const int fd = co_await io.open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    direct = true;
    co_return fd;
  } catch (const ordo::io::IoError& e) {
    if (e.code() != std::errc::invalid_argument) throw;
    std::printf("  %s: O_DIRECT refused (%s): reading it buffered\n", path.c_str(), e.code().message().c_str());
  }
  direct = false;
  co_return co_await io.open(path, O_RDONLY | O_CLOEXEC);
}

/// One chunk of a shard, read into a buffer of the pool (page-aligned, as
/// O_DIRECT needs) and sent into `out`.
struct Piece {
  int fd;
  std::uint64_t shard, offset;
};
ordo::Task<void> read_chunk(ordo::io::Reactor& io, ordo::BufferPool& pool, Piece piece, std::size_t bytes,
                            ordo::Channel<Chunk>& out) {
  ordo::Buffer buf = co_await pool.acquire(bytes);
  co_await io.read(piece.fd, buf.bytes(), piece.offset).exact();
  Chunk chunk{piece.shard, piece.offset, std::move(buf)};
  co_await out.send(std::move(chunk));
}

/// The disk source: every chunk of every shard (the shards interleaved),
/// `slots` reads at a time.
ordo::Task<void> read_shards(ordo::io::Reactor& io, const std::vector<std::string>& paths, const Config& cfg,
                             ordo::BufferPool& pool, ordo::Channel<Chunk>& out, int& direct_count) {
  std::vector<int> fds;
  std::exception_ptr error;
  try {
    for (const std::string& p : paths) {
      bool direct = false;
      fds.push_back(co_await open_direct(io, p, direct));
      direct_count += direct ? 1 : 0;
    }
    std::vector<Piece> pieces;
    for (std::size_t c = 0; c < cfg.shard_bytes / cfg.chunk_bytes; ++c) {
      for (std::size_t s = 0; s < fds.size(); ++s) pieces.push_back({fds[s], s, c * cfg.chunk_bytes});
    }
    co_await ordo::for_each(pieces, cfg.slots,
                            [&](const Piece& p) { return read_chunk(io, pool, p, cfg.chunk_bytes, out); });
  } catch (...) {
    error = std::current_exception();
  }
  for (int fd : fds) ::close(fd);
  if (error) std::rethrow_exception(error);
}

/// What the stages share: the channels between them and the first failure
/// (examples/pipeline.cpp's pattern). A stage that fails records it and
/// closes both channels, so no stage waits forever on one that is gone.
struct Pipe {
  explicit Pipe(std::size_t capacity) : chunks(capacity), checked(capacity) {}
  ordo::Channel<Chunk> chunks;     // read -> check: filled buffers
  ordo::Channel<Checked> checked;  // check -> tally: verdicts
  std::mutex m;
  std::exception_ptr error;  // the first failure; guarded by m

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(m);
      if (!error) error = std::move(e);
    }
    chunks.close();
    checked.close();
  }
};

/// Both sources; `chunks` is closed once both are done.
ordo::Task<void> read_stage(ordo::io::Reactor& io, std::uint16_t port, const std::vector<std::string>& paths,
                            const Config& cfg, ordo::BufferPool& pool, Pipe& p, int& direct_count) {
  try {
    co_await ordo::when_all(receive(io, port, cfg, pool, p.chunks),
                            read_shards(io, paths, cfg, pool, p.chunks, direct_count));
    p.chunks.close();
  } catch (...) {
    p.fail(std::current_exception());
  }
}

// ---------------------------------------------------------------- check, tally

/// A checker: each buffer checked in an op that reads its variable, then
/// released (the memory goes back to the pool behind that op).
ordo::Task<void> check(ordo::Engine& engine, Pipe& p) {
  try {
    while (std::optional<Chunk> c = co_await p.chunks.receive()) {
      const std::size_t bad = co_await ordo::push(engine, ordo::reads(c->buf.var()), ordo::writes(), [&] {
        return mismatches(c->stream, c->offset, c->buf.bytes());
      }, ordo::Context::cpu(), {.name = "check"});
      Checked verdict{c->stream, c->buf.size(), bad};
      c->buf.release();
      co_await p.checked.send(std::move(verdict));
    }
  } catch (...) {
    p.fail(std::current_exception());
  }
}

ordo::Task<void> check_stage(ordo::Engine& engine, const Config& cfg, Pipe& p) {
  std::vector<ordo::Task<void>> checkers;
  for (std::size_t i = 0; i < cfg.checkers; ++i) checkers.push_back(check(engine, p));
  co_await ordo::when_all(std::move(checkers));
  p.checked.close();
}

ordo::Task<void> tally_stage(Pipe& p, Tally& net, Tally& disk) {
  while (std::optional<Checked> v = co_await p.checked.receive()) {
    Tally& t = v->stream == kNetStream ? net : disk;
    t.bytes += v->bytes;
    t.bad += v->bad;
    t.last = Clock::now();
  }
}

/// The whole pipeline: read -> check -> tally; rethrows the first failure.
ordo::Task<void> load_all(ordo::Engine& engine, ordo::io::Reactor& io, std::uint16_t port,
                          const std::vector<std::string>& paths, const Config& cfg, ordo::BufferPool& pool,
                          Tally& net, Tally& disk, int& direct_count) {
  Pipe p(cfg.slots);
  co_await ordo::when_all(read_stage(io, port, paths, cfg, pool, p, direct_count), check_stage(engine, cfg, p),
                          tally_stage(p, net, disk));
  if (p.error) std::rethrow_exception(p.error);
}

/// Test data: the shard files, written once with plain syscalls.
std::vector<std::string> make_shards(const Config& cfg) {
  std::vector<std::string> paths;
  std::vector<std::byte> block(cfg.chunk_bytes);
  for (std::size_t s = 0; s < cfg.shards; ++s) {
    paths.push_back(cfg.dir + "/ordo_loader_" + std::to_string(::getpid()) + "_" + std::to_string(s) + ".bin");
    const int fd = ::open(paths.back().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw std::system_error(errno, std::generic_category(), "create " + paths.back());
    for (std::size_t off = 0; off < cfg.shard_bytes; off += block.size()) {
      write_stream(s, off, block);
      if (::pwrite(fd, block.data(), block.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(block.size())) {
        ::close(fd);
        throw std::system_error(errno, std::generic_category(), "write " + paths.back());
      }
    }
    ::close(fd);
  }
  return paths;
}

/// A listening loopback socket on an ephemeral port.
int listen_loopback(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0 || ::listen(fd, 8) < 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) < 0) {
    throw std::system_error(errno, std::generic_category(), "listen on loopback");
  }
  port = ntohs(addr.sin_port);
  return fd;
}

// ---------------------------------------------------------------- pooled loop

double mib_per_s(std::uint64_t bytes, Clock::duration d) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0) / std::chrono::duration<double>(d).count();
}


/// Resident set size of this process, from /proc/self/statm (0 if unknown).
std::size_t rss_bytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

struct PooledTally {
  std::atomic<std::uint64_t> bytes{0}, bad{0}, flips{0};
};

/// One batch's processing: the augmentation draws a rotation and a flip
/// from `rng`, writes the augmented batch into scratch space, and checks
/// every word of it against the generator. Declared: reads(batch),
/// writes(scratch, rng), so draws happen in push order per stream and ops on
/// different arenas and streams run in parallel.
void process(const std::byte* data, std::size_t n, ordo::TempArena& scratch, ordo::RandomStream& rng,
             std::uint64_t shard, std::uint64_t offset, PooledTally& tally) {
  const std::size_t words = n / 8;
  const std::size_t rot = static_cast<std::size_t>(rng.next() % words);
  const bool flip = rng.uniform() < 0.5;
  std::span<std::uint64_t> out = scratch.get_as<std::uint64_t>(words);
  const auto* in = reinterpret_cast<const std::uint64_t*>(data);
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t w = in[(i + rot) % words];
    out[i] = flip ? ~w : w;
  }
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < words; ++i) {
    const std::uint64_t want = content(shard, offset + ((i + rot) % words) * 8);
    bad += (flip ? ~out[i] : out[i]) != want;
  }
  tally.bad += bad;
  tally.bytes += n;
  tally.flips += flip ? 1 : 0;
}

void push_process(ordo::Engine& engine, const ordo::Buffer& batch, ordo::TempArena& scratch, ordo::RandomStream& rng,
                  std::uint64_t shard, std::uint64_t offset, PooledTally& tally) {
  engine.push_sync([data = batch.data(), n = batch.size(), &scratch, &rng, shard, offset,
                    &tally] { process(data, n, scratch, rng, shard, offset, tally); },
                   ordo::Context::cpu(), {batch.var()}, {scratch.var(), rng.var()}, {.name = "process"});
}

/// What the loop saw of memory at every tenth of its batches.
struct Sample {
  std::size_t batch, pool_reserved, scratch, rss;
};

/// The loop: batch b is chunk (b / shards) of shard (b % shards), wrapping
/// around the file. Its buffer comes from the pool (the coroutine waits,
/// without blocking a thread, while all are out), the read mutates the
/// buffer's variable, the process op reads it, and release() hands the
/// buffer back behind both.
ordo::Task<void> pooled_loop(ordo::Engine& engine, ordo::io::Reactor& io, const std::vector<int>& fds,
                             const Config& cfg, ordo::BufferPool& pool, ordo::TempSpace& temp,
                             ordo::RandomStreams& streams, PooledTally& tally, std::vector<Sample>& samples) {
  const std::size_t per_shard = cfg.shard_bytes / cfg.batch_bytes;
  for (std::size_t b = 0; b < cfg.batches; ++b) {
    ordo::Buffer batch = co_await pool.acquire(cfg.batch_bytes);
    const std::uint64_t shard = b % fds.size();
    const std::uint64_t offset = (b / fds.size()) % per_shard * cfg.batch_bytes;
    io.push_read(batch.var(), fds[shard], batch.bytes(), offset);
    push_process(engine, batch, temp.next(), streams[b], shard, offset, tally);
    batch.release();
    if ((b + 1) % std::max<std::size_t>(cfg.batches / 10, 1) == 0) {
      samples.push_back({b + 1, pool.stats().reserved_bytes, temp.reserved_bytes(), rss_bytes()});
    }
  }
}

/// Opens the shards, then runs the loop. (A coroutine with parameters, not a
/// capturing lambda: the frame keeps its parameters, not a lambda's captures.)
ordo::Task<void> open_and_loop(ordo::Engine& engine, ordo::io::Reactor& io, const std::vector<std::string>& paths,
                               std::vector<int>& fds, const Config& cfg, ordo::BufferPool& pool,
                               ordo::TempSpace& temp, ordo::RandomStreams& streams, PooledTally& tally,
                               std::vector<Sample>& samples) {
  for (const std::string& p : paths) {
    bool direct = false;
    fds.push_back(co_await open_direct(io, p, direct));
  }
  co_await pooled_loop(engine, io, fds, cfg, pool, temp, streams, tally, samples);
}

/// Batch b of the loop: its shard and offset in it.
struct BatchAt {
  std::uint64_t shard, offset;
};
BatchAt batch_at(std::size_t b, std::size_t shards, const Config& cfg) {
  const std::size_t per_shard = cfg.shard_bytes / cfg.batch_bytes;
  return {b % shards, (b / shards) % per_shard * cfg.batch_bytes};
}

/// The same loop, captured (docs/graphs.md): one graph per buffer, recorded
/// once, holding the batch's read (an async op that starts io.read; the
/// shard and offset come from the replay's argument, the batch number) and
/// its process op; batch b replays graph b % buffers. The buffers' variables
/// order each buffer's next read behind its last process op, as the pool
/// did; a replay costs one push whatever the graph holds. Returns MiB/s, or
/// a negative number on a mismatch; `rss` gets the process's RSS at the end.
double run_captured(ordo::Engine& engine, ordo::io::Reactor& io, const std::vector<int>& fds, const Config& cfg,
                    ordo::TempSpace& temp, ordo::RandomStreams& streams, std::size_t& rss) {
  struct Slot {
    std::byte* data;
    ordo::Var var;
  };
  PooledTally tally;
  std::vector<Slot> slots;
  std::vector<ordo::Graph> steps;
  for (std::size_t s = 0; s < cfg.pool_buffers; ++s) {
    // 4 KiB aligned: the shards may be open with O_DIRECT.
    auto* data = static_cast<std::byte*>(std::aligned_alloc(4096, cfg.batch_bytes));
    if (data == nullptr) throw std::bad_alloc();
    slots.push_back({data, engine.new_variable()});
    const Slot slot = slots.back();
    ordo::TempArena& scratch = temp.arena(s);
    ordo::RandomStream& rng = streams[s];
    steps.push_back(engine.capture([&] {
      engine.push_async(
          [&, slot](ordo::RunContext, ordo::OnComplete done) {
            const BatchAt at = batch_at(ordo::replay_arg<std::size_t>(), fds.size(), cfg);
            io.read(fds[at.shard], std::span(slot.data, cfg.batch_bytes), at.offset).exact().then(std::move(done));
          },
          ordo::Context::cpu(), {}, {slot.var}, {.prop = ordo::FnProperty::async, .name = "read"});
      engine.push_sync(
          [&, slot] {
            const BatchAt at = batch_at(ordo::replay_arg<std::size_t>(), fds.size(), cfg);
            process(slot.data, cfg.batch_bytes, scratch, rng, at.shard, at.offset, tally);
          },
          ordo::Context::cpu(), {slot.var}, {scratch.var(), rng.var()}, {.name = "process"});
    }));
  }
  const auto start = Clock::now();
  for (std::size_t b = 0; b < cfg.batches; ++b) engine.replay(steps[b % steps.size()], b);
  engine.wait_for_all();
  const auto end = Clock::now();
  rss = rss_bytes();
  for (const Slot& slot : slots) engine.delete_variable(slot.var);
  engine.wait_for_all();
  for (const Slot& slot : slots) std::free(slot.data);
  const bool ok = tally.bad == 0 && tally.bytes == cfg.batches * cfg.batch_bytes;
  return ok ? mib_per_s(tally.bytes.load(), end - start) : -1.0;
}

/// Runs the loop over the shards, pushed, then captured; prints memory as
/// it goes and the result.
bool run_pooled(ordo::Engine& engine, ordo::io::Reactor& io, const std::vector<std::string>& paths, const Config& cfg) {
  ordo::BufferPool pool(engine, {.limit_bytes = cfg.pool_buffers * cfg.batch_bytes});
  ordo::TempSpace temp(engine, {.arenas = 4, .cap_bytes = cfg.batch_bytes});
  ordo::RandomStreams streams(engine, /*seed=*/2026, 4);  // batch b draws from stream b % 4
  PooledTally tally;
  std::vector<Sample> samples;
  std::vector<int> fds;
  const auto start = Clock::now();
  {
    ordo::AsyncScope scope;
    scope.spawn(open_and_loop(engine, io, paths, fds, cfg, pool, temp, streams, tally, samples));
    scope.sync_join();
  }
  engine.wait_for_all();
  const auto end = Clock::now();
  std::size_t captured_rss = 0;
  const double captured = run_captured(engine, io, fds, cfg, temp, streams, captured_rss);
  for (int fd : fds) ::close(fd);

  const ordo::BufferPoolStats st = pool.stats();
  std::printf("pooled: %zu batches x %zu KiB through a pool of %zu buffers, scratch from %zu arenas, "
              "augmented from %zu random streams\n",
              cfg.batches, cfg.batch_bytes / 1024, cfg.pool_buffers, temp.size(), streams.size());
  std::printf("  batch    pool held   scratch      RSS\n");
  bool flat = true;
  for (const Sample& s : samples) {
    std::printf("  %6zu  %7zu KiB  %5zu KiB  %5zu MiB\n", s.batch, s.pool_reserved / 1024, s.scratch / 1024,
                s.rss / (1024 * 1024));
    flat = flat && s.pool_reserved == samples.front().pool_reserved && s.scratch == samples.front().scratch;
  }
  std::printf("  pool: peak %zu KiB held, %zu KiB in use at most, %llu acquires, hit rate %.2f%%, %llu waited\n",
              st.peak_reserved_bytes / 1024, st.peak_in_use_bytes / 1024, static_cast<unsigned long long>(st.acquires),
              100.0 * st.hit_rate(), static_cast<unsigned long long>(st.waits));
  std::printf("  %llu bytes processed, %llu flipped, %.0f MiB/s; %llu mismatched words\n",
              static_cast<unsigned long long>(tally.bytes.load()), static_cast<unsigned long long>(tally.flips.load()),
              mib_per_s(tally.bytes.load(), end - start), static_cast<unsigned long long>(tally.bad.load()));
  std::printf("captured: the same %zu batches, one graph per buffer (read, process) replayed per batch: %.0f MiB/s "
              "(pushed: %.0f MiB/s), RSS %zu MiB\n",
              cfg.batches, captured, mib_per_s(tally.bytes.load(), end - start), captured_rss / (1024 * 1024));
  const bool ok = tally.bad == 0 && tally.bytes == cfg.batches * cfg.batch_bytes && flat &&
                  st.peak_reserved_bytes <= cfg.pool_buffers * cfg.batch_bytes && captured >= 0;
  if (!ok) {
    std::fprintf(stderr, "loader: pooled loop FAILED (%s)\n",
                 !flat ? "memory was not flat" : captured < 0 ? "the captured loop saw wrong data" : "wrong data or byte count");
  } else {
    std::printf("pooled: memory flat over %zu batches, every word checked, OK\n", cfg.batches);
  }
  return ok;
}

Config parse(int argc, char** argv) {
  Config cfg;
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && *t != '\0') cfg.dir = t;
  if (cfg.dir.empty()) cfg.dir = "/var/tmp";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(a + ": unknown option or missing value");
    const std::string v = argv[++i];
    if (a == "--records") cfg.records = std::stoul(v);
    else if (a == "--record-kib") cfg.record_bytes = std::stoul(v) * 1024;
    else if (a == "--shards") cfg.shards = std::stoul(v);
    else if (a == "--shard-mib") cfg.shard_bytes = std::stoul(v) * 1024 * 1024;
    else if (a == "--dir") cfg.dir = v;
    else if (a == "--batches") cfg.batches = std::stoul(v);
    else if (a == "--batch-kib") cfg.batch_bytes = std::stoul(v) * 1024;
    else throw std::invalid_argument("unknown option " + a);
  }
  if (cfg.record_bytes == 0 || cfg.shard_bytes < cfg.chunk_bytes) throw std::invalid_argument("sizes too small");
  if (cfg.slots == 0) throw std::invalid_argument("no buffers");
  if (cfg.batch_bytes == 0 || cfg.batch_bytes % 4096 != 0 || cfg.batch_bytes > cfg.shard_bytes) {
    throw std::invalid_argument("--batch-kib: a multiple of 4 KiB, at most a shard");
  }
  cfg.shard_bytes -= cfg.shard_bytes % cfg.chunk_bytes;  // whole chunks: aligned O_DIRECT reads
  return cfg;
}

}  // namespace

int main(int argc, char** argv) try {
  const Config cfg = parse(argc, argv);
  const std::vector<std::string> shard_paths = make_shards(cfg);
  struct Cleanup {
    const std::vector<std::string>& paths;
    ~Cleanup() {
      for (const auto& p : paths) std::filesystem::remove(p);
    }
  } cleanup{shard_paths};

  ordo::Engine engine;
  ordo::io::Reactor io(engine, ordo::io::IoOptions::from_env());
  std::printf("loader: backend %s; %zu records x %zu KiB over loopback TCP, %zu shards x %zu MiB in %s\n",
              io.backend_reason().c_str(), cfg.records, cfg.record_bytes / 1024, cfg.shards,
              cfg.shard_bytes / (1024 * 1024), cfg.dir.c_str());

  // One pool for both sources: its limit bounds every buffer in the
  // pipeline (being filled, in a channel, being checked).
  const std::size_t pool_limit = 2 * cfg.slots * std::max(cfg.chunk_bytes, cfg.record_bytes);
  ordo::BufferPool pool(engine, {.limit_bytes = pool_limit});
  Tally net, disk;
  std::uint16_t port = 0;
  const int listen_fd = listen_loopback(port);
  int direct_count = 0;
  const auto start = Clock::now();
  {
    ordo::AsyncScope scope;  // joined below, before the reactor and the engine go
    scope.spawn(serve(io, listen_fd, cfg));
    scope.spawn(load_all(engine, io, port, shard_paths, cfg, pool, net, disk, direct_count));
    scope.sync_join();  // rethrows the first failure of any coroutine
  }
  engine.wait_for_all();  // the buffers' releases (and rethrows a failed op)
  const auto end = Clock::now();
  ::close(listen_fd);

  const std::uint64_t disk_bytes = disk.bytes, bad = net.bad + disk.bad;
  const ordo::BufferPoolStats ps = pool.stats();
  const std::uint64_t want_disk = static_cast<std::uint64_t>(cfg.shards) * cfg.shard_bytes;
  const std::uint64_t want_net = static_cast<std::uint64_t>(cfg.records) * cfg.record_bytes;
  std::printf("  disk: %llu bytes, %d of %zu shards O_DIRECT, %.0f MiB/s\n", static_cast<unsigned long long>(disk_bytes),
              direct_count, cfg.shards, mib_per_s(disk_bytes, disk.last - start));
  std::printf("  net:  %llu bytes, %.0f MiB/s\n", static_cast<unsigned long long>(net.bytes),
              mib_per_s(net.bytes, net.last - start));
  std::printf("  both: %.0f MiB/s in %.1f ms; %llu mismatched bytes\n", mib_per_s(disk_bytes + net.bytes, end - start),
              std::chrono::duration<double, std::milli>(end - start).count(), static_cast<unsigned long long>(bad));
  std::printf("  buffers: one pool of %zu KiB for both sources, peak %zu KiB held, %llu acquires, %llu waited\n",
              pool_limit / 1024, ps.peak_reserved_bytes / 1024, static_cast<unsigned long long>(ps.acquires),
              static_cast<unsigned long long>(ps.waits));
  if (bad != 0 || disk_bytes != want_disk || net.bytes != want_net || ps.peak_reserved_bytes > pool_limit) {
    std::fprintf(stderr, "loader: FAILED (expected %llu disk and %llu network bytes, all matching, in at most %zu KiB)\n",
                 static_cast<unsigned long long>(want_disk), static_cast<unsigned long long>(want_net),
                 pool_limit / 1024);
    return 1;
  }
  std::printf("loader: every byte checked, OK\n");
  return run_pooled(engine, io, shard_paths, cfg) ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "loader: %s\n", e.what());
  return 1;
}

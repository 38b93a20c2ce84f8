// ordo::io::Reactor against every backend of this build: the three ways to
// start a request (co_await, callback, OnComplete), errors, exact transfers,
// deadlines, cancellation, engine ordering through buffer variables, and
// shutdown with requests in flight.
#include <fstream>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "ordo/detail/extension.hpp"
#include "ordo/coro.hpp"
#include "ordo/io.hpp"
#include "ordo/task.hpp"

namespace ordo::io {
namespace {

using namespace std::chrono_literals;
using ordo::test::test_seed;

/// A backend to run the suite on, with or without cooperative task running.
struct Variant {
  Backend backend;
  bool coop = false;
  [[nodiscard]] IoOptions options() const {
    return IoOptions{.backend = backend, .cooperative_taskrun = coop, .log = [](std::string_view) {}};
  }
};

std::vector<Variant> variants() {
  std::vector<Variant> out;
#if defined(ORDO_IO_HAVE_URING)
  out.push_back({Backend::uring});
  out.push_back({Backend::uring, true});
#endif
  out.push_back({Backend::threads});
  return out;
}

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) {
  if (info.param.backend == Backend::threads) return "threads";
  return info.param.coop ? "uring_coop" : "uring";
}

/// A temp directory removed at the end of the test.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ordo_io_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::span<std::byte> bytes(std::vector<char>& v) { return std::as_writable_bytes(std::span(v)); }
std::span<const std::byte> cbytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

class Io : public ::testing::TestWithParam<Variant> {
 protected:
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  Reactor io{engine, GetParam().options()};
};

TEST_P(Io, ReportsItsBackend) {
  EXPECT_EQ(io.backend(), GetParam().backend);
  EXPECT_FALSE(io.backend_reason().empty());
  if (GetParam().coop) {
    // Taken, or the reason says why not (a kernel before 5.19).
    const bool unavailable = io.backend_reason().find("cooperative task running unavailable") != std::string::npos;
    EXPECT_EQ(io.cooperative_taskrun(), !unavailable) << io.backend_reason();
  } else {
    EXPECT_FALSE(io.cooperative_taskrun());
  }
}

TEST_P(Io, CoroutineWriteFsyncReadBackResumesOnAWorker) {
  TempDir dir;
  const std::string path = dir.file("data");
  const std::string text = "the quick brown fox jumps over the lazy dog";
  auto body = [&]() -> Task<std::string> {
    const int fd = co_await io.open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_TRUE(Engine::inside_op());  // continued on an engine worker
    EXPECT_EQ(co_await io.write(fd, cbytes(text), 0), text.size());
    co_await io.fsync(fd);
    co_await io.fdatasync(fd);
    const struct statx st = co_await io.fstat(fd);
    EXPECT_EQ(st.stx_size, text.size());
    std::vector<char> back(text.size());
    const std::size_t n = co_await io.read(fd, bytes(back), 0);
    co_await io.close(fd);
    co_return std::string(back.data(), n);
  };
  EXPECT_EQ(sync_wait(body()), text);
  const struct statx st = sync_wait([&]() -> Task<struct statx> { co_return co_await io.stat(path); }());
  EXPECT_EQ(st.stx_size, text.size());
}

// Reads the page cache serves complete during the submit with io_uring: the
// coroutine then goes on where it was, which must still be a worker of the
// resume context (never the main thread, never a completion scope).
TEST_P(Io, CoroutineIsOnAWorkerAfterEveryAwaitEvenWhenTheReadCompletedInline) {
  TempDir dir;
  const std::string path = dir.file("cached");
  std::string text(64 * 1024, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + i % 26);
  {
    std::ofstream f(path, std::ios::binary);
    f.write(text.data(), static_cast<std::streamsize>(text.size()));
  }
  auto body = [&]() -> Task<int> {
    const int fd = co_await io.open(path, O_RDONLY);
    int off_worker = 0;
    std::vector<char> buf(512);
    for (std::size_t off = 0; off + buf.size() <= text.size(); off += buf.size()) {
      const std::size_t n = co_await io.read(fd, bytes(buf), off).exact();
      if (!engine.on_worker_of(Context::cpu()) || CompletionThread::active()) ++off_worker;
      EXPECT_EQ(std::string_view(buf.data(), n), std::string_view(text).substr(off, n));
    }
    co_await io.close(fd);
    co_return off_worker;
  };
  EXPECT_EQ(sync_wait(body()), 0);
  engine.wait_for_all();
}

TEST_P(Io, ErrorsAreTypedAndNameTheOperation) {
  TempDir dir;
  auto expect_errno = [&](auto make, int code) {
    try {
      sync_wait(make());
      ADD_FAILURE() << "no error, expected errno " << code;
    } catch (const IoError& e) {
      EXPECT_EQ(e.code(), std::error_code(code, std::generic_category())) << e.what();
    }
  };
  expect_errno([&]() -> Task<int> { co_return co_await io.open(dir.file("missing"), O_RDONLY); }, ENOENT);
  std::vector<char> buf(16);
  expect_errno([&]() -> Task<std::size_t> { co_return co_await io.read(-1, bytes(buf), 0); }, EBADF);
  try {
    sync_wait([&]() -> Task<void> { co_await io.close(12345); }());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), std::errc::bad_file_descriptor);
    EXPECT_STREQ(e.op(), "close");
    EXPECT_STREQ(e.what(), "ordo::io close: Bad file descriptor");  // the errno's text once, not twice
  }
}

// Issue 31: an open of a missing file said only "No such file or directory",
// not which file. Errors of requests given a path name it, in what() and
// path(), by every way of starting the request, and keep the errno.
TEST_P(Io, ErrorsOfPathRequestsNameThePath) {
  TempDir dir;
  const std::string missing = dir.file("missing.txt");
  const std::string quoted = "'" + missing + "'";
  auto expect_enoent_naming_path = [&](const IoError& e, const char* op) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory) << e.what();
    EXPECT_EQ(e.code(), std::error_code(ENOENT, std::generic_category()));
    EXPECT_STREQ(e.op(), op);
    EXPECT_EQ(e.path(), missing);
    EXPECT_EQ(std::string(e.what()), std::string("ordo::io ") + op + " " + quoted + ": " + std::strerror(ENOENT));
  };
  // co_await
  try {
    sync_wait([&]() -> Task<int> { co_return co_await io.open(missing, O_RDONLY); }());
    ADD_FAILURE() << "opened a missing file";
  } catch (const IoError& e) {
    expect_enoent_naming_path(e, "open");
  }
  try {
    sync_wait([&]() -> Task<struct statx> { co_return co_await io.stat(missing); }());
    ADD_FAILURE() << "stat of a missing file succeeded";
  } catch (const IoError& e) {
    expect_enoent_naming_path(e, "statx");
  }
  // A callback: Result::error() keeps the code, rethrow_if_error() names the path.
  std::promise<std::error_code> code;
  std::promise<std::exception_ptr> thrown;
  io.open(missing, O_RDONLY).then([&](const Result& r) {
    code.set_value(r.error());
    thrown.set_value(r.exception());
  });
  EXPECT_EQ(code.get_future().get(), std::errc::no_such_file_or_directory);
  try {
    std::rethrow_exception(thrown.get_future().get());
  } catch (const IoError& e) {
    expect_enoent_naming_path(e, "open");
  }
  // An OnComplete: the error the op stores on its variable.
  Var v = engine.new_variable();
  engine.push_async([&](RunContext, OnComplete done) { (void)io.open(missing, O_RDONLY).then(done); }, Context::cpu(),
                    {}, {v}, {.prop = FnProperty::async});
  try {
    engine.wait_for_var(v);
    ADD_FAILURE() << "the op did not fail";
  } catch (const IoError& e) {
    expect_enoent_naming_path(e, "open");
  }
  // Requests given no path say nothing of one.
  try {
    sync_wait([&]() -> Task<struct statx> { co_return co_await io.fstat(-1); }());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), std::errc::bad_file_descriptor);
    EXPECT_TRUE(e.path().empty());
    EXPECT_STREQ(e.what(), "ordo::io statx: Bad file descriptor");
  }
  engine.wait_for_all();
}

// Regression: the thread backend passed the request's default fd (-1) as
// openat's dirfd, so a relative path failed with EBADF there (io_uring used
// AT_FDCWD). Both now resolve it against the working directory.
TEST_P(Io, OpenResolvesARelativePathAgainstTheWorkingDirectory) {
  TempDir dir;
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path);
  struct Restore {
    std::filesystem::path p;
    ~Restore() { std::filesystem::current_path(p); }
  } restore{before};
  const int fd = sync_wait([&]() -> Task<int> { co_return co_await io.open("relative", O_RDWR | O_CREAT, 0600); }());
  EXPECT_GE(fd, 0);
  if (fd >= 0) ::close(fd);
  EXPECT_TRUE(std::filesystem::exists(dir.path / "relative"));
  const struct statx st = sync_wait([&]() -> Task<struct statx> { co_return co_await io.stat("relative"); }());
  EXPECT_EQ(st.stx_size, 0U);
}

TEST_P(Io, ExactReadsReportEofAndShortTransfers) {
  TempDir dir;
  const std::string path = dir.file("ten");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("0123456789", f);
    std::fclose(f);
  }
  Fd fd(::open(path.c_str(), O_RDONLY));
  std::vector<char> buf(8);
  // Plain read: short at the end, 0 at EOF, no error.
  EXPECT_EQ(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.read(fd.fd, bytes(buf), 6); }()), 4U);
  EXPECT_EQ(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.read(fd.fd, bytes(buf), 10); }()), 0U);
  // Exact read: EOF and short transfer are errors, told apart.
  try {
    sync_wait([&]() -> Task<std::size_t> { co_return co_await io.read(fd.fd, bytes(buf), 10).exact(); }());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), errc::eof);
    EXPECT_EQ(e.transferred(), 0U);
  }
  try {
    sync_wait([&]() -> Task<std::size_t> { co_return co_await io.read(fd.fd, bytes(buf), 6).exact(); }());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), errc::short_transfer);
    EXPECT_EQ(e.transferred(), 4U);
  }
  EXPECT_EQ(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.read(fd.fd, bytes(buf), 1).exact(); }()), 8U);
  EXPECT_EQ(std::string(buf.data(), 8), "12345678");
  EXPECT_THROW((void)io.close(fd.fd).exact(), Error);  // exact only for transfers
}

TEST_P(Io, ExactRecvGathersSeveralSegments) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<char> buf(12);
  std::promise<void> started;
  std::thread writer([&] {
    started.get_future().wait();
    for (const char* part : {"abcd", "efgh", "ijkl"}) ASSERT_EQ(::send(b.fd, part, 4, 0), 4);
  });
  auto body = [&]() -> Task<std::size_t> {
    auto op = io.recv(a.fd, bytes(buf)).exact();
    started.set_value();
    co_return co_await op;
  };
  EXPECT_EQ(sync_wait(body()), 12U);
  writer.join();
  EXPECT_EQ(std::string(buf.data(), 12), "abcdefghijkl");
}

TEST_P(Io, CallbacksRunOnEngineWorkers) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<char> buf(5);
  std::promise<std::pair<std::size_t, bool>> got;
  io.recv(a.fd, bytes(buf)).then([&](const Result& r) { got.set_value({r.value(), Engine::inside_op()}); });
  ASSERT_EQ(::send(b.fd, "hello", 5, 0), 5);
  auto [n, on_worker] = got.get_future().get();
  EXPECT_EQ(n, 5U);
  EXPECT_TRUE(on_worker);
  EXPECT_EQ(std::string(buf.data(), 5), "hello");
  engine.wait_for_all();
}

TEST_P(Io, PushReadMarksTheBufferVariableWithTheIoError) {
  TempDir dir;
  const std::string path = dir.file("short");
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs("abc", f);
    std::fclose(f);
  }
  Fd fd(::open(path.c_str(), O_RDONLY));
  Var buf_var = engine.new_variable();
  std::vector<char> buf(3), big(10);
  io.push_read(buf_var, fd.fd, bytes(buf), 0);
  std::string seen;
  engine.push_sync([&] { seen.assign(buf.data(), buf.size()); }, Context::cpu(), {buf_var}, {});
  engine.wait_for_var(buf_var);
  engine.wait_for_all();
  EXPECT_EQ(seen, "abc");
  io.push_read(buf_var, fd.fd, bytes(big), 0);  // only 3 of 10 bytes: a short transfer
  bool consumer_ran = false;
  engine.push_sync([&] { consumer_ran = true; }, Context::cpu(), {buf_var}, {});
  try {
    engine.wait_for_var(buf_var);
    ADD_FAILURE() << "the short read did not fail the op";
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), errc::short_transfer);
    EXPECT_EQ(e.transferred(), 3U);
  }
  engine.wait_for_all();
  EXPECT_FALSE(consumer_ran);  // skipped: its input carried the error
}

TEST_P(Io, DeadlinesAndTimers) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<char> buf(4);
  try {
    sync_wait([&]() -> Task<std::size_t> { co_return co_await io.recv(a.fd, bytes(buf)).timeout(20ms); }());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), std::errc::timed_out) << e.what();
  }
  const auto t0 = std::chrono::steady_clock::now();
  sync_wait([&]() -> Task<void> { co_await io.sleep_for(15ms); }());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 15ms);
  // A deadline that does not expire changes nothing.
  ASSERT_EQ(::send(b.fd, "ping", 4, 0), 4);
  EXPECT_EQ(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.recv(a.fd, bytes(buf)).timeout(10s); }()), 4U);
}

TEST_P(Io, StopTokenAndHandleCancelWaitingRequests) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<char> buf(4), buf2(4);
  std::stop_source stop;
  std::promise<void> suspended;
  auto body = [&]() -> Task<std::size_t> {
    auto op = io.recv(a.fd, bytes(buf)).stop_token(stop.get_token());
    suspended.set_value();
    co_return co_await op;
  };
  std::thread canceller([&] {
    suspended.get_future().wait();
    stop.request_stop();
  });
  try {
    sync_wait(body());
    ADD_FAILURE();
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), std::errc::operation_canceled) << e.what();
  }
  canceller.join();
  // Already stopped before the start: cancelled without waiting.
  EXPECT_THROW(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.recv(a.fd, bytes(buf)).stop_token(stop.get_token()); }()),
               IoError);

  std::promise<std::error_code> outcome;
  Handle h = io.recv(a.fd, bytes(buf2)).then([&](const Result& r) { outcome.set_value(r.error()); });
  EXPECT_TRUE(h.cancel());
  EXPECT_EQ(outcome.get_future().get(), std::errc::operation_canceled);
  engine.wait_for_all();
  EXPECT_FALSE(h.cancel());  // delivered: a stale handle is harmless
}

// Issue 32, item 7: the scope's stop source reaches every spawned task,
// including its in-flight io_uring (or thread backend) requests.
TEST_P(Io, ScopeStopCancelsTheInFlightRequestsOfItsTasks) {
  constexpr int kTasks = 3;
  std::vector<Fd> ends;
  std::vector<int> fds;
  for (int i = 0; i < kTasks; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fds.push_back(sv[0]);
    ends.emplace_back(sv[0]);
    ends.emplace_back(sv[1]);
  }
  std::atomic<int> cancelled{0};
  std::atomic<int> started{0};
  std::vector<std::vector<char>> bufs(kTasks, std::vector<char>(4));
  {
    AsyncScope scope;
    auto reader = [&](int i, std::stop_token st) -> Task<void> {
      started.fetch_add(1);
      try {
        (void)co_await io.recv(fds[i], bytes(bufs[i])).stop_token(st);  // no data ever comes
      } catch (const IoError& e) {
        EXPECT_EQ(e.code(), std::errc::operation_canceled) << e.what();
        cancelled.fetch_add(1);
      }
    };
    for (int i = 0; i < kTasks; ++i) scope.spawn([&, i](std::stop_token st) { return reader(i, st); });
    EXPECT_EQ(started.load(), kTasks);
    EXPECT_TRUE(scope.request_stop());
    scope.sync_join();
    EXPECT_TRUE(scope.stop_requested());
  }
  EXPECT_EQ(cancelled.load(), kTasks);
  engine.wait_for_all();
}

TEST_P(Io, CancelRacingCompletionDeliversExactlyOneOutcome) {
  const std::uint64_t seed = test_seed("cancel_race");
  std::mt19937_64 rng(seed);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  const int rounds = 2000 / ordo::test::kScale;
  int completed = 0, cancelled = 0;
  for (int i = 0; i < rounds; ++i) {
    char c = 0;
    std::atomic<int> deliveries{0};
    std::promise<std::error_code> outcome;
    Handle h = io.recv(a.fd, std::as_writable_bytes(std::span(&c, 1))).then([&](const Result& r) {
      deliveries.fetch_add(1);
      outcome.set_value(r.error());
    });
    const bool send_first = (rng() & 1) != 0;
    if (send_first) {
      ASSERT_EQ(::send(b.fd, "x", 1, 0), 1);
    }
    h.cancel();
    const std::error_code ec = outcome.get_future().get();
    if (!ec) {
      ++completed;
    } else {
      ASSERT_EQ(ec, std::errc::operation_canceled);
      ++cancelled;
      if (send_first) {  // the byte is still in the socket: drain it so rounds stay independent
        char d = 0;
        ASSERT_EQ(::recv(a.fd, &d, 1, 0), 1);
      }
    }
    engine.wait_for_all();
    ASSERT_EQ(deliveries.load(), 1);
  }
  EXPECT_EQ(completed + cancelled, rounds);
  std::cout << "[ info     ] completed=" << completed << " cancelled=" << cancelled << "\n";
}

TEST_P(Io, WorkersKeepComputingWhileHundredsOfReadsWait) {
  constexpr int kSilent = 200;
  std::vector<Fd> ends;
  std::vector<std::vector<char>> bufs(kSilent, std::vector<char>(1));
  std::atomic<int> finished{0};
  ordo::test::Counter done;
  for (int i = 0; i < kSilent; ++i) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    ends.emplace_back(p[0]);
    ends.emplace_back(p[1]);
    io.read(p[0], bytes(bufs[i]), Reactor::kCurrent).then([&](const Result& r) {
      EXPECT_EQ(r.value(), 1U);
      finished.fetch_add(1);
      done.arrive();
    });
  }
  // Compute ops run to completion while every read is outstanding.
  Var v = engine.new_variable();
  std::uint64_t acc = 0;
  for (int i = 0; i < 10000; ++i) {
    engine.push_sync([&acc, i] { acc = acc * 31 + static_cast<std::uint64_t>(i); }, Context::cpu(), {}, {v});
  }
  engine.wait_for_var(v);
  EXPECT_EQ(finished.load(), 0);
  for (int i = 0; i < kSilent; ++i) ASSERT_EQ(::write(ends[2 * i + 1].fd, "z", 1), 1);
  EXPECT_TRUE(done.wait_for(kSilent));  // the callbacks are posted by the reaper
  engine.wait_for_all();
  EXPECT_EQ(finished.load(), kSilent);
}

TEST_P(Io, LoopbackTcpAcceptConnectSendRecv) {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener.fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  auto server = [&]() -> Task<std::string> {
    Fd conn(co_await io.accept(listener.fd));
    std::vector<char> buf(5);
    co_await io.recv(conn.fd, bytes(buf)).exact();
    co_await io.send(conn.fd, cbytes("pong!")).exact();
    co_return std::string(buf.data(), 5);
  };
  auto client = [&]() -> Task<std::string> {
    Fd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    co_await io.connect(s.fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
    co_await io.send(s.fd, cbytes("ping!")).exact();
    std::vector<char> buf(5);
    co_await io.recv(s.fd, bytes(buf)).exact();
    co_return std::string(buf.data(), 5);
  };
  auto both = [&]() -> Task<std::pair<std::string, std::string>> {
    auto [s, c] = co_await when_all(server(), client());
    co_return std::pair{s, c};
  };
  auto [got_server, got_client] = sync_wait(both());
  EXPECT_EQ(got_server, "ping!");
  EXPECT_EQ(got_client, "pong!");
}

// Many connections echoing at once over socketpairs: completions arrive in
// bunches, delivered by the reaper, by a submitter reaping inline (io_uring)
// or at once by a direct send (io_uring, a socket with room). Every coroutine
// must continue exactly once per request, on a worker, with its own data.
TEST_P(Io, ManyConnectionsEchoWithEveryContinuationOnAWorker) {
  constexpr int kConns = 48;
  constexpr int kRounds = 60;
  const std::uint64_t seed = test_seed("echo");
  std::vector<Fd> ends;
  for (int i = 0; i < kConns; ++i) {
    int sv[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    ends.emplace_back(sv[0]);
    ends.emplace_back(sv[1]);
  }
  std::atomic<int> off_worker{0}, echoed{0}, wrong{0};
  auto on_worker = [&] {
    if (!engine.on_worker_of(Context::cpu())) off_worker.fetch_add(1);
  };
  auto server = [&](int fd) -> Task<void> {
    std::vector<char> buf(64);
    for (;;) {
      const std::size_t n = co_await io.recv(fd, bytes(buf));
      on_worker();
      if (n == 0) co_return;
      co_await io.send(fd, std::as_bytes(std::span(buf.data(), n))).exact();
      on_worker();
    }
  };
  auto client = [&](int fd, int c) -> Task<void> {
    std::mt19937_64 rng(seed + static_cast<std::uint64_t>(c));
    std::vector<char> out, in;
    for (int r = 0; r < kRounds; ++r) {
      out.assign(1 + rng() % 48, '\0');
      for (char& ch : out) ch = static_cast<char>('a' + rng() % 26);
      co_await io.send(fd, std::as_bytes(std::span(out))).exact();
      on_worker();
      in.assign(out.size(), '\0');
      co_await io.recv(fd, bytes(in)).exact();
      on_worker();
      (in == out ? echoed : wrong).fetch_add(1);
    }
    ::shutdown(fd, SHUT_WR);  // the server sees the end of the stream
  };
  AsyncScope scope;
  for (int i = 0; i < kConns; ++i) {
    scope.spawn(server(ends[2 * i].fd));
    scope.spawn(client(ends[2 * i + 1].fd, i));
  }
  scope.sync_join();
  EXPECT_EQ(echoed.load(), kConns * kRounds);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(off_worker.load(), 0) << "a coroutine continued off the engine's workers";
}

// A read completed by a completion thread (the reaper, the thread backend's
// poll thread) makes the next op of its buffer ready there. ordo's own
// launchers (push_read/push_write: they only submit) start right there, with
// no hop to a worker; a user's async op, even a cheap one, still goes to a
// worker: a completion thread never runs user code.
TEST_P(Io, LaunchersStartOnTheCompletionThreadUserAsyncOpsOnWorkers) {
  // The reaper's path: no idle worker takes the completions (see IdleWorkers below).
  Reactor reaper_io{engine, [] {
                      IoOptions o = GetParam().options();
                      o.idle_workers_reap = false;
                      return o;
                    }()};
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  Fd r(p[0]), w(p[1]);
  std::vector<char> first(1), second(1);
  Var v = engine.new_variable();
  reaper_io.push_read(v, r.fd, bytes(first), Reactor::kCurrent);  // waits for the pipe
  struct Seen {
    std::atomic<bool> ran{false}, completion{false}, worker{false};
  } launcher, user;
  auto record = [this](Seen& seen) {
    return [this, &seen](RunContext, OnComplete done) {
      seen.completion = CompletionThread::active();
      seen.worker = engine.on_worker_of(Context::cpu());
      seen.ran = true;
      done();
    };
  };
  ordo::detail::EngineExtension::push(engine, record(launcher), Context::cpu(), {}, {v}, {.prop = FnProperty::async},
                                      ordo::detail::kRunsOnPusher | ordo::detail::kNoUserCode);
  engine.push_async(record(user), Context::cpu(), {}, {v}, {.prop = FnProperty::async});
  reaper_io.push_read(v, r.fd, bytes(second), Reactor::kCurrent);  // launched behind the user's op
  ASSERT_EQ(::write(w.fd, "ab", 2), 2);
  engine.wait_for_var(v);
  EXPECT_EQ(std::string(first.data(), 1) + std::string(second.data(), 1), "ab");
  ASSERT_TRUE(launcher.ran && user.ran);
  EXPECT_TRUE(launcher.completion) << "the launcher hopped to a worker";
  EXPECT_FALSE(user.completion) << "a user's async op ran on a completion thread";
  EXPECT_TRUE(user.worker);
}

TEST_P(Io, ReadvWritevMoveEverySegment) {
  TempDir dir;
  Fd fd(::open(dir.file("v").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
  std::string p1 = "head-", p2 = "tail";
  const iovec out[2] = {{p1.data(), p1.size()}, {p2.data(), p2.size()}};
  EXPECT_EQ(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.writev(fd.fd, out, 0); }()), 9U);
  std::vector<char> a(5), b(4);
  const iovec in[2] = {{a.data(), a.size()}, {b.data(), b.size()}};
  EXPECT_EQ(sync_wait([&]() -> Task<std::size_t> { co_return co_await io.readv(fd.fd, in, 0); }()), 9U);
  EXPECT_EQ(std::string(a.data(), 5) + std::string(b.data(), 4), "head-tail");
}

TEST_P(Io, FileOpsOrderedByVariablesMatchASerialReplay) {
  // Blocks of a file and in-memory buffers, each with a variable. Random
  // reads (file block -> buffer), writes (buffer -> file block) and compute
  // steps (buffer = f(buffer)) are pushed; the final file and buffers must
  // equal a serial replay of the same sequence.
  const std::uint64_t seed = test_seed("io_differential");
  std::mt19937_64 rng(seed);
  constexpr int kBlocks = 8, kBufs = 4, kSize = 64, kOps = 400;
  TempDir dir;
  Fd fd(::open(dir.file("blocks").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
  std::vector<std::vector<char>> file_model(kBlocks, std::vector<char>(kSize)), buf_model(kBufs, std::vector<char>(kSize));
  for (int b = 0; b < kBlocks; ++b) {
    for (int i = 0; i < kSize; ++i) file_model[b][i] = static_cast<char>('a' + (b + i) % 26);
    ASSERT_EQ(::pwrite(fd.fd, file_model[b].data(), kSize, static_cast<off_t>(b) * kSize), kSize);
  }
  std::vector<std::vector<char>> bufs = buf_model;
  std::vector<Var> block_vars(kBlocks), buf_vars(kBufs);
  for (auto& v : block_vars) v = engine.new_variable();
  for (auto& v : buf_vars) v = engine.new_variable();
  auto step = [](std::vector<char>& b, int salt) {
    for (int i = 0; i < kSize; ++i) b[i] = static_cast<char>(b[i] * 7 + salt + i);
  };
  for (int n = 0; n < kOps; ++n) {
    const int kind = static_cast<int>(rng() % 3);
    const int blk = static_cast<int>(rng() % kBlocks), bi = static_cast<int>(rng() % kBufs);
    const auto off = static_cast<std::uint64_t>(blk) * kSize;
    switch (kind) {
      case 0:
        buf_model[bi] = file_model[blk];
        io.push_read(buf_vars[bi], fd.fd, bytes(bufs[bi]), off, block_vars[blk]);
        break;
      case 1:
        file_model[blk] = buf_model[bi];
        io.push_write(buf_vars[bi], fd.fd, std::as_bytes(std::span(bufs[bi])), off, block_vars[blk]);
        break;
      default: {
        const int salt = static_cast<int>(rng() % 100);
        step(buf_model[bi], salt);
        engine.push_sync([&bufs, bi, salt, step] { step(bufs[bi], salt); }, Context::cpu(), {}, {buf_vars[bi]});
      }
    }
  }
  engine.wait_for_all();
  for (int bi = 0; bi < kBufs; ++bi) EXPECT_EQ(bufs[bi], buf_model[bi]) << "buffer " << bi << " seed=" << seed;
  for (int b = 0; b < kBlocks; ++b) {
    std::vector<char> got(kSize);
    ASSERT_EQ(::pread(fd.fd, got.data(), kSize, static_cast<off_t>(b) * kSize), kSize);
    EXPECT_EQ(got, file_model[b]) << "block " << b << " seed=" << seed;
  }
}

TEST_P(Io, LanesMixingReadsDoneAtOnceAndLaterStayInOrder) {
  // Each lane alternates a read of a file block (from the page cache: done
  // during the submit) and a read of the lane's pipe (done later, when the
  // writer below gets to it), each followed by an op that records the value
  // read, ordered through the lane's buffer variable. The io_uring backend
  // switches how it batches submissions on what the last ones did (in pairs
  // while they complete later, all at once while they complete during the
  // call): every value must still arrive, in each lane's order.
  constexpr int kLanes = 16, kRounds = 40;
  TempDir dir;
  Fd file(::open(dir.file("values").c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600));
  ASSERT_GE(file.fd, 0);
  auto value = [](int round, int lane) { return static_cast<std::uint64_t>(round) * 1000 + static_cast<std::uint64_t>(lane); };
  for (int r = 0; r < kRounds; r += 2) {
    for (int l = 0; l < kLanes; ++l) {
      const std::uint64_t v = value(r, l);
      ASSERT_EQ(::pwrite(file.fd, &v, sizeof v, static_cast<off_t>((r * kLanes + l) * sizeof v)), 8);
    }
  }
  struct Lane {
    Var var;
    std::array<std::byte, 8> buf{};
    std::vector<std::uint64_t> seen;
    std::atomic<int> recorded{0};
  };
  std::vector<Lane> lanes(kLanes);
  std::vector<Fd> pipe_ends;
  for (int l = 0; l < kLanes; ++l) {
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    pipe_ends.emplace_back(p[0]);
    pipe_ends.emplace_back(p[1]);
    lanes[l].var = engine.new_variable();
  }
  for (int r = 0; r < kRounds; ++r) {
    for (int l = 0; l < kLanes; ++l) {
      Lane& lane = lanes[l];
      if (r % 2 == 0) {
        io.push_read(lane.var, file.fd, lane.buf, static_cast<std::uint64_t>((r * kLanes + l) * 8));
      } else {
        io.push_read(lane.var, pipe_ends[2 * l].fd, lane.buf, Reactor::kCurrent);
      }
      engine.push_sync(
          [&lane] {
            std::uint64_t v = 0;
            std::memcpy(&v, lane.buf.data(), sizeof v);
            lane.seen.push_back(v);
            lane.recorded.fetch_add(1, std::memory_order_release);
          },
          Context::cpu(), {lane.var}, {});
    }
  }
  // The pipe's value for round r once the lane has recorded round r - 1:
  // its read is then submitted, or about to be.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  for (int r = 1; r < kRounds; r += 2) {
    for (int l = 0; l < kLanes; ++l) {
      while (lanes[l].recorded.load(std::memory_order_acquire) < r) {
        ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "lane " << l << " stuck before round " << r;
        std::this_thread::yield();
      }
      const std::uint64_t v = value(r, l);
      ASSERT_EQ(::write(pipe_ends[2 * l + 1].fd, &v, sizeof v), 8);
    }
  }
  engine.wait_for_all();
  for (int l = 0; l < kLanes; ++l) {
    std::vector<std::uint64_t> want;
    for (int r = 0; r < kRounds; ++r) want.push_back(value(r, l));
    EXPECT_EQ(lanes[l].seen, want) << "lane " << l;
  }
}

TEST_P(Io, DestructionCancelsAndDeliversEverythingInFlight) {
  constexpr int kWaiting = 50;
  std::vector<Fd> ends;
  std::vector<std::vector<char>> bufs(kWaiting, std::vector<char>(1));
  std::atomic<int> cancelled{0}, other{0};
  {
    Reactor local(engine, GetParam().options());
    for (int i = 0; i < kWaiting; ++i) {
      int sv[2];
      ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
      ends.emplace_back(sv[0]);
      ends.emplace_back(sv[1]);
      local.recv(sv[0], bytes(bufs[i])).then([&](const Result& r) {
        (r.error() == std::errc::operation_canceled ? cancelled : other).fetch_add(1);
      });
    }
  }  // every callback has run when the destructor returns
  EXPECT_EQ(cancelled.load(), kWaiting);
  EXPECT_EQ(other.load(), 0);
}

TEST_P(Io, MisuseIsAClearError) {
  auto op = io.sleep_for(1ms);
  EXPECT_THROW(op.timeout(1s), Error);
  std::vector<char> buf(1);
  auto r = io.read(0, bytes(buf), 0);
  EXPECT_THROW(r.timeout(0s), Error);
  EXPECT_THROW(io.connect(0, nullptr, 0), Error);
  sync_wait([&]() -> Task<void> { co_await op; }());
  EXPECT_THROW(op.then([](const Result&) {}), Error);  // started twice
}

INSTANTIATE_TEST_SUITE_P(Backends, Io, ::testing::ValuesIn(variants()), variant_name);

TEST(IoOptionsEnv, ParsesBackendAndRejectsNonsense) {
  ::setenv("ORDO_IO_BACKEND", "threads", 1);
  EXPECT_EQ(IoOptions::from_env().backend, Backend::threads);
  ::setenv("ORDO_IO_BACKEND", "bogus", 1);
  EXPECT_THROW((void)IoOptions::from_env(), Error);
  ::unsetenv("ORDO_IO_BACKEND");
  EXPECT_EQ(IoOptions::from_env().backend, Backend::automatic);
}

/// IoOptions::from_env() must throw Errc::invalid_argument naming `name` and `value`.
void expect_io_env_rejected(const char* name, const char* value) {
  SCOPED_TRACE(std::string(name) + "='" + value + "'");
  ordo::test::ScopedEnv env(name, value);
  try {
    (void)IoOptions::from_env();
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find(std::string(name) + "='" + value + "'"), std::string::npos) << e.what();
  }
}

// The on/off variables take the same spellings as the core's (issue 31: they
// took only 0 and 1 while ORDO_PROFILE took 0/1/on/off).
TEST(IoOptionsEnv, ParsesItsOnOffVariables) {
  struct OnOff {
    const char* name;
    bool IoOptions::*flag;
    bool by_default;
  };
  for (const OnOff& v : {OnOff{"ORDO_IO_IDLE_WORKERS_REAP", &IoOptions::idle_workers_reap, true},
                         OnOff{"ORDO_IO_COOPERATIVE_TASKRUN", &IoOptions::cooperative_taskrun, false},
                         OnOff{"ORDO_IO_CACHED_READS_INLINE", &IoOptions::cached_reads_inline, true}}) {
    SCOPED_TRACE(v.name);
    EXPECT_EQ(IoOptions::from_env().*v.flag, v.by_default);
    for (const char* on : {"1", "true", "TRUE", "on", "On", "yes", "YES"}) {
      ordo::test::ScopedEnv env(v.name, on);
      EXPECT_TRUE(IoOptions::from_env().*v.flag) << on;
    }
    for (const char* off : {"0", "false", "False", "off", "OFF", "no", "No"}) {
      ordo::test::ScopedEnv env(v.name, off);
      EXPECT_FALSE(IoOptions::from_env().*v.flag) << off;
    }
    for (const char* bad : {"maybe", "", "2", " 1"}) expect_io_env_rejected(v.name, bad);
    EXPECT_EQ(IoOptions::from_env().*v.flag, v.by_default);
  }
}

TEST(IoOptionsEnv, ParsesThreadsInRange) {
  {
    ordo::test::ScopedEnv env("ORDO_IO_THREADS", "7");
    EXPECT_EQ(IoOptions::from_env().threads, 7U);
  }
  EXPECT_EQ(IoOptions::from_env().threads, IoOptions{}.threads);
  for (const char* bad : {"0", "1025", "-1", "four", "", "4 "}) expect_io_env_rejected("ORDO_IO_THREADS", bad);
}

// Idle workers in the ring (IoOptions::idle_workers_reap, io_uring with
// IORING_OP_FUTEX_WAIT). Skipped where the kernel lacks the op.
IoOptions uring_options(bool idle_workers_reap = true) {
  return IoOptions{.backend = Backend::uring, .idle_workers_reap = idle_workers_reap, .log = [](std::string_view) {}};
}

std::unique_ptr<Reactor> make_uring_reactor(Engine& engine, bool idle_workers_reap = true) {
  try {
    return std::make_unique<Reactor>(engine, uring_options(idle_workers_reap));
  } catch (const Error&) {
    return nullptr;  // io_uring unavailable here
  }
}

// A coroutine's timers complete while its one worker is idle: that worker,
// waiting in the ring, delivers them and resumes the coroutine itself; the
// counts say who consumed each completion. Without the option the reaper does.
TEST(IdleWorkers, AnIdleWorkerDeliversTheCompletionsItWaitsFor) {
  for (const bool on : {true, false}) {
    Engine engine{Options{.kind = EngineKind::per_device, .cpu_workers = 1}};
    auto io = make_uring_reactor(engine, on);
    if (!io) GTEST_SKIP() << "io_uring unavailable";
    if (on && !io->idle_workers_reap()) GTEST_SKIP() << "kernel without IORING_OP_FUTEX_WAIT (Linux < 6.7)";
    EXPECT_EQ(io->idle_workers_reap(), on);
    constexpr int kTimers = 20;
    const int resumed = sync_wait([&]() -> Task<int> {
      int n = 0;
      for (int i = 0; i < kTimers; ++i) {
        co_await io->sleep_for(1ms);
        n += engine.on_worker_of(Context::cpu()) ? 1 : 0;
      }
      co_return n;
    }());
    EXPECT_EQ(resumed, kTimers) << "a coroutine continued off the engine's workers";
    const ReactorStats st = io->stats();
    if (on) {
      EXPECT_GT(st.by_workers, 0U) << "reaper " << st.by_reaper << ", submitters " << st.by_submitters;
    } else {
      EXPECT_EQ(st.by_workers, 0U);
      EXPECT_GE(st.by_reaper + st.by_submitters, static_cast<std::uint64_t>(kTimers));
    }
  }
}

// Idle workers sleep on their futex while nothing is in flight, and wait in
// the ring only while something is. Timers started one at a time by a thread
// that is no worker (each after the previous one's callback ran on the
// worker) are still delivered by the worker, from the ring: the submit calls
// it there (EngineExtension::want_idle_task_runner), or the worker, going
// idle after the callback, finds the timer pending. (Which of the two is a
// race; without either, the reaper would deliver every one.)
TEST(IdleWorkers, TimersStartedByAnotherThreadAreDeliveredFromTheRing) {
  Engine engine{Options{.kind = EngineKind::per_device, .cpu_workers = 1}};
  auto io = make_uring_reactor(engine);
  if (!io) GTEST_SKIP() << "io_uring unavailable";
  if (!io->idle_workers_reap()) GTEST_SKIP() << "kernel without IORING_OP_FUTEX_WAIT (Linux < 6.7)";
  constexpr int kTimers = 20;
  for (int i = 0; i < kTimers; ++i) {
    std::promise<void> fired;
    io->sleep_for(5ms).then([&fired](const Result&) { fired.set_value(); });
    fired.get_future().wait();
  }
  const ReactorStats st = io->stats();
  EXPECT_GT(st.by_workers, 0U) << "reaper " << st.by_reaper << ", submitters " << st.by_submitters;
  EXPECT_GT(st.worker_waits, 0U);
}

// Only one reactor's ring per engine: a second reactor runs on its reaper
// alone; once the first is gone a new one attaches. The naive engine has no
// workers to attach.
TEST(IdleWorkers, OneRingPerEngineAndNoneForTheNaiveEngine) {
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  auto first = make_uring_reactor(engine);
  if (!first) GTEST_SKIP() << "io_uring unavailable";
  if (!first->idle_workers_reap()) GTEST_SKIP() << "kernel without IORING_OP_FUTEX_WAIT (Linux < 6.7)";
  auto second = make_uring_reactor(engine);
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->idle_workers_reap());
  first.reset();
  auto third = make_uring_reactor(engine);
  EXPECT_TRUE(third->idle_workers_reap());
  Engine naive{Options{.kind = EngineKind::naive}};
  EXPECT_FALSE(make_uring_reactor(naive)->idle_workers_reap());
}

// An idle process with requests pending (a recv on an idle socket, an hour's
// sleep) costs nearly nothing: the worker waiting in the ring and the reaper,
// its watchdog, back their wake-ups off while nothing happens (they woke
// ~100 and ~1,000 times a second before). Load only lowers the count. The
// requests are still delivered afterwards: the recv's data, the sleep's cancel.
TEST(IdleWorkers, PendingRequestsInAnIdleProcessCostNearlyNoWakeUps) {
  Engine engine{Options{.kind = EngineKind::per_device, .cpu_workers = 2}};
  auto io = make_uring_reactor(engine);
  if (!io) GTEST_SKIP() << "io_uring unavailable";
  if (!io->idle_workers_reap()) GTEST_SKIP() << "kernel without IORING_OP_FUTEX_WAIT (Linux < 6.7)";
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<char> got(1);
  std::promise<std::int64_t> received, slept;
  io->recv(a.fd, bytes(got)).then([&received](const Result& r) { received.set_value(r.ok() ? static_cast<std::int64_t>(r.value()) : -1); });
  const Handle sleep = io->sleep_for(1h).then([&slept](const Result& r) {
    slept.set_value(r.ok() ? 0 : static_cast<std::int64_t>(r.error().value()));
  });
  // A worker waits in the ring (requests in flight), then the process idles.
  for (const auto end = std::chrono::steady_clock::now() + 30s; io->stats().worker_waits == 0;) {
    ASSERT_LT(std::chrono::steady_clock::now(), end) << "no worker came to wait in the ring";
    std::this_thread::yield();
  }
  std::this_thread::sleep_for(300ms);
  const ReactorStats before = io->stats();
  std::this_thread::sleep_for(1s);
  const ReactorStats after = io->stats();
  const std::uint64_t reaper = after.reaper_wakeups - before.reaper_wakeups;
  const std::uint64_t worker = after.worker_waits - before.worker_waits;
  EXPECT_LT(reaper + worker, 100U) << "in 1 s: reaper " << reaper << ", worker in the ring " << worker;
  ASSERT_EQ(::send(b.fd, "x", 1, 0), 1);
  EXPECT_EQ(received.get_future().get(), 1);
  EXPECT_EQ(got[0], 'x');
  EXPECT_TRUE(sleep.cancel());
  EXPECT_EQ(slept.get_future().get(), ECANCELED);
}

// Reactors come and go on one engine while its workers wait in their rings,
// with I/O and CPU ops in flight around them: each destruction takes the
// worker out of the ring and delivers everything; the engine keeps working.
TEST(IdleWorkers, ReactorsComeAndGoWhileWorkersWaitInTheRing) {
  Engine engine{Options{.kind = EngineKind::per_device, .cpu_workers = 2}};
  Var counter = engine.new_variable();
  std::int64_t value = 0;
  for (int round = 0; round < 30; ++round) {
    auto io = make_uring_reactor(engine);
    if (!io) GTEST_SKIP() << "io_uring unavailable";
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    Fd r(p[0]), w(p[1]);
    std::vector<char> got(1);
    // A named lambda: the coroutine's frame refers to its captures.
    auto read_one = [&]() -> Task<std::size_t> { co_return co_await io->read(r.fd, bytes(got), Reactor::kCurrent); };
    auto reader = read_one();
    std::thread writer([&] {
      const char c = static_cast<char>('a' + round % 26);
      EXPECT_EQ(::write(w.fd, &c, 1), 1);
    });
    for (int i = 0; i < 10; ++i) engine.push_sync([&value] { ++value; }, Context::cpu(), {}, {counter});
    EXPECT_EQ(sync_wait(std::move(reader)), 1U);
    EXPECT_EQ(got[0], static_cast<char>('a' + round % 26));
    writer.join();
    if (round % 3 == 0) {
      // Leave a read in flight: the destruction cancels it.
      std::vector<char> never(1);
      io->read(r.fd, bytes(never), Reactor::kCurrent).then([](const Result&) {});
    }
    io.reset();
    engine.wait_for_var(counter);
    EXPECT_EQ(value, 10 * (round + 1));
  }
}

}  // namespace
}  // namespace ordo::io

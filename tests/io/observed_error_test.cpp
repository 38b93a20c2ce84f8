// ordo::io errors and the engine's "observed" rule (docs/guide.md, "Errors
// and exceptions"): an IoError that fails an engine op and then reaches a
// coroutine (co_await of wait_for, of a skipped push, or escaping a held
// lease to sync_wait) is observed, so wait_for_all does not rethrow it again
// and the engine's destructor does not report it; one nobody got is
// rethrown or reported exactly once. The IoError keeps its message and path
// all the way.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ordo/coro.hpp"
#include "ordo/io.hpp"
#include "ordo/task.hpp"
#include "io/io_test_util.hpp"

namespace ordo::io {
namespace {


class IoObserved : public ::testing::TestWithParam<Backend> {
 protected:
  IoObserved() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ordo_io_obs_XXXXXX").string();
    dir_ = ::mkdtemp(tmpl.data());
    missing = (dir_ / "missing.txt").string();
  }
  ~IoObserved() override { std::filesystem::remove_all(dir_); }

  Options options() {
    return Options{.kind = EngineKind::pooled,
                   .cpu_workers = 2,
                   .on_unobserved_error = [this](const ErrorReport& r) { reports.push_back(r); }};
  }
  IoOptions io_options() const { return IoOptions{.backend = GetParam(), .log = [](std::string_view) {}}; }
  std::string report_names() const {
    std::string out;
    for (const ErrorReport& r : reports) out += "'" + r.op_name + "': " + r.message + "; ";
    return out;
  }
  void expect_missing(const IoError& e) const {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory) << e.what();
    EXPECT_EQ(e.path(), missing);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }

  std::filesystem::path dir_;
  std::string missing;
  std::vector<ErrorReport> reports;  ///< filled by the engine's destructor
};

/// A file holding "abc" (a read of more than 3 bytes from it falls short).
std::string short_file(const std::filesystem::path& dir) {
  const std::string path = (dir / "short").string();
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fputs("abc", f);
  std::fclose(f);
  return path;
}

// A coroutine holding a lease on a written variable catches the IoError of
// its co_await: nothing fails the op, nothing is left for the engine.
TEST_P(IoObserved, IoErrorCaughtUnderALeaseLeavesNothing) {
  {
    Engine engine(options());
    Reactor io(engine, io_options());
    Var v = engine.new_variable();
    auto task = [&]() -> Task<bool> {
      Lease lease = co_await push(engine, reads(), writes(v), Context::cpu(), {.name = "holder"});
      try {
        (void)co_await io.open(missing, O_RDONLY);
      } catch (const IoError& e) {
        expect_missing(e);
        co_return true;
      }
      co_return false;
    };
    EXPECT_TRUE(sync_wait(task()));
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  EXPECT_TRUE(reports.empty()) << report_names();
}

// The IoError escapes the coroutine through its lease: the op fails with it
// (the variable carries it) and sync_wait rethrows it: observed once.
TEST_P(IoObserved, IoErrorEscapingALeaseIsObservedBySyncWait) {
  {
    Engine engine(options());
    Reactor io(engine, io_options());
    Var v = engine.new_variable();
    auto task = [&]() -> Task<int> {
      Lease lease = co_await push(engine, reads(), writes(v), Context::cpu(), {.name = "holder"});
      co_return co_await io.open(missing, O_RDONLY);
    };
    try {
      (void)sync_wait(task());
      ADD_FAILURE() << "opened a missing file";
    } catch (const IoError& e) {
      expect_missing(e);
    }
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  EXPECT_TRUE(reports.empty()) << report_names();
}

// An engine op failed by an io request (push_read's short read; an async op
// whose OnComplete or Result callback carries the IoError) is awaited by a
// coroutine: wait_for, or a push skipped because of it, rethrows the IoError
// there; wait_for_all and the destructor pass over it.
TEST_P(IoObserved, IoErrorOfAnOpRethrownInACoroutineIsObserved) {
  const std::string path = short_file(dir_);
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  {
    Engine engine(options());
    Reactor io(engine, io_options());
    Var buf_var = engine.new_variable();
    Var opened = engine.new_variable();
    Var called_back = engine.new_variable();
    std::vector<char> big(10);
    io.push_read(buf_var, fd, std::as_writable_bytes(std::span(big)), 0);
    engine.push_async([&](RunContext, OnComplete done) { io.open(missing, O_RDONLY).then(done); }, Context::cpu(), {},
                      {opened}, {.prop = FnProperty::async, .name = "open by OnComplete"});
    engine.push_async(
        [&](RunContext, OnComplete done) {
          io.open(missing, O_RDONLY).then([done](const Result& r) {
            if (r.ok()) {
              ::close(static_cast<int>(r.value()));
              done();
            } else {
              done(r.exception());
            }
          });
        },
        Context::cpu(), {}, {called_back}, {.prop = FnProperty::async, .name = "open by callback"});
    auto task = [&]() -> Task<int> {
      int caught = 0;
      try {
        co_await wait_for(engine, buf_var);
      } catch (const IoError& e) {
        EXPECT_EQ(e.code(), errc::short_transfer) << e.what();
        ++caught;
      }
      try {
        co_await wait_for(engine, opened);
      } catch (const IoError& e) {
        expect_missing(e);
        ++caught;
      }
      try {
        co_await push(engine, reads(called_back), writes(), [] {});
      } catch (const IoError& e) {
        expect_missing(e);
        ++caught;
      }
      co_return caught;
    };
    EXPECT_EQ(sync_wait(task()), 3);
    EXPECT_EQ(engine.pending_errors(), 0U);
    EXPECT_NO_THROW(engine.wait_for_all());
  }
  ::close(fd);
  EXPECT_TRUE(reports.empty()) << report_names();
}

// The other half: an IoError nobody awaited is the engine's, once: the first
// wait_for_all rethrows it (the IoError itself, path included), and one
// never waited for is reported at destruction by its op's name.
TEST_P(IoObserved, IoErrorsNoWaiterGotAreRethrownOrReportedOnce) {
  {
    Engine engine(options());
    Reactor io(engine, io_options());
    Var first = engine.new_variable();
    Var second = engine.new_variable();
    engine.push_async([&](RunContext, OnComplete done) { io.open(missing, O_RDONLY).then(done); }, Context::cpu(), {},
                      {first}, {.prop = FnProperty::async, .name = "waited"});
    try {
      engine.wait_for_all();
      ADD_FAILURE() << "wait_for_all did not rethrow the unobserved IoError";
    } catch (const IoError& e) {
      expect_missing(e);
    }
    EXPECT_NO_THROW(engine.wait_for_all());
    engine.push_async([&](RunContext, OnComplete done) { io.open(missing, O_RDONLY).then(done); }, Context::cpu(), {},
                      {second}, {.prop = FnProperty::async, .name = "never waited"});
    // Until the op has failed (the Reactor, destroyed first, would cancel the open), without waiting on it.
    while (engine.pending_errors() == 0U) std::this_thread::yield();
  }
  ASSERT_EQ(reports.size(), 1U) << report_names();
  EXPECT_EQ(reports[0].op_name, "never waited");
  EXPECT_NE(reports[0].message.find(missing), std::string::npos) << reports[0].message;
}

INSTANTIATE_TEST_SUITE_P(Backends, IoObserved, ::testing::ValuesIn(backends()), backend_name);

}  // namespace
}  // namespace ordo::io

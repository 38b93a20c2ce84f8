// ordo::io's file-system requests (issue 32, item 9): open/stat relative to a
// directory, mkdir, unlink, rmdir, rename, list_dir, on every backend of this
// build. Suites named FsOps* also carry the ctest label `toolkit`.
#include <fcntl.h>
#include <stdio.h>  // RENAME_NOREPLACE
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>

#include <gtest/gtest.h>

#include "backends.hpp"
#include "core/test_util.hpp"
#include "io/io_test_util.hpp"
#include "ordo/generator.hpp"
#include "ordo/io.hpp"
#include "ordo/io/files.hpp"
#include "ordo/task.hpp"

namespace ordo::io {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ordo_fs_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  [[nodiscard]] std::string operator/(const std::string& rel) const { return (path / rel).string(); }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The errno of what `task` threw (0: it succeeded), checking it is an IoError.
template <class T>
int error_of(Task<T> task) {
  try {
    (void)sync_wait(std::move(task));
    return 0;
  } catch (const IoError& e) {
    return e.code().value();
  }
}

/// What `op` threw, which must be an IoError.
template <class T>
IoError failure_of(IoOp<T> op) {
  auto run = [](IoOp<T> o) -> Task<void> { (void)co_await std::move(o); };
  try {
    sync_wait(run(std::move(op)));
  } catch (const IoError& e) {
    return e;
  }
  ADD_FAILURE() << "the request succeeded";
  return IoError(std::error_code(), "none");
}

template <class T>
Task<T> await_op(IoOp<T> op) {
  co_return co_await std::move(op);
}
inline Task<void> await_op(IoOp<void> op) { co_await std::move(op); }

class FsOps : public ::testing::TestWithParam<Backend> {
 protected:
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  Reactor io{engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}}};
  TempDir tmp;

  /// An open directory, closed by the test's end.
  int open_dir(const std::string& path) {
    const int fd = sync_wait(await_op(io.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)));
    fds_.push_back(fd);
    return fd;
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }

 private:
  std::vector<int> fds_;
};

TEST_P(FsOps, CreatesATreeAndOpensFilesRelativeToADirectory) {
  const std::string content = "relative to a directory fd\n";
  auto body = [&]() -> Task<void> {
    co_await io.mkdir(tmp / "a");
    const int root = co_await io.open(tmp.path.string(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    co_await io.mkdir(root, "a/b", 0700);
    const int fd = co_await io.open(root, "a/b/f.txt", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
    co_await io.write(fd, std::as_bytes(std::span(content)), 0).exact();
    co_await io.close(fd);
    // An absolute path ignores the directory fd.
    const int again = co_await io.open(root, tmp / "a/b/f.txt", O_RDONLY | O_CLOEXEC);
    std::string back(content.size(), '\0');
    co_await io.read(again, std::as_writable_bytes(std::span(back)), 0).exact();
    co_await io.close(again);
    EXPECT_EQ(back, content);
    const struct statx st = co_await io.stat(root, "a/b/f.txt", STATX_SIZE | STATX_MODE);
    EXPECT_EQ(st.stx_size, content.size());
    EXPECT_EQ(st.stx_mode & 0777, 0600U);
    const struct statx dir = co_await io.stat(root, "a/b");
    EXPECT_TRUE(S_ISDIR(dir.stx_mode));
    EXPECT_EQ(dir.stx_mode & 0077, 0U);  // 0700, less the umask
    co_await io.close(root);
  };
  sync_wait(body());
  EXPECT_TRUE(fs::is_directory(tmp.path / "a/b"));
  EXPECT_EQ(slurp(tmp.path / "a/b/f.txt"), content);
}

TEST_P(FsOps, RenameMovesAndNoReplaceRefusesAnExistingTarget) {
  std::ofstream(tmp.path / "x") << "x";
  std::ofstream(tmp.path / "z") << "z";
  fs::create_directory(tmp.path / "sub");
  const int root = open_dir(tmp.path.string());
  const int sub = open_dir(tmp / "sub");
  sync_wait(await_op(io.rename(root, "x", sub, "y")));
  EXPECT_FALSE(fs::exists(tmp.path / "x"));
  EXPECT_EQ(slurp(tmp.path / "sub/y"), "x");
  sync_wait(await_op(io.rename(tmp / "sub/y", tmp / "y")));
  EXPECT_EQ(slurp(tmp.path / "y"), "x");

  const IoError e = failure_of(io.rename(root, "y", root, "z", RENAME_NOREPLACE));
  if (e.code() == std::errc::invalid_argument) GTEST_SKIP() << "this file system has no RENAME_NOREPLACE";
  EXPECT_EQ(e.code(), std::errc::file_exists);
  EXPECT_STREQ(e.op(), "rename");
  EXPECT_EQ(e.path(), "y");
  EXPECT_EQ(e.new_path(), "z");
  const std::string in_root = "(in directory fd " + std::to_string(root) + ")";
  EXPECT_EQ(std::string(e.what()), "ordo::io rename 'y' " + in_root + " to 'z' " + in_root + ": File exists");
  EXPECT_EQ(slurp(tmp.path / "y"), "x");
  EXPECT_EQ(slurp(tmp.path / "z"), "z");
  // Without the flag the target is replaced.
  sync_wait(await_op(io.rename(root, "y", root, "z")));
  EXPECT_FALSE(fs::exists(tmp.path / "y"));
  EXPECT_EQ(slurp(tmp.path / "z"), "x");
}

TEST_P(FsOps, UnlinkRemovesFilesAndRmdirOnlyEmptyDirectories) {
  fs::create_directories(tmp.path / "d/e");
  std::ofstream(tmp.path / "d/f") << "f";
  const int root = open_dir(tmp.path.string());

  const IoError full = failure_of(io.rmdir(root, "d"));
  EXPECT_EQ(full.code(), std::errc::directory_not_empty);
  EXPECT_STREQ(full.op(), "rmdir");
  EXPECT_EQ(full.path(), "d");
  EXPECT_NE(std::string(full.what()).find("rmdir 'd' (in directory fd"), std::string::npos) << full.what();
  EXPECT_NE(std::string(full.what()).find("Directory not empty"), std::string::npos) << full.what();

  const IoError dir = failure_of(io.unlink(tmp / "d/e"));  // unlink does not remove directories
  EXPECT_EQ(dir.code(), std::errc::is_a_directory);
  EXPECT_EQ(dir.path(), tmp / "d/e");
  const IoError file = failure_of(io.rmdir(tmp / "d/f"));  // nor rmdir files
  EXPECT_EQ(file.code(), std::errc::not_a_directory);

  sync_wait(await_op(io.unlink(root, "d/f")));
  sync_wait(await_op(io.rmdir(root, "d/e")));
  sync_wait(await_op(io.rmdir(tmp / "d")));
  EXPECT_TRUE(fs::is_empty(tmp.path));
}

TEST_P(FsOps, ListDirMatchesWhatWasCreated) {
  std::vector<DirEntry> expected;
  auto add = [&](const std::string& name, FileType type) {
    const fs::path p = tmp.path / "list" / name;
    switch (type) {
      case FileType::regular: std::ofstream(p) << name; break;
      case FileType::directory: fs::create_directory(p); break;
      case FileType::symlink: fs::create_symlink("no-such-target", p); break;
      case FileType::fifo: ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); break;
      default: FAIL();
    }
    struct stat st {};
    ASSERT_EQ(::lstat(p.c_str(), &st), 0);
    expected.push_back({name, type, st.st_ino});
  };
  fs::create_directory(tmp.path / "list");
  for (int i = 0; i < 40; ++i) add("file" + std::to_string(i), FileType::regular);
  add("dir", FileType::directory);
  add("link", FileType::symlink);
  add("pipe", FileType::fifo);
  add(".hidden", FileType::regular);
  std::sort(expected.begin(), expected.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });

  EXPECT_EQ(sync_wait(await_op(io.list_dir(tmp / "list"))), expected);
  const int root = open_dir(tmp.path.string());
  EXPECT_EQ(sync_wait(await_op(io.list_dir(root, "list"))), expected);
  EXPECT_TRUE(sync_wait(await_op(io.list_dir(root, "list/dir"))).empty());

  // The callback form hands the entries over in the Result.
  std::vector<DirEntry> got;
  std::latch done(1);
  io.list_dir(root, "list").then([&](const Result& r) {
    EXPECT_EQ(r.value(), expected.size());
    got = std::move(r.entries());
    done.count_down();
  });
  done.wait();
  EXPECT_EQ(got, expected);
}

std::size_t open_fds() {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator()));
}

/// Up to `limit` entries of `gen`, then the generator is dropped.
Task<std::vector<DirEntry>> take(AsyncGenerator<DirEntry> gen, std::size_t limit) {
  std::vector<DirEntry> out;
  while (out.size() < limit) {
    std::optional<DirEntry> e = co_await gen.next();
    if (!e) break;
    out.push_back(std::move(*e));
  }
  co_return out;
}

TEST_P(FsOps, DirEntriesStreamsADirectoryInBatches) {
  fs::create_directory(tmp.path / "big");
  const std::string pad(60, 'p');  // ~90-byte records: several 32 KiB batches
  for (int i = 0; i < 2000; ++i) std::ofstream(tmp.path / "big" / (pad + std::to_string(i))) << i;
  fs::create_directory(tmp.path / "big/sub");
  const std::vector<DirEntry> all = sync_wait(await_op(io.list_dir(tmp / "big")));
  ASSERT_EQ(all.size(), 2001U);
  auto by_name = [](std::vector<DirEntry> v) {
    std::sort(v.begin(), v.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return v;
  };
  const int root = open_dir(tmp.path.string());
  EXPECT_EQ(by_name(sync_wait(take(dir_entries(io, tmp / "big"), SIZE_MAX))), all);
  EXPECT_EQ(by_name(sync_wait(take(dir_entries(io, root, "big"), SIZE_MAX))), all);

  // read_dir itself: batches from the descriptor's position, empty at the end.
  const int big = open_dir(tmp / "big");
  std::vector<DirEntry> batches;
  int count = 0;
  for (;;) {
    std::vector<DirEntry> batch = sync_wait(await_op(io.read_dir(big)));
    if (batch.empty()) break;
    ++count;
    batches.insert(batches.end(), batch.begin(), batch.end());
  }
  EXPECT_GT(count, 1);
  EXPECT_EQ(by_name(batches), all);
  EXPECT_TRUE(sync_wait(await_op(io.read_dir(big))).empty());

  // Dropped before the end: its descriptor is closed.
  const std::size_t fds = open_fds();
  EXPECT_EQ(sync_wait(take(dir_entries(io, root, "big"), 3)).size(), 3U);
  EXPECT_EQ(open_fds(), fds);

  // Errors name the path (read_dir alone knows only its descriptor).
  try {
    (void)sync_wait(take(dir_entries(io, root, "missing"), SIZE_MAX));
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
    EXPECT_EQ(e.path(), "missing");
  }
  std::ofstream(tmp.path / "file") << "f";
  const int file = ::open((tmp / "file").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(file, 0);
  const IoError not_dir = failure_of(io.read_dir(file));
  ::close(file);
  EXPECT_EQ(not_dir.code(), std::errc::not_a_directory);
  EXPECT_STREQ(not_dir.op(), "read_dir");
}

TEST_P(FsOps, MissingPathsAreNamedInTheError) {
  const int root = open_dir(tmp.path.string());
  const std::string fd_note = "(in directory fd " + std::to_string(root) + ")";
  struct Case {
    const char* op;
    IoError error;
    std::string path;
  };
  const std::string missing = tmp / "missing";
  std::vector<Case> cases;
  cases.push_back({"open", failure_of(io.open(missing, O_RDONLY)), missing});
  cases.push_back({"open", failure_of(io.open(root, "missing/x", O_RDONLY)), "missing/x"});
  cases.push_back({"statx", failure_of(io.stat(root, "missing")), "missing"});
  cases.push_back({"mkdir", failure_of(io.mkdir(root, "missing/sub")), "missing/sub"});
  cases.push_back({"mkdir", failure_of(io.mkdir(missing + "/sub")), missing + "/sub"});
  cases.push_back({"unlink", failure_of(io.unlink(missing)), missing});
  cases.push_back({"unlink", failure_of(io.unlink(root, "missing")), "missing"});
  cases.push_back({"rmdir", failure_of(io.rmdir(root, "missing")), "missing"});
  cases.push_back({"rename", failure_of(io.rename(missing, tmp / "to")), missing});
  cases.push_back({"list_dir", failure_of(io.list_dir(missing)), missing});
  cases.push_back({"list_dir", failure_of(io.list_dir(root, "missing")), "missing"});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error.what());
    EXPECT_EQ(c.error.code(), std::errc::no_such_file_or_directory);
    EXPECT_STREQ(c.error.op(), c.op);
    EXPECT_EQ(c.error.path(), c.path);
    const std::string what = c.error.what();
    EXPECT_NE(what.find(std::string("ordo::io ") + c.op + " '" + c.path + "'"), std::string::npos);
    EXPECT_EQ(what.find(fd_note) != std::string::npos, c.path[0] != '/');
  }
  EXPECT_EQ(cases[8].error.new_path(), tmp / "to");

  // An existing directory: mkdir says so, naming it.
  const IoError exists = failure_of(io.mkdir(tmp.path.string()));
  EXPECT_EQ(exists.code(), std::errc::file_exists);
  EXPECT_EQ(std::string(exists.what()), "ordo::io mkdir '" + tmp.path.string() + "': File exists");

  // The callback and OnComplete forms carry the same error.
  std::latch done(1);
  io.unlink(root, "missing").then([&](const Result& r) {
    EXPECT_FALSE(r.ok());
    EXPECT_STREQ(r.op(), "unlink");
    try {
      r.rethrow_if_error();
    } catch (const IoError& e) {
      EXPECT_EQ(e.path(), "missing");
    }
    done.count_down();
  });
  done.wait();
  const Var v = engine.new_variable();
  engine.push_async([&](RunContext, OnComplete on) { io.list_dir(missing).then(on); }, Context::cpu(), {}, {v},
                    {.prop = FnProperty::async, .name = "list_dir by OnComplete"});
  try {
    engine.wait_for_var(v);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.path(), missing);
    EXPECT_STREQ(e.op(), "list_dir");
  }
}

/// A stop requested before the start: the request is cancelled, or had
/// completed first; the file system agrees with whichever outcome came.
TEST_P(FsOps, StoppedRequestsEitherCancelOrTakeEffect) {
  int cancelled = 0;
  for (int i = 0; i < 40; ++i) {
    const std::string dir = tmp / ("d" + std::to_string(i));
    std::stop_source stop;
    stop.request_stop();
    const int err = error_of(await_op(io.mkdir(dir).stop_token(stop.get_token())));
    ASSERT_TRUE(err == 0 || err == ECANCELED) << std::error_code(err, std::generic_category()).message();
    EXPECT_EQ(fs::exists(dir), err == 0);
    cancelled += err == ECANCELED ? 1 : 0;
    const int listed = error_of(await_op(io.list_dir(tmp.path.string()).stop_token(stop.get_token())));
    ASSERT_TRUE(listed == 0 || listed == ECANCELED) << listed;
  }
  RecordProperty("cancelled", cancelled);
  // A deadline that does not pass changes nothing (io_uring: a linked timeout).
  sync_wait(await_op(io.mkdir(tmp / "timed").timeout(std::chrono::seconds(30))));
  sync_wait(await_op(io.rename(tmp / "timed", tmp / "renamed").timeout(std::chrono::seconds(30))));
  EXPECT_EQ(sync_wait(await_op(io.list_dir(tmp / "renamed").timeout(std::chrono::seconds(30)))).size(), 0U);
  sync_wait(await_op(io.rmdir(tmp / "renamed").timeout(std::chrono::seconds(30))));
}

// ---------------------------------------------------------------------------
// Many concurrent requests against a serial model: lanes (one directory each)
// run a random sequence of requests, each awaited before the next; lanes run
// concurrently. Every outcome (errno) and the final tree must match the model.

struct LaneModel {
  std::set<std::string> dirs;                // "d0".."d2", at the lane's top
  std::map<std::string, std::string> files;  // "f1" or "d0/f1" -> content

  static std::string parent(const std::string& p) {
    const auto slash = p.find('/');
    return slash == std::string::npos ? std::string() : p.substr(0, slash);
  }
  [[nodiscard]] bool parent_ok(const std::string& p) const {
    const std::string d = parent(p);
    return d.empty() || dirs.count(d) != 0;
  }
  [[nodiscard]] bool dir_empty(const std::string& d) const {
    return std::none_of(files.begin(), files.end(), [&](const auto& f) { return parent(f.first) == d; });
  }
  [[nodiscard]] std::vector<DirEntry> listing(const std::string& d) const {
    std::vector<DirEntry> out;
    if (d.empty()) {
      for (const auto& name : dirs) out.push_back({name, FileType::directory, 0});
    }
    for (const auto& [path, content] : files) {
      if (parent(path) == d) out.push_back({d.empty() ? path : path.substr(d.size() + 1), FileType::regular, 0});
    }
    std::sort(out.begin(), out.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
    return out;
  }
};

enum class FsOp { mkdir, create, unlink, rmdir, rename_file, rename_dir, read, list, kCount };

struct LaneResult {
  LaneModel model;
  std::vector<std::string> mismatches;
  int failures = 0;  ///< requests the model expected to fail
};

Task<LaneResult> run_lane(Reactor& io, std::string root, int root_fd, int lane, std::uint64_t seed, int ops) {
  std::mt19937_64 rng(seed);
  const std::string name = "lane" + std::to_string(lane);
  co_await io.mkdir(root_fd, name);
  const int lane_fd = co_await io.open(root_fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  LaneModel model;
  std::vector<std::string> mismatches;
  int failures = 0;
  auto pick_dir = [&] { return "d" + std::to_string(rng() % 3); };
  auto pick_file = [&] {
    std::string f = "f" + std::to_string(rng() % 4);
    return rng() % 2 == 0 ? f : pick_dir() + "/" + f;
  };
  // One of three ways to name a lane path: absolute, relative to the root, relative to the lane.
  struct Where {
    int fd;
    std::string path;
  };
  auto where = [&](const std::string& rel) -> Where {
    switch (rng() % 3) {
      case 0: return {AT_FDCWD, root + "/" + name + "/" + rel};
      case 1: return {root_fd, name + "/" + rel};
      default: return {lane_fd, rel};
    }
  };
  for (int i = 0; i < ops; ++i) {
    const auto op = static_cast<FsOp>(rng() % static_cast<unsigned>(FsOp::kCount));
    int expected = 0;
    int got = 0;
    std::string what;
    try {
      switch (op) {
        case FsOp::mkdir: {
          const std::string d = pick_dir();
          what = "mkdir " + d;
          expected = model.dirs.count(d) != 0 ? EEXIST : 0;
          if (expected == 0) model.dirs.insert(d);
          const Where w = where(d);
          co_await io.mkdir(w.fd, w.path);
          break;
        }
        case FsOp::create: {
          const std::string f = pick_file();
          const std::string content = f + "@" + std::to_string(i) + std::string(rng() % 5000, 'c');
          what = "create " + f;
          expected = !model.parent_ok(f) ? ENOENT : model.files.count(f) != 0 ? EEXIST : 0;
          if (expected == 0) model.files[f] = content;
          const Where w = where(f);
          const int fd = co_await io.open(w.fd, w.path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);
          co_await io.write(fd, std::as_bytes(std::span(content)), 0).exact();
          co_await io.close(fd);
          break;
        }
        case FsOp::unlink: {
          const std::string f = pick_file();
          what = "unlink " + f;
          expected = model.files.erase(f) != 0 ? 0 : ENOENT;
          const Where w = where(f);
          co_await io.unlink(w.fd, w.path);
          break;
        }
        case FsOp::rmdir: {
          const std::string d = pick_dir();
          what = "rmdir " + d;
          expected = model.dirs.count(d) == 0 ? ENOENT : !model.dir_empty(d) ? ENOTEMPTY : 0;
          if (expected == 0) model.dirs.erase(d);
          const Where w = where(d);
          co_await io.rmdir(w.fd, w.path);
          break;
        }
        case FsOp::rename_file: {
          const std::string from = pick_file();
          std::string to = pick_file();
          while (to == from) to = pick_file();
          const unsigned flags = rng() % 2 == 0 ? 0U : RENAME_NOREPLACE;
          what = "rename " + from + " " + to + (flags != 0 ? " noreplace" : "");
          if (!model.parent_ok(from) || !model.parent_ok(to) || model.files.count(from) == 0) {
            expected = ENOENT;
          } else if (flags != 0 && model.files.count(to) != 0) {
            expected = EEXIST;
          } else {
            model.files[to] = model.files[from];
            model.files.erase(from);
          }
          const Where a = where(from);
          const Where b = where(to);
          co_await io.rename(a.fd, a.path, b.fd, b.path, flags);
          break;
        }
        case FsOp::rename_dir: {
          const std::string from = pick_dir();
          std::string to = pick_dir();
          while (to == from) to = pick_dir();
          const unsigned flags = rng() % 2 == 0 ? 0U : RENAME_NOREPLACE;
          what = "rename " + from + " " + to + (flags != 0 ? " noreplace" : "");
          if (model.dirs.count(from) == 0) {
            expected = ENOENT;
          } else if (model.dirs.count(to) != 0 && flags != 0) {
            expected = EEXIST;
          } else if (model.dirs.count(to) != 0 && !model.dir_empty(to)) {
            expected = ENOTEMPTY;
          } else {
            model.dirs.erase(from);
            model.dirs.insert(to);
            std::map<std::string, std::string> moved;
            for (auto& [path, content] : model.files) {
              moved[LaneModel::parent(path) == from ? to + path.substr(from.size()) : path] = content;
            }
            model.files = std::move(moved);
          }
          const Where a = where(from);
          const Where b = where(to);
          co_await io.rename(a.fd, a.path, b.fd, b.path, flags);
          break;
        }
        case FsOp::read: {
          const std::string f = pick_file();
          what = "read " + f;
          const auto it = model.files.find(f);
          expected = it == model.files.end() ? ENOENT : 0;
          const Where w = where(f);
          const int fd = co_await io.open(w.fd, w.path, O_RDONLY | O_CLOEXEC);
          std::string back(8192, '\0');
          const std::size_t n = co_await io.read(fd, std::as_writable_bytes(std::span(back)), 0);
          co_await io.close(fd);
          back.resize(n);
          if (it == model.files.end() || back != it->second) {
            mismatches.push_back(std::to_string(i) + ": " + what + ": content");
          }
          break;
        }
        case FsOp::list: {
          const std::string d = rng() % 3 == 0 ? std::string() : pick_dir();
          what = "list '" + d + "'";
          expected = !d.empty() && model.dirs.count(d) == 0 ? ENOENT : 0;
          const Where w = where(d.empty() ? "." : d);
          std::vector<DirEntry> got_entries = co_await io.list_dir(w.fd, w.path);
          for (DirEntry& e : got_entries) e.inode = 0;
          if (expected == 0 && got_entries != model.listing(d)) {
            mismatches.push_back(std::to_string(i) + ": " + what + ": entries");
          }
          break;
        }
        case FsOp::kCount:
          break;
      }
    } catch (const IoError& e) {
      got = e.code().value();
    }
    failures += expected != 0 ? 1 : 0;
    if (got != expected) {
      mismatches.push_back(std::to_string(i) + ": " + what + ": expected " + std::strerror(expected) + ", got " +
                           std::strerror(got));
    }
  }
  co_await io.close(lane_fd);
  co_return LaneResult{std::move(model), std::move(mismatches), failures};
}

TEST_P(FsOps, RandomConcurrentRequestsMatchASerialModel) {
  const std::uint64_t seed = ordo::test::test_seed("fs_ops");
  std::mt19937_64 rng(seed);
  const int root = open_dir(tmp.path.string());
  {  // RENAME_NOREPLACE is in the model: skip where the file system lacks it.
    std::ofstream(tmp.path / "probe_a") << "a";
    std::ofstream(tmp.path / "probe_b") << "b";
    const int err = error_of(await_op(io.rename(root, "probe_a", root, "probe_b", RENAME_NOREPLACE)));
    if (err == EINVAL) GTEST_SKIP() << "this file system has no RENAME_NOREPLACE";
    ASSERT_EQ(err, EEXIST);
    fs::remove(tmp.path / "probe_a");
    fs::remove(tmp.path / "probe_b");
  }
  constexpr int kLanes = 8;
  const int ops = 60 + static_cast<int>(rng() % 40);
  std::vector<Task<LaneResult>> lanes;
  for (int lane = 0; lane < kLanes; ++lane) lanes.push_back(run_lane(io, tmp.path.string(), root, lane, rng(), ops));
  const std::vector<LaneResult> results = sync_wait(when_all(std::move(lanes)));
  int failures = 0;
  for (int lane = 0; lane < kLanes; ++lane) {
    SCOPED_TRACE("lane " + std::to_string(lane) + ", seed " + std::to_string(seed));
    for (const std::string& m : results[lane].mismatches) ADD_FAILURE() << "op " << m;
    // The lane's tree, read back directly, against the model.
    const fs::path dir = tmp.path / ("lane" + std::to_string(lane));
    std::map<std::string, std::string> files;
    std::set<std::string> dirs;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string rel = fs::relative(e.path(), dir).string();
      if (e.is_directory()) {
        dirs.insert(rel);
      } else {
        files[rel] = slurp(e.path());
      }
    }
    EXPECT_EQ(dirs, results[lane].model.dirs);
    EXPECT_EQ(files, results[lane].model.files);
    failures += results[lane].failures;
  }
  // Both outcomes were exercised.
  EXPECT_GT(failures, kLanes * 5);
  EXPECT_LT(failures, kLanes * ops - kLanes * 5);
  // Nothing left in flight (the last delivery may still be returning).
  EXPECT_TRUE(eventually([&] { return io.in_flight() == 0; })) << io.in_flight() << " requests in flight";
}

INSTANTIATE_TEST_SUITE_P(Backends, FsOps, ::testing::ValuesIn(backends()), backend_name);

// ---------------------------------------------------------------------------
// The thread backend with one pool thread held by a blocking openat (a FIFO
// nobody writes yet): file-system requests queue behind it, so a stop and a
// deadline deterministically end them before they run.

TEST(FsOpsThreads, QueuedRequestsAreCancelledAndTimedOutBeforeTheyRun) {
  TempDir tmp;
  const std::string fifo = tmp / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  Reactor io{engine, IoOptions{.backend = Backend::threads, .threads = 1, .log = [](std::string_view) {}}};
  std::latch opened(1);
  int reader = -1;  // the FIFO's reading end, once the openat returns
  io.open(fifo, O_RDONLY | O_CLOEXEC).then([&](const Result& r) {
    reader = static_cast<int>(r.value());
    opened.count_down();
  });
  struct Release {  // the writer's end lets the blocked openat return, also after a failed assertion
    std::string path;
    std::latch& opened;
    int& reader;
    ~Release() {
      const int w = ::open(path.c_str(), O_RDWR | O_CLOEXEC);  // O_RDWR: never blocks on a FIFO
      opened.wait();
      ::close(w);
      ::close(reader);
    }
  } release{fifo, opened, reader};

  std::stop_source stop;
  stop.request_stop();
  EXPECT_EQ(error_of(await_op(io.mkdir(tmp / "never").stop_token(stop.get_token()))), ECANCELED);
  EXPECT_EQ(error_of(await_op(io.list_dir(tmp.path.string()).stop_token(stop.get_token()))), ECANCELED);
  const IoError timed = failure_of(io.mkdir(tmp / "late").timeout(std::chrono::milliseconds(1)));
  EXPECT_EQ(timed.code(), std::errc::timed_out);
  EXPECT_EQ(std::string(timed.what()), "ordo::io mkdir '" + (tmp / "late") + "': Connection timed out");
  EXPECT_EQ(error_of(await_op(io.rename(fifo, tmp / "moved").timeout(std::chrono::milliseconds(1)))), ETIMEDOUT);
  std::latch cancelled(1);
  const Handle h = io.unlink(fifo).then([&](const Result& r) {
    EXPECT_EQ(r.error(), std::errc::operation_canceled);
    cancelled.count_down();
  });
  EXPECT_TRUE(h.cancel());
  cancelled.wait();
  EXPECT_FALSE(fs::exists(tmp.path / "never"));
  EXPECT_FALSE(fs::exists(tmp.path / "late"));
  EXPECT_TRUE(fs::exists(fifo));
  EXPECT_FALSE(fs::exists(tmp.path / "moved"));
}

#if defined(ORDO_IO_HAVE_URING)
/// The io_uring backend claims the file-system opcodes its ring's probe has
/// and never the listings (no getdents opcode): the Reactor sends those to
/// its own thread backend. One that reached the ring anyway would fail with
/// EOPNOTSUPP, not run as something else.
TEST(FsOpsUring, ListingsAreLeftToTheReactorsThreads) {
  std::string why;
  auto backend = detail::make_uring_backend(IoOptions{}, nullptr, why);
  if (!backend) GTEST_SKIP() << "io_uring unavailable: " << why;
  EXPECT_FALSE(backend->supports(detail::OpCode::list_dir));
  EXPECT_FALSE(backend->supports(detail::OpCode::read_dir));
  // Linux 5.15 has all three; this project's machines run newer kernels.
  EXPECT_TRUE(backend->supports(detail::OpCode::mkdirat));
  EXPECT_TRUE(backend->supports(detail::OpCode::unlinkat));
  EXPECT_TRUE(backend->supports(detail::OpCode::renameat));

  struct Op : detail::Request {
    std::latch delivered{1};
    static void on_done(detail::Request* r) noexcept { static_cast<Op*>(r)->delivered.count_down(); }
  } op;
  std::vector<DirEntry> entries;
  op.code = detail::OpCode::list_dir;
  op.fd = AT_FDCWD;
  op.path = ".";
  op.addr = &entries;
  op.done = &Op::on_done;
  op.refs.store(1, std::memory_order_relaxed);
  backend->submit(&op);
  op.delivered.wait();
  EXPECT_EQ(op.res, -EOPNOTSUPP);
  backend->shutdown();
}
#endif

}  // namespace
}  // namespace ordo::io

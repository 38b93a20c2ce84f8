// The code of docs/io.md that the docs_snippets test checks: each
// [snippet:NAME] ... [end] region is quoted verbatim there, and this program
// runs as a smoke test (on io_uring where available, then on the thread
// backend), in a scratch directory it removes, so every snippet compiles and
// works.
#undef NDEBUG  // the asserts are this smoke test's checks, in every build type
#include <fcntl.h>
#include <sys/stat.h>

#include <ordo/io.hpp>
#include <ordo/io/files.hpp>
#include <ordo/task.hpp>

#include <array>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // RENAME_NOREPLACE
#include <cstdlib>
#include <filesystem>
#include <future>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

namespace {

ordo::Task<void> buffers(ordo::io::Reactor& io, std::string path) {
  // [snippet:io_buffers]
  const std::string text = "hello, ordo::io\n";
  std::vector<char> back(text.size());
  std::array<std::byte, 5> head{};  // std::byte storage converts as it is
  int fd = co_await io.open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  co_await io.write(fd, std::as_bytes(std::span(text)), 0).exact();                  // span<const std::byte>
  std::size_t n = co_await io.read(fd, std::as_writable_bytes(std::span(back)), 0);  // span<std::byte>
  co_await io.read(fd, head, 0).exact();
  co_await io.close(fd);
  // [end]
  assert(n == text.size() && std::string(back.begin(), back.end()) == text);
  assert(static_cast<char>(head[0]) == 'h' && static_cast<char>(head[4]) == 'o');
}

ordo::Task<void> stats(ordo::io::Reactor& io, std::string path, std::uint64_t expected) {
  // [snippet:io_statx]
  struct statx st = co_await io.stat(path);  // mask STATX_BASIC_STATS; flags 0 (AT_SYMLINK_NOFOLLOW, ...)
  if (st.stx_mask & STATX_SIZE) std::printf("%llu bytes\n", static_cast<unsigned long long>(st.stx_size));
  int fd = co_await io.open(path, O_RDONLY);
  struct statx times = co_await io.fstat(fd, STATX_MTIME | STATX_BTIME);  // ask for what you need
  bool has_birth = (times.stx_mask & STATX_BTIME) != 0;                  // the file system may not record it
  co_await io.close(fd);
  try {
    (void)co_await io.stat(path + ".missing");
  } catch (const ordo::io::IoError& e) {  // "ordo::io statx '<path>.missing': No such file or directory"
    assert(e.code() == std::errc::no_such_file_or_directory && e.path() == path + ".missing");
  }
  // [end]
  assert((st.stx_mask & STATX_SIZE) && st.stx_size == expected && S_ISREG(st.stx_mode));
  assert(times.stx_mask & STATX_MTIME);
  std::printf("birth time %s\n", has_birth ? "recorded" : "not recorded");
}

std::uint64_t size_by_callback(ordo::io::Reactor& io, const std::string& path) {
  // [snippet:io_statx_callback]
  std::promise<std::uint64_t> size;
  io.stat(path).then([&size](const ordo::io::Result& r) {  // runs on an engine worker
    if (r.ok()) {
      size.set_value(r.stat().stx_size);  // r.stat() is valid during the callback only: copy what you need
    } else {
      size.set_exception(r.exception());
    }
  });
  std::uint64_t bytes = size.get_future().get();
  // [end]
  return bytes;
}

ordo::Task<void> files(ordo::io::Reactor& io, std::string path) {
  // [snippet:io_files]
  std::string text = co_await ordo::io::read_file(io, path);  // open, fstat, read to the end, close
  const int fd = co_await io.open(path, O_RDONLY | O_CLOEXEC);
  ordo::io::LineReader reader(io, fd);  // one read per 64 KiB, not per line
  int lines = 0;
  while (std::optional<std::string> line = co_await reader.next()) ++lines;
  co_await io.close(fd);
  // [end]
  assert(text == "hello, ordo::io\n" && lines == 1);
}

ordo::Task<void> directories(ordo::io::Reactor& io, std::string root) {
  // [snippet:io_dirs]
  co_await io.mkdir(root + "/data");
  const int dir = co_await io.open(root + "/data", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  co_await io.mkdir(dir, "shards", 0750);  // relative to dir
  const int fd = co_await io.open(dir, "shards/0.tmp", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  co_await io.close(fd);
  co_await io.rename(dir, "shards/0.tmp", dir, "shards/0.bin", RENAME_NOREPLACE);  // EEXIST if 0.bin exists
  std::vector<ordo::io::DirEntry> entries = co_await io.list_dir(dir, "shards");  // sorted, no "." or ".."
  for (const ordo::io::DirEntry& e : entries) {
    std::printf("%s%s\n", e.name.c_str(), e.type == ordo::io::FileType::directory ? "/" : "");
  }
  try {
    co_await io.rmdir(dir, "shards");
  } catch (const ordo::io::IoError& e) {  // "ordo::io rmdir 'shards' (in directory fd 7): Directory not empty"
    assert(e.code() == std::errc::directory_not_empty && e.path() == "shards");
  }
  co_await io.unlink(dir, "shards/0.bin");
  co_await io.rmdir(dir, "shards");
  co_await io.close(dir);
  // [end]
  assert(entries.size() == 1 && entries[0].name == "0.bin" && entries[0].type == ordo::io::FileType::regular);
  // [snippet:io_dir_entries]
  ordo::AsyncGenerator<ordo::io::DirEntry> all = ordo::io::dir_entries(io, root);  // a read_dir per batch
  std::size_t count = 0;
  while (std::optional<ordo::io::DirEntry> e = co_await all.next()) ++count;  // in the file system's order
  // [end]
  assert(count == 2);  // hello.txt and data
  co_await io.rmdir(root + "/data");
}

}  // namespace

int main() {
  namespace fs = std::filesystem;
  std::string dir_template = (fs::temp_directory_path() / "ordo_io_example_XXXXXX").string();
  if (::mkdtemp(dir_template.data()) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path dir = dir_template;
  const std::string path = (dir / "hello.txt").string();
  // io_uring where the machine allows it, then the thread backend.
  for (ordo::io::Backend backend : {ordo::io::Backend::automatic, ordo::io::Backend::threads}) {
    ordo::Engine engine;
    ordo::io::Reactor io(engine, ordo::io::IoOptions{.backend = backend});
    std::printf("backend: %s\n", io.backend() == ordo::io::Backend::uring ? "io_uring" : "threads");
    ordo::sync_wait(buffers(io, path));
    ordo::sync_wait(stats(io, path, 16));
    ordo::sync_wait(files(io, path));
    const std::uint64_t bytes = size_by_callback(io, path);
    assert(bytes == 16);
    ordo::sync_wait(directories(io, dir.string()));
  }
  fs::remove_all(dir);
  std::printf("io examples OK\n");
  return 0;
}

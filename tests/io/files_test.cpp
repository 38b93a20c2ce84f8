// ordo::io::read_file and the line reader (issue 32, item 9), on every
// backend of this build.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "ordo/io/files.hpp"
#include "ordo/task.hpp"
#include "io/io_test_util.hpp"

namespace ordo::io {
namespace {


struct TempFile {
  std::filesystem::path path;
  explicit TempFile(const std::string& content) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "ordo_files_XXXXXX").string();
    const int fd = ::mkstemp(tmpl.data());
    ::close(fd);
    path = tmpl;
    std::ofstream(path, std::ios::binary) << content;
  }
  ~TempFile() { std::filesystem::remove(path); }
};

class Files : public ::testing::TestWithParam<Backend> {
 protected:
  Engine engine{Options{.kind = EngineKind::pooled, .cpu_workers = 2}};
  Reactor io{engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}}};
};

TEST_P(Files, ReadFileReturnsTheWholeContent) {
  const std::uint64_t seed = ordo::test::test_seed("read_file");
  std::mt19937_64 rng(seed);
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, std::size_t{100000 + rng() % 300000}}) {
    std::string content(size, '\0');
    for (char& c : content) c = static_cast<char>(rng());
    TempFile f(content);
    EXPECT_EQ(sync_wait(read_file(io, f.path.string())), content) << "size " << size << " seed " << seed;
  }
  try {
    (void)sync_wait(read_file(io, "/nonexistent/ordo/file"));
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
  }
}

// read_file stops at the first short read once it has read the size fstat
// gave; a procfs file says 0 and gives its content in short reads: it must
// be read to the read that returns 0.
TEST_P(Files, ReadFileOfAFileWhoseSizeSaysNothing) {
  std::ifstream in("/proc/version", std::ios::binary);
  if (!in) GTEST_SKIP() << "no /proc/version";
  const std::string expected((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(expected.empty());
  EXPECT_EQ(sync_wait(read_file(io, "/proc/version")), expected);
}

// read_file closes a file of a local file system on the calling thread and
// any other through the reactor: the content is the same either way, on
// tmpfs (/dev/shm) as on the temporary directory's file system.
TEST_P(Files, ReadFileOnTmpfs) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "no /dev/shm";
  const std::string content(10000, 'x');
  const std::filesystem::path path = "/dev/shm/ordo_files_" + std::to_string(::getpid());
  std::ofstream(path, std::ios::binary) << content;
  EXPECT_EQ(sync_wait(read_file(io, path.string())), content);
  std::filesystem::remove(path);
}

// Every path of read_file gives its descriptor back: closed on the calling
// thread (ext4, tmpfs, ...) or through the reactor (procfs here).
TEST_P(Files, ReadFileClosesItsDescriptor) {
  auto open_fds = [] {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
    return n;
  };
  TempFile f("some content\n");
  (void)sync_wait(read_file(io, f.path.string()));  // the first call may open what stays open (the ring's files)
  const std::size_t before = open_fds();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(sync_wait(read_file(io, f.path.string())), "some content\n");
    if (std::filesystem::exists("/proc/version")) (void)sync_wait(read_file(io, "/proc/version"));
  }
  EXPECT_EQ(open_fds(), before);
}

TEST_P(Files, LineReaderOnAFileMatchesASerialSplit) {
  const std::uint64_t seed = ordo::test::test_seed("line_reader");
  std::mt19937_64 rng(seed);
  std::string content;
  std::vector<std::string> expected;
  const int n = 500;
  for (int i = 0; i < n; ++i) {
    std::string line(rng() % 200, 'x');
    for (char& c : line) c = static_cast<char>('a' + rng() % 26);
    expected.push_back(line);
    content += line + (i % 3 == 0 ? "\r\n" : "\n");
  }
  content += "last-without-newline";
  expected.push_back("last-without-newline");
  TempFile f(content);
  const int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto read_all = [&]() -> Task<std::vector<std::string>> {
    std::vector<std::string> out;
    auto gen = lines(io, fd, LineReader::Kind::file, 1 + rng() % 300);  // small chunks: lines span reads
    while (auto l = co_await gen.next()) out.push_back(std::move(*l));
    co_return out;
  };
  EXPECT_EQ(sync_wait(read_all()), expected) << "seed " << seed;
  ::close(fd);
}

TEST_P(Files, LineReaderOnASocket) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  const std::string data = "GET a\nSET b 1\r\nQUIT";
  ASSERT_EQ(::send(sv[1], data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  ::shutdown(sv[1], SHUT_WR);
  LineReader reader(io, sv[0], LineReader::Kind::socket, 4);
  auto read_all = [&]() -> Task<std::vector<std::string>> {
    std::vector<std::string> out;
    while (auto l = co_await reader.next()) out.push_back(*l);
    co_return out;
  };
  EXPECT_EQ(sync_wait(read_all()), (std::vector<std::string>{"GET a", "SET b 1", "QUIT"}));
  ::close(sv[0]);
  ::close(sv[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, Files, ::testing::ValuesIn(backends()), backend_name);

}  // namespace
}  // namespace ordo::io

// bench/pipeline/serial.cpp - the baseline: one thread, one file after the
// other, plain blocking syscalls (open, fstat, read until a short read,
// close), the words counted straight into the one histogram.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <system_error>

#include "pipeline_bench.hpp"

namespace pipebench {

Aligned aligned_buffer(std::size_t n) {
  Aligned a;
  a.mem.reset(static_cast<char*>(std::aligned_alloc(kAlign, round_up(n == 0 ? 1 : n))));
  if (!a.mem) throw std::bad_alloc();
  return a;
}

namespace {

[[noreturn]] void fail(const char* what, const std::string& path) {
  throw std::system_error(errno, std::generic_category(), std::string(what) + " " + path);
}

/// Reads `fd` into buf[0, cap) until a read comes back short (the end of a
/// regular file); returns the bytes read. Stops at cap.
std::size_t read_all(int fd, char* buf, std::size_t cap, const std::string& path) {
  std::size_t got = 0;
  while (got < cap) {
    const std::size_t want = cap - got;
    const ssize_t n = ::pread(fd, buf + got, want, static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("read", path);
    }
    got += static_cast<std::size_t>(n);
    if (static_cast<std::size_t>(n) < want) break;
  }
  return got;
}

}  // namespace

std::string read_plain(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("fstat", path);
  }
  std::string out;
  // +1: a file that grew since fstat fills the buffer, and the loop goes on.
  out.resize(static_cast<std::size_t>(st.st_size) + 1);
  std::size_t got = 0;
  try {
    for (;;) {
      got += read_all(fd, out.data() + got, out.size() - got, path);
      if (got < out.size()) break;
      out.resize(out.size() * 2);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  out.resize(got);
  return out;
}

Aligned read_plain_direct(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  if (fd < 0) fail("open (O_DIRECT)", path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail("fstat", path);
  }
  // O_DIRECT: whole blocks at aligned offsets; the last read comes back short.
  Aligned a = aligned_buffer(static_cast<std::size_t>(st.st_size) + 1);
  try {
    a.size = read_all(fd, a.mem.get(), round_up(static_cast<std::size_t>(st.st_size) + 1), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return a;
}

Hist run_serial(const Job& job, Stopwatch& sw, const void*) {
  Hist total{};
  sw.start();
  for (const std::string& p : job.paths) {
    if (job.mode == Mode::direct) {
      const Aligned a = read_plain_direct(p);
      process(job, a.text(), total);
    } else {
      const std::string text = read_plain(p);
      process(job, text, total);
    }
  }
  sw.stop();
  return total;
}

}  // namespace pipebench

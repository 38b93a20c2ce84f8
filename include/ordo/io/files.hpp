// ordo/io/files.hpp - what a loader needs on top of ordo::io's requests: a
// whole file in one call, a buffered line reader for files and sockets, and
// a directory streamed entry by entry.
//
//   std::string text = co_await ordo::io::read_file(io, "/etc/hostname");
//   ordo::io::LineReader lines(io, fd);                      // a file (or LineReader::Kind::socket)
//   while (std::optional<std::string> line = co_await lines.next()) use(*line);
//   auto entries = ordo::io::dir_entries(io, "/data");
//   while (std::optional<ordo::io::DirEntry> e = co_await entries.next()) use(e->name);
//
// They are coroutines over Reactor::open / fstat / read / recv / read_dir / close: each
// request is awaited (no worker waits), and the coroutine continues on an
// engine worker as after any co_await of an IoOp. Errors are IoError, as the
// requests throw them.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "ordo/generator.hpp"
#include "ordo/io.hpp"
#include "ordo/task.hpp"

namespace ordo::io {

/// The whole content of the file at `path` (opened O_RDONLY | O_CLOEXEC,
/// sized with fstat, read to end of file even if it grew meanwhile, then
/// closed, also on failure).
inline Task<std::string> read_file(Reactor& io, std::string path) {
  const int fd = co_await io.open(path, O_RDONLY | O_CLOEXEC);
  std::string out;
  std::exception_ptr error;
  try {
    const struct statx st = co_await io.fstat(fd, STATX_SIZE);
    out.resize(static_cast<std::size_t>(st.stx_size) + 1);  // +1: the read that sees the end of file
    std::size_t got = 0;
    for (;;) {
      if (got == out.size()) out.resize(out.size() * 2);
      const std::size_t n =
          co_await io.read(fd, std::as_writable_bytes(std::span(out.data() + got, out.size() - got)), got);
      if (n == 0) break;
      got += n;
    }
    out.resize(got);
  } catch (...) {
    error = std::current_exception();
  }
  try {
    co_await io.close(fd);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
  co_return out;
}

/// Reads lines from a file descriptor through a buffer of `chunk` bytes: one
/// request per chunk, not per line. A line is returned without its '\n' (and
/// without a '\r' before it); a last line without '\n' is returned too. The
/// descriptor stays the caller's (not closed).
///
/// @par Thread safety
/// One coroutine at a time calls next().
class LineReader {
 public:
  enum class Kind { file, socket };
  LineReader(Reactor& io, int fd, Kind kind = Kind::file, std::size_t chunk = 64 * 1024)
      : io_(&io), fd_(fd), kind_(kind), buf_(chunk == 0 ? 1 : chunk, '\0') {}

  /// The next line, or std::nullopt at end of file (or once the peer closed).
  Task<std::optional<std::string>> next() {
    std::string line;
    for (;;) {
      for (std::size_t i = pos_; i < end_; ++i) {
        if (buf_[i] == '\n') {
          line.append(buf_.data() + pos_, i - pos_);
          pos_ = i + 1;
          if (!line.empty() && line.back() == '\r') line.pop_back();
          co_return line;
        }
      }
      line.append(buf_.data() + pos_, end_ - pos_);
      pos_ = end_ = 0;
      if (eof_) break;
      const auto span = std::as_writable_bytes(std::span(buf_.data(), buf_.size()));
      const std::size_t n = kind_ == Kind::socket ? co_await io_->recv(fd_, span) : co_await io_->read(fd_, span, offset_);
      offset_ += n;
      end_ = n;
      if (n == 0) eof_ = true;
    }
    if (line.empty()) co_return std::nullopt;
    if (line.back() == '\r') line.pop_back();
    co_return line;
  }

 private:
  Reactor* io_;
  int fd_;
  Kind kind_;
  std::string buf_;
  std::size_t pos_ = 0;  ///< next unread byte in buf_
  std::size_t end_ = 0;  ///< bytes of buf_ filled
  std::uint64_t offset_ = 0;  ///< file offset of the next read (files)
  bool eof_ = false;
};

/// The lines of `fd` as an AsyncGenerator (see LineReader).
inline AsyncGenerator<std::string> lines(Reactor& io, int fd, LineReader::Kind kind = LineReader::Kind::file,
                                         std::size_t chunk = 64 * 1024) {
  LineReader reader(io, fd, kind, chunk);
  while (std::optional<std::string> line = co_await reader.next()) co_yield std::move(*line);
}

/// The entries of the directory at `path` (relative to `dirfd`, see
/// Reactor::open) as an AsyncGenerator, in the order the file system keeps
/// them ("." and ".." left out): a Reactor::read_dir request per batch, so a
/// large directory is never held whole (Reactor::list_dir returns it sorted).
/// Errors are IoErrors naming `path`. The directory's descriptor is closed
/// at the end, or at once if the generator is destroyed before it (close(2)
/// of a directory waits for no device).
inline AsyncGenerator<DirEntry> dir_entries(Reactor& io, int dirfd, std::string path) {
  const int fd = co_await io.open(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  struct Owned {
    int fd;
    ~Owned() {
      if (fd >= 0) ::close(fd);
    }
  } owned{fd};
  std::exception_ptr error;
  try {
    for (;;) {
      std::vector<DirEntry> batch = co_await io.read_dir(fd);
      if (batch.empty()) break;
      for (DirEntry& e : batch) co_yield std::move(e);
    }
  } catch (const IoError& e) {  // read_dir knows only the descriptor: name the path
    error = std::make_exception_ptr(IoError(e.code(), e.op(), 0, path, {}, dirfd));
  } catch (...) {
    error = std::current_exception();
  }
  owned.fd = -1;
  try {
    co_await io.close(fd);
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  if (error) std::rethrow_exception(error);
}

inline AsyncGenerator<DirEntry> dir_entries(Reactor& io, std::string path) {
  return dir_entries(io, AT_FDCWD, std::move(path));
}

}  // namespace ordo::io

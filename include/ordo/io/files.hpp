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
// They are coroutines over Reactor::open / read / recv / read_dir / close: each
// request is awaited (no worker waits), and the coroutine continues on an
// engine worker as after any co_await of an IoOp. Errors are IoError, as the
// requests throw them. The two calls read_file makes itself, on the calling
// thread, where neither can wait: see read_file.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
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

namespace detail {

/// Whether close(fd) here returns without waiting for anything: the local
/// file systems, whose files have no flush method. io_uring closes those on
/// the submitting thread too, so going through the ring saves no wait; it
/// only adds a round trip through the ring, and with several workers
/// submitting (the ring takes one submitter at a time) a hand-off of the
/// completion to another thread. Others (NFS, FUSE, CIFS, overlayfs, ...)
/// may flush on close, waiting for a server: those go through the ring,
/// which hands such a close to a kernel worker.
inline bool close_never_waits(int fd) noexcept {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return false;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0xEF53UL:      // ext2, ext3, ext4
    case 0x58465342UL:  // xfs
    case 0x9123683EUL:  // btrfs
    case 0x01021994UL:  // tmpfs
      return true;
    default:
      return false;
  }
}

}  // namespace detail

/// The whole content of the file at `path` (opened O_RDONLY | O_CLOEXEC,
/// sized with fstat, read to end of file even if it grew meanwhile, then
/// closed, also on failure).
///
/// The size comes from a statx made here, on the calling thread, with
/// AT_STATX_DONT_SYNC: it answers from the inode in memory and never waits
/// (on a network file system it may be stale, which only costs a read more),
/// where Reactor::fstat would cost io_uring a hand-off to a kernel worker
/// thread and a wake-up per file (io_uring runs statx asynchronously always).
/// Where that statx fails, Reactor::fstat is asked. Reading stops at the
/// first short read once the size has been read: a regular file is at its
/// end then, and files whose size says nothing (procfs: 0) are read until a
/// read returns 0. The close is made here too where it cannot wait (a file
/// of a local file system: detail::close_never_waits), else through the reactor.
inline Task<std::string> read_file(Reactor& io, std::string path) {
  // Moved: the request keeps the path (an IoError names it).
  const int fd = co_await io.open(std::move(path), O_RDONLY | O_CLOEXEC);
  std::string out;
  std::exception_ptr error;
  try {
    struct statx st {};
    if (::statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_SIZE, &st) != 0 || (st.stx_mask & STATX_SIZE) == 0) {
      st = co_await io.fstat(fd, STATX_SIZE);
    }
    const auto size = static_cast<std::size_t>(st.stx_size);
    out.resize(size + 1);  // +1: the read that sees the end of file
    std::size_t got = 0;
    for (;;) {
      if (got == out.size()) out.resize(out.size() * 2);
      const std::size_t want = out.size() - got;
      const std::size_t n = co_await io.read(fd, std::as_writable_bytes(std::span(out.data() + got, want)), got);
      got += n;
      if (n == 0 || (n < want && size != 0 && got >= size)) break;
    }
    out.resize(got);
  } catch (...) {
    error = std::current_exception();
  }
  if (detail::close_never_waits(fd)) {
    ::close(fd);  // read-only, no flush method: nothing to report (see close_never_waits)
  } else {
    try {
      co_await io.close(fd);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
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

// io/read_now.cpp - a read the page cache can serve, made at once on the
// calling thread (both backends; IoOptions::cached_reads_inline).
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <climits>
#include <cstdint>

#include "backends.hpp"

namespace ordo::io::detail {

std::int64_t read_cached_now(const Request& r) noexcept {
  if ((r.code != OpCode::read && r.code != OpCode::readv) || r.off == kNoOffset ||
      r.off > static_cast<std::uint64_t>(INT64_MAX)) {
    return -1;
  }
  iovec one{r.addr, static_cast<std::size_t>(r.len)};
  const iovec* iov = &one;
  int count = 1;
  std::uint64_t want = r.len;
  if (r.code == OpCode::readv) {
    if (r.len == 0 || r.len > IOV_MAX) return -1;
    iov = static_cast<const iovec*>(r.addr);
    count = static_cast<int>(r.len);
    want = 0;
    for (int i = 0; i < count; ++i) want += iov[i].iov_len;
  }
  const int flags = ::fcntl(r.fd, F_GETFL);
  if (flags < 0 || (flags & O_DIRECT) != 0 || (flags & O_ACCMODE) == O_WRONLY) return -1;
  const ssize_t n = ::preadv2(r.fd, iov, count, static_cast<off_t>(r.off), RWF_NOWAIT);
  if (n < 0) return -1;
  if (static_cast<std::uint64_t>(n) != want) {
    // Short: the end of the file, or only the rest is not cached.
    struct stat st {};
    if (::fstat(r.fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        r.off + static_cast<std::uint64_t>(n) < static_cast<std::uint64_t>(st.st_size)) {
      return -1;
    }
  }
  return n;
}

}  // namespace ordo::io::detail

// io/backends.hpp - the two backends behind ordo::io::Reactor. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ordo/engine.hpp"
#include "ordo/io/options.hpp"
#include "ordo/io/request.hpp"

namespace ordo::io::detail {

/// Set by a backend in Request::backend_flags of a request it completed with
/// a direct syscall on the submitting thread (io_uring: a send the socket had
/// room for; both: a read the page cache served). Lets the tests tell the
/// paths apart.
inline constexpr std::uint32_t kDirect = 1U << 31;

/// A read or readv at an offset, of a file not opened with O_DIRECT, tried on
/// the calling thread with preadv2(RWF_NOWAIT) (IoOptions::cached_reads_inline).
/// Returns the byte count when the page cache served all of it, or all the
/// file holds from the offset on (end of file, checked with fstat: a short
/// count alone may mean only that the rest is not cached). Returns -1 when the
/// read must take the backend's usual path: it would wait, failed (the usual
/// path reports the error), came out short before the end, or the file is
/// O_DIRECT (RWF_NOWAIT does not keep a direct read from waiting for the
/// device).
std::int64_t read_cached_now(const Request& r) noexcept;

/// io_uring. Returns null and sets `why_not` (e.g. "io_uring_queue_init: Operation
/// not permitted (seccomp?)") when the kernel refuses a ring.
/// With IoOptions::idle_workers_reap, idle CPU workers of `engine` wait in the
/// ring where the kernel allows (detail::IdleTask).
std::unique_ptr<BackendImpl> make_uring_backend(const IoOptions& options, Engine* engine, std::string& why_not);

/// Blocking syscalls on IoOptions::threads threads for files and metadata;
/// sockets, pipes and timers wait for readiness/deadlines on one poll thread.
std::unique_ptr<BackendImpl> make_threads_backend(const IoOptions& options);

}  // namespace ordo::io::detail

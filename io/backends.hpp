// io/backends.hpp - the two backends behind ordo::io::Reactor. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ordo/engine.hpp"
#include "ordo/io/options.hpp"
#include "ordo/io/request.hpp"

namespace ordo::io::detail {

/// Set by the io_uring backend in Request::backend_flags of a request it
/// completed with a direct syscall on the submitting thread, without the ring
/// (a send the socket had room for). Lets the tests tell the two paths apart.
inline constexpr std::uint32_t kUringDirect = 1U << 31;

/// io_uring. Returns null and sets `why_not` (e.g. "io_uring_queue_init: Operation
/// not permitted (seccomp?)") when the kernel refuses a ring.
/// With IoOptions::idle_workers_reap, idle CPU workers of `engine` wait in the
/// ring where the kernel allows (detail::IdleRing).
std::unique_ptr<BackendImpl> make_uring_backend(const IoOptions& options, Engine* engine, std::string& why_not);

/// Blocking syscalls on IoOptions::threads threads for files and metadata;
/// sockets, pipes and timers wait for readiness/deadlines on one poll thread.
std::unique_ptr<BackendImpl> make_threads_backend(const IoOptions& options);

}  // namespace ordo::io::detail

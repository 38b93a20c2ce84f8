// ordo/io/options.hpp - how an ordo::io::Reactor is set up.
#pragma once

#include <functional>
#include <string_view>

#include "ordo/context.hpp"
#include "ordo/io/request.hpp"

namespace ordo::io {

/// Reactor settings. Plain data; `IoOptions::from_env()` is the only place the
/// environment is read (ORDO_IO_BACKEND=auto|uring|threads, ORDO_IO_THREADS).
struct IoOptions {
  Backend backend = Backend::automatic;
  /// io_uring submission queue entries (the completion queue gets 4x).
  unsigned entries = 256;
  /// io_uring SQPOLL (a kernel thread polls the submission queue). Off by
  /// default: on a 2-core machine it cut IOPS 3-12x.
  bool sqpoll = false;
  /// threads backend: threads doing blocking file syscalls (sockets and pipes
  /// wait for readiness on one poll thread instead and never hold one).
  unsigned threads = 4;
  /// Where callbacks run and awaiting coroutines continue (an engine context).
  Context resume_ctx = Context::cpu();
  /// Receives one line when the backend is chosen (which one, and why when
  /// io_uring was not usable). Default: stderr for a fallback, silent otherwise.
  std::function<void(std::string_view)> log;

  [[nodiscard]] static IoOptions from_env();
};

}  // namespace ordo::io

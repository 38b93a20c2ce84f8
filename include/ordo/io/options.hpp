// ordo/io/options.hpp - how an ordo::io::Reactor is set up.
#pragma once

#include <functional>
#include <string_view>

#include "ordo/context.hpp"
#include "ordo/io/request.hpp"

namespace ordo::io {

/// Reactor settings. Plain data; a Reactor never reads the environment:
/// `IoOptions::from_env()`, called by the program, is the only place that
/// does (ORDO_IO_BACKEND=auto|uring|threads, ORDO_IO_THREADS=1..1024, and
/// ORDO_IO_IDLE_WORKERS_REAP, ORDO_IO_COOPERATIVE_TASKRUN,
/// ORDO_IO_CACHED_READS_INLINE, each 1/0, true/false, on/off or yes/no in
/// any case; docs/guide.md, "Environment variables"). A malformed value
/// throws ordo::Error{Errc::invalid_argument} naming the variable and value.
struct IoOptions {
  Backend backend = Backend::automatic;
  /// io_uring submission queue entries (the completion queue is a fixed
  /// multiple of it: io/uring_backend.cpp, init()).
  unsigned entries = 256;
  /// io_uring SQPOLL (a kernel thread polls the submission queue). Off by
  /// default: the polling thread takes a core from the workers, which costs
  /// more than it saves where cores are few (docs/io.md, "Backends").
  bool sqpoll = false;
  /// threads backend: threads doing blocking file syscalls (sockets and pipes
  /// wait for readiness on one poll thread instead and never hold one).
  unsigned threads = 4;
  /// io_uring: one idle CPU worker of the engine at a time waits in the ring
  /// itself (Linux 6.7+, IORING_OP_FUTEX_WAIT) and delivers the completions
  /// that wake it, then runs the work they made ready: no wake-up of the
  /// reaper, nor of a second worker, for a coroutine's read (docs/io.md,
  /// "Backends"). The reaper thread takes the completions while no worker is
  /// idle. Off: the reaper takes them all.
  bool idle_workers_reap = true;
  /// io_uring (Linux 5.19+, IORING_SETUP_COOP_TASKRUN): the kernel no longer
  /// interrupts a running thread to finish the requests it submitted (a
  /// socket's data arrived, a disk read ended); the thread finishes them at
  /// its next system call or when it sleeps. That saves an inter-processor
  /// interrupt per completion (docs/io.md, "Backends"). The price: a
  /// thread that submits and then computes without a system call holds back
  /// its own requests' completions until it makes one, even when other
  /// workers are idle; an engine worker that went on to a long op delays them
  /// by up to that op's length. Off by default. For servers and I/O-bound
  /// pipelines whose ops are short. Ignored by the threads backend; on an
  /// older kernel the ring is set up without it (backend_reason() says so).
  bool cooperative_taskrun = false;
  /// A read or readv at an offset, of a file not opened with O_DIRECT, is
  /// first tried on the submitting thread with preadv2(RWF_NOWAIT), which
  /// copies what the page cache holds and never waits for a device; only a
  /// read the cache cannot serve whole goes through the ring (the thread
  /// backend: its pool). The ring's submissions are serialized (one thread
  /// enters the kernel with the batch), so cached reads otherwise use one
  /// core however many workers issue them (docs/io.md, "Backends");
  /// the thread backend saves a pool thread's wake-up and a hand-off per
  /// read. The cost for a read the cache cannot serve: an fcntl(F_GETFL) and
  /// a failed preadv2; O_DIRECT reads pay the fcntl only. Off: every read
  /// takes the backend's usual path.
  bool cached_reads_inline = true;
  /// Where callbacks run and awaiting coroutines continue (an engine context).
  Context resume_ctx = Context::cpu();
  /// Receives one line when the backend is chosen (which one, and why when
  /// io_uring was not usable). Default: stderr for a fallback, silent otherwise.
  std::function<void(std::string_view)> log;

  [[nodiscard]] static IoOptions from_env();
};

}  // namespace ordo::io

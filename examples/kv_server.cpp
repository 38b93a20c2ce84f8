// examples/kv_server.cpp - a TCP key-value server embedding ordo through
// ordo::asio: each connection is an Asio coroutine; requests run as engine
// ops ordered by the keys they read and mutate.
//
//   kv_server --resp [--port N] [--threads T] [--shards S] [--max-request-bytes B]
//       Redis protocol (RESP2): redis-cli -p N set a 1 (kv_resp_server.hpp)
//   kv_server [--port N] [--keys K] [--work-us U] [--workers W] [--inline] [--inline-ready-below-us U]
//       the line protocol of kv_server.hpp, checked by kv_client
//
// Listens on 127.0.0.1 and prints "listening on <port>" once it accepts
// connections (port 0 picks a free one); serves until SIGINT or SIGTERM
// (or a client's SHUTDOWN), then stops accepting, answers the requests it
// has read and exits. Run with no arguments (as the example smoke test
// does) it serves one line-protocol connection from itself and exits, so the
// smoke test checks the whole path once.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <unistd.h>

#include "kv_resp_server.hpp"
#include "kv_server.hpp"

namespace {

unsigned arg_uint(int& i, int argc, char** argv) {
  if (i + 1 >= argc) throw std::runtime_error(std::string(argv[i]) + " needs a value");
  return static_cast<unsigned>(std::stoul(argv[++i]));
}

}  // namespace

int main(int argc, char** argv) try {
  kv::ServerOptions opt;
  kv::resp::ServerOptions ropt;
  unsigned port = 0;
  bool self_test = true;
  bool resp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--port") {
      port = arg_uint(i, argc, argv);
      self_test = false;
    } else if (a == "--resp") {
      resp = true;
      self_test = false;
    } else if (a == "--threads") {
      opt.workers = ropt.threads = arg_uint(i, argc, argv);
    } else if (a == "--shards") {
      ropt.shards = arg_uint(i, argc, argv);
    } else if (a == "--max-request-bytes") {
      ropt.limits.max_request_bytes = arg_uint(i, argc, argv);
    } else if (a == "--no-inline") {
      ropt.inline_ok = false;
    } else if (a == "--keys") {
      opt.keys = arg_uint(i, argc, argv);
    } else if (a == "--work-us") {
      opt.work_us = arg_uint(i, argc, argv);
    } else if (a == "--workers") {
      opt.workers = arg_uint(i, argc, argv);
    } else if (a == "--inline") {
      opt.mode = kv::Mode::inline_;
    } else if (a == "--inline-ready-below-us") {
      opt.inline_ready_below_us = arg_uint(i, argc, argv);
    } else if (a == "--serve") {
      self_test = false;
    } else {
      std::fprintf(stderr,
                   "usage: kv_server --resp [--port N] [--threads T] [--shards S] [--max-request-bytes B] [--no-inline]\n"
                   "       kv_server [--port N] [--serve] [--keys K] [--work-us U] [--workers W|--threads T] [--inline] "
                   "[--inline-ready-below-us U]\n");
      return 2;
    }
  }
  if (opt.keys == 0) throw std::runtime_error("--keys must be at least 1");
  asio::io_context io;  // before the server: outlives the engine's last handlers
  // SIGINT / SIGTERM: stop accepting, answer what was read, exit 0.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  if (resp) {
    ropt.port = static_cast<std::uint16_t>(port);
    kv::resp::Server server(io, ropt);
    server.on_stop([&] { signals.cancel(); });  // SHUTDOWN: nothing left to wait for
    server.start();
    signals.async_wait([&](asio::error_code ec, int) {
      if (!ec) server.stop();
    });
    std::printf("listening on %u\n", static_cast<unsigned>(server.port()));
    std::printf("RESP2 on 127.0.0.1:%u (redis-cli -p %u), %s\n", static_cast<unsigned>(server.port()),
                static_cast<unsigned>(server.port()),
                ropt.shards == 0 ? "a variable per key" : (std::to_string(ropt.shards) + " shards").c_str());
    std::fflush(stdout);
    io.run();
    return 0;
  }
  kv::Server server(io, opt, static_cast<std::uint16_t>(port));
  server.start();
  signals.async_wait([&](asio::error_code ec, int) {
    if (!ec) server.stop();
  });
  std::printf("listening on %u\n", static_cast<unsigned>(server.port()));
  std::fflush(stdout);
  std::string reply;
  if (self_test) {
    // Smoke test (no --port/--serve given): one client coroutine does a few
    // requests over loopback and shuts the server down.
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      asio::ip::tcp::socket s(io);
      co_await s.async_connect({asio::ip::address_v4::loopback(), server.port()}, asio::use_awaitable);
      for (const char* req : {"PUT 1 5\n", "INCR 1 2\n", "MINCR 1 1 2\n", "MGET 1 2\n"}) {
        co_await asio::async_write(s, asio::buffer(std::string(req)), asio::use_awaitable);
        std::string line;
        const std::size_t n = co_await asio::async_read_until(s, asio::dynamic_buffer(line), '\n', asio::use_awaitable);
        reply += line.substr(0, n);
      }
      co_await asio::async_write(s, asio::buffer(std::string("SHUTDOWN\n")), asio::use_awaitable);
    }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
  }
  io.run();
  if (self_test) {
    std::fputs(reply.c_str(), stdout);
    const char* want = "OK 0\nVALUE 7 1\nVALUES 8 1 2\nVALUES 8 1 3\n";
    if (reply != want) {
      std::fprintf(stderr, "kv_server self test: unexpected replies, want:\n%s", want);
      return 1;
    }
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "kv_server: %s\n", e.what());
  return 1;
}

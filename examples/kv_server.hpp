// examples/kv_server.hpp - a TCP key-value server that embeds ordo (used by
// kv_server.cpp and bench/asio/asio_bench.cpp).
//
// Each connection is an Asio coroutine on one io_context thread. A request
// is one line; its reply is one line ending with the request's sequence
// number: the order in which the server pushed it to the engine (its
// acceptance order). Keys are 0 .. keys-1, values are int64.
//
//   GET k               -> VALUE v seq            reads k
//   PUT k v             -> OK seq                 mutates k
//   INCR k d            -> VALUE v+d seq          mutates k
//   MGET k1 k2 ...      -> VALUES v1 v2 ... seq   reads all keys (one consistent snapshot)
//   MINCR d k1 k2 ...   -> VALUES n1 n2 ... seq   mutates all keys (one transaction)
//   DUMP                -> VALUES v0 .. v(keys-1) seq   reads every key
//   SHUTDOWN            -> BYE seq                stops the server
//   anything else       -> ERR message seq
//
// Engine mode: a request is pushed as an op reading / mutating the keys it
// names (ordo::asio::push, use_awaitable); conflicting requests run in
// acceptance order, the rest in parallel on the engine's workers, and the
// io_context thread stays free to serve other connections meanwhile. (When
// the io thread would only wait, ordo::asio runs the request right there
// instead: see "Where fn runs" in docs/asio.md.)
// Inline mode (the baseline): the same work done on the io_context thread.
// `work_us` busy-spins that long in every request (a stand-in for real work:
// feature computation, parsing, compression).
#pragma once

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <ordo/asio.hpp>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kv {

enum class Mode { engine, inline_ };

struct ServerOptions {
  Mode mode = Mode::engine;
  unsigned keys = 64;
  unsigned work_us = 0;
  unsigned workers = 0;  ///< engine CPU workers (0: one per core)
  /// Requests whose work is below this many microseconds are pushed with
  /// OpAttrs::inline_ok: ordo::asio may run them on the io thread when nothing
  /// they touch is busy and a hop would only add wake-ups (a cheap GET then
  /// costs about what it costs inline). 0: off, every request on a worker.
  unsigned inline_ready_below_us = 0;
};

/// A parsed request (parsing is the same for both modes).
struct Request {
  enum class Kind { get, put, incr, mget, mincr, dump, shutdown, bad } kind = Kind::bad;
  std::vector<unsigned> keys;
  std::int64_t arg = 0;  ///< PUT value or INCR/MINCR delta
  std::string error;
};

inline bool parse_int(std::string_view s, std::int64_t& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

inline Request parse(std::string_view line, unsigned nkeys) {
  std::vector<std::string_view> w;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    std::size_t j = i;
    while (j < line.size() && line[j] != ' ') ++j;
    if (j > i) w.push_back(line.substr(i, j - i));
    i = j;
  }
  Request r;
  auto bad = [&](std::string msg) {
    r.kind = Request::Kind::bad;
    r.error = std::move(msg);
    return r;
  };
  auto key = [&](std::string_view s) -> bool {
    std::int64_t k = 0;
    if (!parse_int(s, k) || k < 0 || k >= static_cast<std::int64_t>(nkeys)) return false;
    r.keys.push_back(static_cast<unsigned>(k));
    return true;
  };
  if (w.empty()) return bad("empty request");
  const std::string_view cmd = w[0];
  if (cmd == "GET" && w.size() == 2) {
    r.kind = Request::Kind::get;
    if (!key(w[1])) return bad("bad key");
  } else if ((cmd == "PUT" || cmd == "INCR") && w.size() == 3) {
    r.kind = cmd == "PUT" ? Request::Kind::put : Request::Kind::incr;
    if (!key(w[1])) return bad("bad key");
    if (!parse_int(w[2], r.arg)) return bad("bad number");
  } else if (cmd == "MGET" && w.size() >= 2) {
    r.kind = Request::Kind::mget;
    for (std::size_t k = 1; k < w.size(); ++k)
      if (!key(w[k])) return bad("bad key");
  } else if (cmd == "MINCR" && w.size() >= 3) {
    r.kind = Request::Kind::mincr;
    if (!parse_int(w[1], r.arg)) return bad("bad number");
    for (std::size_t k = 2; k < w.size(); ++k)
      if (!key(w[k])) return bad("bad key");
  } else if (cmd == "DUMP" && w.size() == 1) {
    r.kind = Request::Kind::dump;
    for (unsigned k = 0; k < nkeys; ++k) r.keys.push_back(k);
  } else if (cmd == "SHUTDOWN" && w.size() == 1) {
    r.kind = Request::Kind::shutdown;
  } else {
    return bad("unknown request");
  }
  return r;
}

inline void spin_for(unsigned us) {
  if (us == 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (std::chrono::steady_clock::now() < until) {
  }
}

/// The store: one int64 per key, each guarded by an engine variable.
class Server {
 public:
  Server(asio::io_context& io, const ServerOptions& opt, std::uint16_t port)
      : io_(io),
        opt_(opt),
        values_(opt.keys, 0),
        engine_(engine_options(opt)),
        acceptor_(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), port)) {
    for (unsigned k = 0; k < opt.keys; ++k) vars_.push_back(engine_.new_variable());
  }

  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

  /// Starts accepting; returns at once (the io_context runs the server).
  void start() { asio::co_spawn(io_, accept_loop(), asio::detached); }

  /// Stops accepting and stops the io_context (SIGINT / SIGTERM); requests
  /// already pushed still run: the engine's destructor drains them.
  void stop() {
    asio::error_code ec;
    acceptor_.close(ec);
    io_.stop();
  }

  /// Executes one request; runs on a worker (engine mode) or inline.
  /// `vals` is the store; the caller guarantees the accesses.
  static std::string execute(const Request& r, std::vector<std::int64_t>& vals, unsigned work_us) {
    spin_for(work_us);
    std::string out;
    switch (r.kind) {
      case Request::Kind::get:
        out = "VALUE " + std::to_string(vals[r.keys[0]]);
        break;
      case Request::Kind::put:
        vals[r.keys[0]] = r.arg;
        out = "OK";
        break;
      case Request::Kind::incr:
        vals[r.keys[0]] += r.arg;
        out = "VALUE " + std::to_string(vals[r.keys[0]]);
        break;
      case Request::Kind::mincr:
        for (unsigned k : r.keys) vals[k] += r.arg;
        [[fallthrough]];
      case Request::Kind::mget:
      case Request::Kind::dump:
        out = "VALUES";
        for (unsigned k : r.keys) out += " " + std::to_string(vals[k]);
        break;
      case Request::Kind::shutdown:
        out = "BYE";
        break;
      case Request::Kind::bad:
        out = "ERR " + r.error;
        break;
    }
    return out;
  }

 private:
  static ordo::Options engine_options(const ServerOptions& opt) {
    ordo::Options o;
    o.cpu_workers = opt.workers;
    return o;
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, sock] = co_await acceptor_.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted) co_return;
      if (ec) continue;  // e.g. EMFILE: keep serving the connections we have
      asio::co_spawn(io_, serve_connection(std::move(sock)), asio::detached);
    }
  }

  /// The accesses a request needs, and its reply (engine mode: awaited
  /// without blocking the io thread).
  asio::awaitable<std::string> run(Request req) {
    if (opt_.mode == Mode::inline_ || req.kind == Request::Kind::bad || req.kind == Request::Kind::shutdown) {
      co_return execute(req, values_, req.kind == Request::Kind::bad ? 0 : opt_.work_us);
    }
    std::vector<ordo::Var> keys;
    keys.reserve(req.keys.size());
    for (unsigned k : req.keys) keys.push_back(vars_[k]);
    const bool mutates = req.kind == Request::Kind::put || req.kind == Request::Kind::incr ||
                         req.kind == Request::Kind::mincr;
    const ordo::VarSpan none;
    // Named locals, not a lambda written inside the co_await expression:
    // g++ 12 destroys such a lambda's init-captures twice (see docs/asio.md).
    auto fn = [this, r = std::move(req)] { return execute(r, values_, opt_.work_us); };
    // Short requests may run on the io thread where that only saves wake-ups
    // (OpAttrs::inline_ok: they never block); others always go to a worker.
    // error_to_awaiter: a request that fails answers its own client and
    // leaves nothing on its keys for the requests after it.
    const ordo::OpAttrs attrs{.inline_ok = opt_.work_us < opt_.inline_ready_below_us, .error_to_awaiter = true};
    auto op = ordo::asio::push(engine_, mutates ? none : ordo::VarSpan(keys), mutates ? ordo::VarSpan(keys) : none,
                               std::move(fn), ordo::Context::cpu(), attrs, asio::use_awaitable);
    co_return co_await std::move(op);
  }

  asio::awaitable<void> serve_connection(asio::ip::tcp::socket sock) {
    sock.set_option(asio::ip::tcp::no_delay(true));
    std::string in;
    for (;;) {
      auto [ec, n] = co_await asio::async_read_until(sock, asio::dynamic_buffer(in), '\n',
                                                     asio::experimental::as_tuple(asio::use_awaitable));
      if (ec) co_return;  // the client closed (or reset) the connection
      std::string_view line(in.data(), n - 1);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      Request req = parse(line, opt_.keys);
      in.erase(0, n);
      const bool stop = req.kind == Request::Kind::shutdown;
      // The acceptance order: the server has one io thread, so the number
      // taken here is the order of the pushes (run() pushes before it
      // first suspends).
      const std::uint64_t seq = next_seq_++;
      std::string reply;
      try {
        reply = co_await run(std::move(req));
      } catch (const std::exception& e) {
        reply = std::string("ERR ") + e.what();  // this request only (error_to_awaiter: its keys stay usable)
      }
      reply += " " + std::to_string(seq) + "\n";
      auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(reply), asio::experimental::as_tuple(asio::use_awaitable));
      (void)wn;
      if (wec) co_return;
      if (stop) {
        acceptor_.close();
        io_.stop();
        co_return;
      }
    }
  }

  asio::io_context& io_;
  ServerOptions opt_;
  std::vector<std::int64_t> values_;  ///< values_[k] is guarded by vars_[k] (engine mode)
  ordo::Engine engine_;               ///< after values_: drained before they go
  std::vector<ordo::Var> vars_;
  asio::ip::tcp::acceptor acceptor_;
  std::uint64_t next_seq_ = 0;  ///< io thread only
};

}  // namespace kv

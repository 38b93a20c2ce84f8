// examples/kv_resp_server.hpp - kv_server's RESP2 mode: a Redis-protocol
// string store embedding ordo, driven by redis-cli and redis-benchmark
// (`kv_server --resp`; commands in kv_resp_commands.hpp and kv_resp_execute.hpp,
// keyspace in kv_resp_keyspace.hpp).
//
// One io thread runs every connection as an Asio coroutine. Each read may
// bring many requests (pipelining): the complete ones are planned on the io
// thread and pushed as ONE op (ordo::asio::push, use_awaitable) that reads
// the variables of the keys they read and mutates those of the keys they
// write; the op runs the requests in order and returns their replies, which
// are written back in one write. So requests naming a common key (one of
// them writing it) run in the order the server accepted them, the rest in
// parallel on the engine's workers, and the io thread keeps serving other
// connections meanwhile. MGET / MSET / DEL name all their keys in one op: a
// consistent snapshot, an all-or-nothing transaction. Past max_keys_per_op
// keys (the engine takes at most 0xFFFF variables per op), a batch or a
// request runs as several ops pushed back to back, which keeps both (run()).
//
// Errors: a failed command answers "-ERR ..." and changes nothing
// (execute() never throws, so no error is ever stored on a key's variable).
// A malformed or too large request gets "-ERR Protocol error: ..." after
// the replies of the requests before it, and its connection is closed;
// nothing else is affected. Out of memory, likewise "-ERR out of memory".
//
// Expiry (SET EX/PX, EXPIRE...): lazily, on access (a value past its deadline is
// absent), plus one sleep of the engine's timer (ordo::sleep_for) for the
// earliest deadline, after which the io thread pushes an op erasing the keys
// whose deadline passed.
//
// stop() (SIGINT/SIGTERM in kv_server.cpp, or the SHUTDOWN command): stops
// accepting, cancels the reads of idle connections, lets every other one
// finish the requests it has read and write their replies, then closes
// them all; io_context::run() returns and the engine's destructor drains
// what remains. A client that does not read its replies cannot hold the
// server up: writes still pending `stop_write_timeout` after stop() are
// cancelled (their connections close without the rest of their replies).
#pragma once

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <ordo/asio.hpp>
#include <ordo/task.hpp>
#include <ordo/timer.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <queue>
#include <set>
#include <unordered_map>
#include <chrono>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "kv_resp.hpp"
#include "kv_resp_commands.hpp"
#include "kv_resp_execute.hpp"

namespace kv::resp {

struct ServerOptions {
  unsigned threads = 0;  ///< engine CPU workers (0: one per core)
  unsigned shards = 0;   ///< 0: a variable per key; N: N shard variables (kv_resp_keyspace.hpp)
  Limits limits{};
  std::size_t max_value_bytes = 512U << 20;  ///< APPEND / SET beyond it fail
  /// Push requests with OpAttrs::inline_ok, so ordo::asio may run them on
  /// the io thread where a hop to a worker would only add wake-ups ("Where
  /// fn runs" in docs/asio.md: a batch with work runs there only while the
  /// engine has nothing in flight).
  bool inline_ok = true;
  std::uint16_t port = 0;  ///< 0: a free port
  /// How long stop() lets pending writes finish before cancelling them.
  std::chrono::milliseconds stop_write_timeout{250};
  /// The most keys (variables) one op names. The engine takes at most 0xFFFF
  /// per op; the server never needs one that large: a batch, or a request,
  /// over more keys runs as consecutive ops (Server::run()).
  std::size_t max_keys_per_op = 16384;
  /// How long the accept loop waits after running out of descriptors.
  std::chrono::milliseconds accept_backoff{100};
};

/// What tests and operators may observe of a running server (io thread).
struct ServerStats {
  std::size_t connections = 0;
  std::size_t writing = 0;  ///< connections blocked in a write
  std::uint64_t requests = 0;  ///< requests read since start
  std::uint64_t accept_failures = 0;  ///< accepts that failed (e.g. out of descriptors)
  std::size_t expiry_entries = 0;     ///< entries in the expiry heap, stale ones included
  std::size_t receive_buffer_bytes = 0;  ///< held by the connections' receive buffers
  std::uint64_t bytes_read = 0;          ///< since start
};

class Server {
 public:
  Server(asio::io_context& io, const ServerOptions& opt)
      : io_(io),
        opt_(opt),
        max_keys_(std::clamp<std::size_t>(opt.max_keys_per_op, 1, 0xFFFF)),
        keys_(opt.shards),
        engine_(engine_options(opt)),
        acceptor_(io, asio::ip::tcp::endpoint(asio::ip::address_v4::loopback(), opt.port)) {
    keys_.init(engine_);
  }
  ~Server() {
    if (expiry_stop_) expiry_stop_->request_stop();
    timers_.sync_join();  // before the engine goes: an expiry sleep may be ending on a worker
  }
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  [[nodiscard]] std::uint16_t port() const { return acceptor_.local_endpoint().port(); }

  /// Starts accepting; returns at once (the io_context runs the server).
  void start() { asio::co_spawn(io_, accept_loop(), asio::detached); }

  /// Stops accepting and closes every connection once the requests it has
  /// read are answered. Call on the io thread (or post it there).
  void stop() {
    if (stopping_) return;
    stopping_ = true;
    if (on_stop_) on_stop_();
    asio::error_code ec;
    acceptor_.close(ec);
    accept_timer_.cancel();
    if (expiry_stop_) expiry_stop_->request_stop();
    // A connection waiting for a request stops now; one running requests
    // stops after writing their replies (its loop sees stopping_), unless
    // its client does not read them: the grace timer then cancels the write.
    for (Conn* c : open_conns_)
      if (c->state == Conn::State::reading) c->sock.cancel(ec);
    if (open_conns_.empty()) return;
    stop_timer_.expires_after(opt_.stop_write_timeout);
    stop_timer_.async_wait([this](asio::error_code tec) {
      if (tec) return;  // every connection closed in time
      writes_cancelled_ = true;
      asio::error_code cec;
      for (Conn* c : open_conns_) c->sock.cancel(cec);
    });
  }

  [[nodiscard]] ServerStats stats() const {
    ServerStats st;
    st.connections = open_conns_.size();
    st.requests = requests_;
    st.accept_failures = accept_failures_;
    st.expiry_entries = deadlines_.size();
    st.bytes_read = bytes_read_;
    for (const Conn* c : open_conns_) {
      st.writing += c->state == Conn::State::writing;
      st.receive_buffer_bytes += c->in.capacity();
    }
    return st;
  }

  /// Called once by stop(), on the io thread (kv_server cancels its signal wait).
  void on_stop(std::function<void()> f) { on_stop_ = std::move(f); }

  /// Variables guarding keys right now (per-key mode) or shards. io thread.
  [[nodiscard]] std::size_t variables() const { return keys_.variables(); }

 private:
  static ordo::Options engine_options(const ServerOptions& opt) {
    ordo::Options o;
    o.cpu_workers = opt.threads;
    return o;
  }

  asio::awaitable<void> accept_loop() {
    while (!stopping_) {
      auto [ec, sock] = co_await acceptor_.async_accept(asio::experimental::as_tuple(asio::use_awaitable));
      if (ec == asio::error::operation_aborted || stopping_) co_return;
      if (ec) {
        ++accept_failures_;
        // Out of descriptors (or memory) the listening socket stays readable
        // and every accept fails at once: wait before the next try instead
        // of spinning, and keep serving the connections we have.
        if (ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space || ec == asio::error::no_memory ||
            ec == std::errc::too_many_files_open_in_system) {
          accept_timer_.expires_after(opt_.accept_backoff);
          co_await accept_timer_.async_wait(asio::experimental::as_tuple(asio::use_awaitable));
        }
        continue;
      }
      ++connections_;
      asio::co_spawn(io_, serve_connection(std::move(sock)), asio::detached);
    }
  }

  /// The requests of one read, planned, with the slots of their keys.
  struct Batch {
    std::vector<Plan> plans;
    std::vector<Slot> slots;  ///< each plan's keys in turn; all-key plans: every slot
    std::int64_t now = 0;
  };


  /// Part of a batch pushed as one op: plans [first, last), whose slots
  /// start at b.slots[at]; or (split) keys [k0, k0 + keys) of plan `first`
  /// alone, whose slots start at b.slots[at].
  struct Piece {
    std::size_t first = 0, last = 0, at = 0;
    bool split = false;
    std::size_t k0 = 0, keys = 0;
  };

  /// Runs a batch and returns its replies in order. A read's requests go as
  /// one op (one push and one completion for all of them), except:
  /// - requests with work (SPINSET) while the engine has nothing else in
  ///   flight: one op each, so that those on different keys run on different
  ///   workers (with other batches in flight the workers are busy already,
  ///   and an op per request only adds pushes);
  /// - a batch over more than max_keys_ keys: consecutive ops of at most
  ///   that many, a request over more keys (MGET, DBSIZE...) split by key.
  /// The ops are pushed back to back from this thread, so each key sees them
  /// at one point of its push order: together they read and write what the
  /// one op would have, as one atomic step (the engine orders each variable's
  /// ops by push order). The replies are joined in request order.
  asio::awaitable<std::string> run(Batch& b) {
    const bool work = std::any_of(b.plans.begin(), b.plans.end(), [](const Plan& p) { return p.op == Plan::Op::spinset; });
    const bool each = work && b.plans.size() > 1 && engine_.in_flight() == 0;
    if (!each && b.slots.size() <= max_keys_) {
      co_return co_await push_piece(b, Piece{0, b.plans.size(), 0}, work, opt_.inline_ok);
    }
    std::vector<Piece> pieces;
    for (std::size_t i = 0, at = 0; i < b.plans.size(); at += b.plans[i].slot_count(), ++i) {
      const std::size_t n = b.plans[i].slot_count();
      if (n > max_keys_ && b.plans[i].op != Plan::Op::msetnx) {
        for (std::size_t k = 0; k < n; k += max_keys_) {
          pieces.push_back(Piece{i, i + 1, at + k, true, k, std::min(max_keys_, n - k)});
        }
      } else if (!each && !pieces.empty() && !pieces.back().split &&
                 (at + n) - pieces.back().at <= max_keys_) {
        pieces.back().last = i + 1;
      } else {
        pieces.push_back(Piece{i, i + 1, at});
      }
    }
    std::vector<asio::awaitable<std::string>> ops;
    ops.reserve(pieces.size());
    std::exception_ptr failed;
    try {
      // Every op pushed now (registration is eager), before the first await.
      for (const Piece& piece : pieces) ops.push_back(push_piece(b, piece, work, each ? false : opt_.inline_ok));
    } catch (...) {
      failed = std::current_exception();  // the ops pushed so far still use b: await them first
    }
    std::string out;
    std::vector<std::string> parts;  // replies of a split plan's ops so far
    for (std::size_t i = 0; i < ops.size(); ++i) {
      try {
        std::string r = co_await std::move(ops[i]);
        if (!pieces[i].split) {
          out += r;
          continue;
        }
        parts.push_back(std::move(r));
        if (i + 1 == ops.size() || pieces[i + 1].first != pieces[i].first) {
          out += combine(b.plans[pieces[i].first], parts);
          parts.clear();
        }
      } catch (...) {
        if (!failed) failed = std::current_exception();
      }
    }
    if (failed) std::rethrow_exception(failed);
    co_return out;
  }

  /// Pushes a piece of b as one op, now (OpAttrs::inline_ok as given); its
  /// replies when awaited. Plans without keys (PING, COMMAND, errors) have
  /// nothing to order: run here.
  asio::awaitable<std::string> push_piece(Batch& b, const Piece& piece, bool work, bool inline_ok) {
    std::vector<ordo::Var> reads, writes;
    const std::size_t nslots =
        piece.split ? piece.keys : [&] {
          std::size_t n = 0;
          for (std::size_t i = piece.first; i < piece.last; ++i) n += b.plans[i].slot_count();
          return n;
        }();
    for (std::size_t i = piece.first, pos = piece.at; i < piece.last; ++i) {
      const Plan& p = b.plans[i];
      const std::size_t n = piece.split ? nslots : p.slot_count();
      for (std::size_t k = 0; k < n; ++k) (p.writes ? writes : reads).push_back(b.slots[pos + k].var);
      pos += n;
    }
    const std::size_t max_value = opt_.max_value_bytes;
    auto exec = [&b, piece, max_value] {
      std::string out;
      if (piece.split) {
        execute(b.plans[piece.first], b.slots.data() + piece.at, piece.keys, b.now, max_value, out, piece.k0);
        return out;
      }
      for (std::size_t i = piece.first, pos = piece.at; i < piece.last; ++i) {
        const Plan& p = b.plans[i];
        execute(p, b.slots.data() + pos, p.slot_count(), b.now, max_value, out);
        pos += p.slot_count();
      }
      return out;
    };
    if (reads.empty() && writes.empty()) return ready(exec());
    // A var both read and written counts as written (the engine normalises the lists).
    // error_to_awaiter: a failure that escapes the per-command catch (the
    // reply's allocation) reaches this connection only, never the keys.
    const ordo::OpAttrs attrs{.name = "resp batch", .inline_ok = inline_ok, .error_to_awaiter = true};
    if (work) {
      // Its own fn type: ordo::asio keeps a run-time average per type, and
      // work batches must not make cheap ones look expensive (or the reverse).
      return ordo::asio::push(engine_, ordo::VarSpan(reads), ordo::VarSpan(writes), WorkFn<decltype(exec)>{std::move(exec)},
                              ordo::Context::cpu(), attrs, asio::use_awaitable);
    }
    return ordo::asio::push(engine_, ordo::VarSpan(reads), ordo::VarSpan(writes), std::move(exec),
                            ordo::Context::cpu(), attrs, asio::use_awaitable);
  }
  template <class F>
  struct WorkFn {
    F fn;
    std::string operator()() { return fn(); }
  };
  static asio::awaitable<std::string> ready(std::string s) { co_return s; }

  /// A connection, owned by its coroutine (serve_connection) and listed in open_conns_
  /// while it runs (stop() reaches it there).
  struct Conn {
    enum class State : std::uint8_t { busy, reading, writing };
    explicit Conn(asio::ip::tcp::socket s) : sock(std::move(s)) {}
    asio::ip::tcp::socket sock;
    State state = State::busy;  ///< io thread
    std::string in;             ///< bytes read (serve() says which are parsed); io thread
  };
  /// The receive buffer a connection keeps between requests.
  static constexpr std::size_t kKeepBytes = 64U << 10;
  /// Lists a connection in open_conns_ for its coroutine's lifetime, whichever
  /// way the connection ends; the last one out during stop() ends the grace timer.
  struct Listed {
    Server& srv;
    Conn* conn;
    Listed(Server& s, Conn* c) : srv(s), conn(c) { srv.open_conns_.insert(c); }
    ~Listed() {
      srv.open_conns_.erase(conn);
      if (srv.stopping_ && srv.open_conns_.empty()) srv.stop_timer_.cancel();
    }
    Listed(const Listed&) = delete;
    Listed& operator=(const Listed&) = delete;
  };

  asio::awaitable<void> serve_connection(asio::ip::tcp::socket socket) {
    Conn conn(std::move(socket));
    const Listed listed(*this, &conn);
    asio::error_code ec;
    conn.sock.set_option(asio::ip::tcp::no_delay(true), ec);
    // Out of memory (a huge request, a reply too large to build) ends this
    // connection only, with an error reply where one can still be written.
    std::string fail;
    try {
      co_await serve(conn);
    } catch (const std::bad_alloc&) {
      fail = "-ERR out of memory\r\n";
    } catch (const std::exception& e) {
      fail = std::string("-ERR internal error: ") + e.what() + "\r\n";
    }
    if (!fail.empty() && !writes_cancelled_) {
      conn.state = Conn::State::writing;
      co_await asio::async_write(conn.sock, asio::buffer(fail), asio::experimental::as_tuple(asio::use_awaitable));
      conn.state = Conn::State::busy;
    }
    conn.sock.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    conn.sock.close(ec);
  }

  /// Reads, runs and answers requests until the client closes, a request is
  /// malformed, QUIT / SHUTDOWN, or stop().
  asio::awaitable<void> serve(Conn& conn) {
    asio::ip::tcp::socket& sock = conn.sock;
    // in[pos, end) holds what was read and not yet parsed. `in` keeps its
    // size between reads (resizing it down and up again per read would
    // zero-fill every chunk) up to kKeepBytes; a large request's buffer goes
    // once it is parsed, so idle connections do not hold their peak.
    std::string& in = conn.in;
    std::size_t pos = 0, end = 0;
    Partial part;  // the request being read: its elements so far
    std::vector<std::string> argv;
    std::string err;
    bool close = false;
    while (!close && !stopping_) {
      if (pos == end) {
        pos = end = 0;
      } else if (pos > 0) {
        std::memmove(in.data(), in.data() + pos, end - pos);
        end -= pos;
        pos = 0;
      }
      const std::size_t chunk = std::max<std::size_t>(16384, std::min<std::size_t>(end, 1U << 20));
      if (in.size() < end + chunk) in.resize(end + chunk);
      conn.state = Conn::State::reading;
      auto [rec, n] = co_await sock.async_read_some(asio::buffer(in.data() + end, chunk),
                                                    asio::experimental::as_tuple(asio::use_awaitable));
      conn.state = Conn::State::busy;
      end += n;
      bytes_read_ += n;
      if (rec) break;  // closed by the client, or stop()
      Batch b;
      Held held(*this, b);
      b.now = now_ms();
      std::string tail;  // a protocol error's reply, after the batch's
      bool shutdown = false;
      for (;;) {
        const Status st = parse(std::string_view(in.data(), end), pos, part, argv, err, opt_.limits);
        if (st == Status::incomplete) {
          if (part.bytes + (end - pos) > opt_.limits.max_request_bytes) {
            error(tail, "ERR Protocol error: request larger than " + std::to_string(opt_.limits.max_request_bytes) + " bytes");
            close = true;
          }
          break;
        }
        if (st == Status::error) {
          error(tail, "ERR " + err);
          close = true;
          break;
        }
        if (argv.empty()) continue;
        ++requests_;
        add(b, plan(std::move(argv), b.now));
        if (b.plans.back().quit) {
          close = true;
          shutdown = b.plans.back().shutdown;
          break;
        }
      }
      if (in.size() > kKeepBytes && end - pos <= kKeepBytes / 2) {
        std::string rest(kKeepBytes / 2, '\0');
        std::memcpy(rest.data(), in.data() + pos, end - pos);
        in.swap(rest);
        end -= pos;
        pos = 0;
      }
      std::string out;
      if (!b.plans.empty()) {
        try {
          out = co_await run(b);
        } catch (const std::exception& e) {  // the engine refused the push: not expected
          out.clear();
          error(out, std::string("ERR internal error: ") + e.what());
          close = true;
        }
      }
      held.release();
      out += tail;
      if (!out.empty()) {
        if (writes_cancelled_) break;  // stop()'s grace is over: the client would not read it in time
        conn.state = Conn::State::writing;
        auto [wec, wn] = co_await asio::async_write(sock, asio::buffer(out), asio::experimental::as_tuple(asio::use_awaitable));
        conn.state = Conn::State::busy;
        (void)wn;
        if (wec) break;
      }
      if (shutdown) stop();
    }
  }

  /// What INFO says of the server and its engine, now (io thread).
  InfoFacts info_facts() const {
    InfoFacts f;
    f.port = port();
    f.uptime_s = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - started_).count();
    f.clients = open_conns_.size();
    f.connections_received = connections_;
    f.commands = requests_;
    f.input_bytes = bytes_read_;
    f.rejected = accept_failures_;
    f.engine = engine_.stats();
    return f;
  }

  /// Appends a plan and the slots of its keys (io thread).
  void add(Batch& b, Plan p) {
    if (p.op == Plan::Op::msetnx && p.key_count() > 0xFFFF) {
      // Its check and its writes must be one op (run() never splits it).
      p = Plan{};
      error(p.text, "ERR MSETNX takes at most 65535 keys here");
    }
    if (p.op == Plan::Op::mset || p.op == Plan::Op::msetnx) {
      // Checked here, not in the op: a split MSET must fail before any part runs.
      for (std::size_t i = 2; i < p.argv.size(); i += 2) {
        if (p.argv[i].size() > opt_.max_value_bytes) {
          p = Plan{};
          error(p.text, "ERR string exceeds maximum allowed size");
          break;
        }
      }
    }
    if (p.all_keys) {
      const std::size_t before = b.slots.size();
      keys_.all(b.slots);
      p.nall = b.slots.size() - before;
    } else {
      for (std::size_t i = 0, n = p.key_count(); i < n; ++i) b.slots.push_back(keys_.resolve(p.key(i)));
    }
    if (p.op == Plan::Op::info) p.text = info_text(static_cast<std::uint32_t>(p.num), info_facts());
    if ((p.op == Plan::Op::set && p.deadline_ms != 0) || (p.op == Plan::Op::expire && p.deadline_ms > b.now)) {
      schedule_expiry(p.deadline_ms, p.key(0));
    }
    b.plans.push_back(std::move(p));
  }

  /// Releases a batch's keys when it goes out of scope, whichever way (its
  /// ops have finished by then: run() awaits every op it pushed).
  struct Held {
    Server& srv;
    Batch& b;
    bool released = false;
    Held(Server& s, Batch& batch) : srv(s), b(batch) {}
    /// Releases now (once the batch's ops finished, before its replies go
    /// out: a client that saw a reply sees the keys released).
    void release() {
      released = true;
      srv.release(b);
    }
    ~Held() {
      if (released) return;
      try {
        srv.release(b);
      } catch (...) {
        // Out of memory deleting a variable: the key's entry stays, unused.
      }
    }
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
  };

  /// After the batch's op finished: per-key entries whose key is gone go.
  void release(Batch& b) {
    std::size_t at = 0;
    for (const Plan& p : b.plans) {
      if (p.all_keys) {
        const std::size_t n = p.slot_count();
        keys_.release_all(b.slots.data() + at, n);
        at += n;
      } else {
        for (std::size_t i = 0, n = p.key_count(); i < n; ++i) keys_.release(b.slots[at + i]);
        at += p.key_count();
      }
    }
  }

  // ---- expiry: a min-heap of (deadline, key), one ordo::sleep_for at a time (io thread) ----
  // A key's newest deadline is in expiry_of_; a heap entry with another one
  // is stale (the key was set again) and is dropped when it surfaces, or
  // when stale entries outnumber live ones and the heap is rebuilt, so that
  // SET ... EX repeated on a few keys keeps the heap at their number.
  void schedule_expiry(std::int64_t deadline, const std::string& key) {
    auto [it, added] = expiry_of_.try_emplace(key, deadline);
    if (!added) {
      if (it->second == deadline) return;
      it->second = deadline;
    }
    deadlines_.emplace(deadline, key);
    if (deadlines_.size() > 2 * expiry_of_.size() + 64) {
      std::vector<std::pair<std::int64_t, std::string>> live;
      live.reserve(expiry_of_.size());
      for (const auto& [k, d] : expiry_of_) live.emplace_back(d, k);
      deadlines_ = decltype(deadlines_)(std::greater<>{}, std::move(live));
    }
    if (armed_ == 0 || deadline < armed_) arm(deadline);
  }
  void arm(std::int64_t deadline) {
    if (stopping_) return;
    armed_ = deadline;
    // One sleep at a time (ordo/timer.hpp), for the earliest deadline;
    // re-arming for an earlier one stops the sleep it replaces.
    if (expiry_stop_) expiry_stop_->request_stop();
    expiry_stop_.emplace();
    timers_.spawn(expire_at(deadline, expiry_stop_->get_token()));
  }
  /// Sleeps until `deadline` has passed (a key lives through its deadline's
  /// millisecond, as in Redis), then has the io thread sweep (unless re-armed or stopped meanwhile).
  ordo::Task<void> expire_at(std::int64_t deadline, std::stop_token stop) {
    // SET accepts deadlines beyond what the timer's nanoseconds can hold
    // (UBSan caught the overflow): such a sleep is the longest it can be
    // (~146 years), which is the same as never.
    constexpr std::int64_t kLongestMs =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::duration::max()).count() / 2;
    try {
      co_await ordo::sleep_for(engine_, std::chrono::milliseconds(std::clamp<std::int64_t>(deadline + 1 - now_ms(), 0, kLongestMs)),
                               stop);
    } catch (const ordo::CancelledError&) {
      co_return;  // re-armed earlier, or stopping
    }
    asio::post(io_, [this, deadline] {
      if (stopping_ || deadline != armed_) return;
      armed_ = 0;
      asio::co_spawn(io_, sweep(), asio::detached);
    });
  }
  /// Erases the keys whose deadline has passed, as one op mutating them.
  asio::awaitable<void> sweep() {
    Batch b;
    b.now = now_ms();
    Plan p;
    p.op = Plan::Op::expire_sweep;
    p.writes = true;
    p.key_step = 1;
    p.argv.emplace_back("expire");
    while (!deadlines_.empty() && deadlines_.top().first < b.now && p.argv.size() < 1025) {
      const auto& [deadline, key] = deadlines_.top();
      const auto it = expiry_of_.find(key);
      if (it != expiry_of_.end() && it->second == deadline) {
        expiry_of_.erase(it);
        p.argv.push_back(key);
      }
      deadlines_.pop();
    }
    std::vector<Slot> slots;
    std::vector<std::string> keys{p.argv[0]};
    for (std::size_t i = 1; i < p.argv.size(); ++i) {
      Slot s;
      if (keys_.resolve_existing(p.argv[i], s)) {
        slots.push_back(s);
        keys.push_back(p.argv[i]);
      }
    }
    p.argv = std::move(keys);
    b.slots = std::move(slots);
    if (!deadlines_.empty()) arm(deadlines_.top().first);
    if (p.argv.size() > 1) {
      b.plans.push_back(std::move(p));
      const Held held(*this, b);
      co_await run(b);
    }
  }

  asio::io_context& io_;
  ServerOptions opt_;
  std::size_t max_keys_;  ///< opt_.max_keys_per_op within what the engine takes
  Keyspace keys_;        ///< before engine_: the values outlive the engine's drain
  ordo::Engine engine_;  ///< drained (every op finished) before keys_ goes
  asio::ip::tcp::acceptor acceptor_;
  std::priority_queue<std::pair<std::int64_t, std::string>, std::vector<std::pair<std::int64_t, std::string>>,
                      std::greater<>>
      deadlines_;                                  ///< (deadline, key), stale ones included; io thread
  /// Each key's newest deadline in deadlines_. io thread.
  std::unordered_map<std::string, std::int64_t, KeyHash, std::equal_to<>> expiry_of_;
  std::int64_t armed_ = 0;                          ///< deadline the timer waits for (0: none); io thread
  std::optional<std::stop_source> expiry_stop_;    ///< stops the current expiry sleep; io thread
  ordo::AsyncScope timers_;                        ///< the expiry sleeps; after engine_, joined by ~Server
  std::set<Conn*> open_conns_;                       ///< open connections; io thread
  bool stopping_ = false;                          ///< io thread
  asio::steady_timer stop_timer_{io_};             ///< stop()'s grace for pending writes
  bool writes_cancelled_ = false;                  ///< the grace is over; io thread
  std::uint64_t requests_ = 0;                     ///< io thread
  std::uint64_t accept_failures_ = 0;              ///< io thread
  std::uint64_t bytes_read_ = 0;                   ///< io thread
  std::uint64_t connections_ = 0;                  ///< accepted since start; io thread
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  asio::steady_timer accept_timer_{io_};           ///< the accept loop's back-off
  std::function<void()> on_stop_;
};

}  // namespace kv::resp

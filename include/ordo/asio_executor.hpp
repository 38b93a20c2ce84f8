// ordo/asio_executor.hpp - an engine's CPU workers as an Asio executor.
//
//   ordo::asio::engine_executor ex(engine);            // Context::cpu() by default
//   asio::post(ex, [] { /* runs on an ordo worker */ });
//   asio::post(asio::bind_executor(ex, handler));      // a handler on the workers
//   ordo::asio::push(engine, {a}, {b}, fn, asio::bind_executor(ex, on_done));
//
// Each function submitted is handed to Engine::post: it has no variables,
// conflicts with nothing and runs on a worker of ctx's pool, concurrently
// with everything else (wrap the executor in asio::strand<engine_executor>
// for serial execution).
//
// Part of target ordo::asio (standalone Asio, <asio.hpp>); the core never
// includes Asio headers.
#pragma once

#include "ordo/detail/asio_config.hpp"  // before any Asio header

#include <asio/execution.hpp>
#include <asio/execution_context.hpp>

#include <memory>
#include <type_traits>
#include <utility>

#include "ordo/context.hpp"
#include "ordo/engine.hpp"

namespace ordo::asio {

/// A standard (P0443-style) Asio executor whose execute() posts the
/// function to an engine (Engine::post). It never runs the function inside
/// execute() (blocking.never), so asio::post,
/// asio::dispatch, asio::defer, asio::bind_executor, executor_work_guard and
/// asio::strand all work with it.
///
/// An exception escaping a function is stored like that of an op with no
/// outputs: Engine::wait_for_all() rethrows it (or the engine reports it at
/// destruction), where io_context::run() would have thrown it.
///
/// execute() never blocks: Engine::post is not held back by
/// Options::max_in_flight, so an io_context thread can hand handlers to the
/// engine freely. The engine must outlive every copy of the executor; its
/// destructor waits for every function already submitted.
///
/// @par Thread safety
/// A value type; any thread may use any copy concurrently (execute is a post).
class engine_executor {
 public:
  /// Allocates the small execution_context below (shared by all copies).
  explicit engine_executor(Engine& engine, Context ctx = Context::cpu())
      : engine_(&engine), ctx_(ctx), services_(std::make_shared<::asio::execution_context>()) {}

  /// Runs f (a void() callable, called once as an rvalue) on a worker
  /// (Engine::post: never on the calling thread, never held back).
  template <class F>
  void execute(F&& f) const {
    engine_->post(Job<std::decay_t<F>>{services_, std::forward<F>(f)}, ctx_, OpAttrs{.name = "asio handler"});
  }

  [[nodiscard]] Engine& engine() const noexcept { return *engine_; }
  /// The ordo context (device) the functions are pushed to.
  [[nodiscard]] Context device() const noexcept { return ctx_; }

  /// Properties: execution never blocks on the function; the rest are the
  /// defaults Asio assumes (work tracking is a no-op: the engine drains its
  /// ops before it is destroyed).
  static constexpr ::asio::execution::blocking_t query(::asio::execution::blocking_t) noexcept {
    return ::asio::execution::blocking.never;
  }
  engine_executor require(::asio::execution::blocking_t::never_t) const noexcept { return *this; }
  static constexpr ::asio::execution::relationship_t query(::asio::execution::relationship_t) noexcept {
    return ::asio::execution::relationship.fork;
  }
  static constexpr ::asio::execution::outstanding_work_t query(::asio::execution::outstanding_work_t) noexcept {
    return ::asio::execution::outstanding_work.untracked;
  }

  /// The Asio execution_context of this executor and its copies: it holds
  /// the Asio services that adapters such as asio::strand keep per context
  /// (nothing runs on it). It lives as long as any copy of the executor.
  ::asio::execution_context& query(::asio::execution::context_t) const noexcept { return *services_; }

  friend bool operator==(const engine_executor& a, const engine_executor& b) noexcept {
    return a.engine_ == b.engine_ && a.ctx_ == b.ctx_;
  }
  friend bool operator!=(const engine_executor& a, const engine_executor& b) noexcept { return !(a == b); }

 private:
  /// A submitted function. It keeps the execution_context alive until after
  /// the function is destroyed (members go in reverse order): a strand's
  /// invoker, for one, holds the last executor copy and, declared before it,
  /// the strand's state, whose destructor locks the strand service's mutex,
  /// so the context must not die with the executor copy first (seen under
  /// TSan: a destroyed mutex locked on a worker).
  template <class F>
  struct Job {
    std::shared_ptr<::asio::execution_context> keep;
    F fn;
    void operator()() { std::move(fn)(); }
  };

  Engine* engine_;
  Context ctx_;
  std::shared_ptr<::asio::execution_context> services_;
};

static_assert(::asio::execution::is_executor<engine_executor>::value,
              "ordo::asio::engine_executor must satisfy Asio's executor requirements");

}  // namespace ordo::asio

// src/core/lease_probe.cpp - does an op queue behind a lease? Asked by a
// coroutine before it suspends on an op while it holds leases
// (detail::EngineExtension::queued_behind, ordo/coro.hpp): an op waiting in
// the queue of a variable that the coroutine's own lease holds can only be
// granted once that lease is released, which the suspended coroutine never
// does. Reads the variables' queues under their locks; changes nothing.
#include "ordo/detail/extension.hpp"

#include <mutex>

#include "records.hpp"

namespace ordo::detail {

std::int64_t EngineExtension::queued_behind(const OnComplete& lease, const PushedOp& awaited) noexcept {
  // The lease is held by the caller: its record and access list stay put.
  const OpRecord* held = lease.op_;
  if (held == nullptr || awaited.op == nullptr) return -1;
  for (std::uint16_t i = 0; i < held->n_access; ++i) {
    VarRecord* v = held->access[i].var();
    std::lock_guard lock(v->lock);
    // A waiting access waits for every granted one, the lease's included.
    // The generation tells the awaited op from a later op in its recycled
    // record; while the op waits here it cannot complete, so it is stable.
    for (const AccessNode* a = v->head; a != nullptr; a = a->next) {
      if (a->op == awaited.op && awaited.op->gen.load(std::memory_order_relaxed) == awaited.gen) return v->id;
    }
  }
  return -1;
}

}  // namespace ordo::detail

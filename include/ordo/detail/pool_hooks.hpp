// ordo/detail/pool_hooks.hpp - the points of a worker pool's sleep/wake
// handshake where a test may step in (tests/core/wake_test.cpp forces each
// interleaving of a pusher with a worker deciding to sleep). Internal.
#pragma once

#include <cstdint>

namespace ordo::detail {

enum class PoolPoint : std::uint8_t {
  sleeper_counted,  ///< a worker counted itself asleep, before its last look at the deques
  sleeper_looked,   ///< its last look found nothing, before it waits
  op_published,     ///< an enqueuer made its op visible, before it looks at who sleeps or spins
};

/// Called on the thread at the point; `pool` names the pool (its address).
using PoolHook = void (*)(PoolPoint point, const void* pool, void* arg);

/// Installs a hook (null: none) for every pool of the process. For tests,
/// with no engine running ops while it changes.
void set_pool_hook(PoolHook hook, void* arg) noexcept;

}  // namespace ordo::detail

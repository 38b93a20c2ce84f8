// The code of docs/storage.md. Each [snippet:NAME] ... [end] region is quoted
// verbatim there; the `docs_snippets` test checks they stay in sync, and this
// program runs as a smoke test (example_storage), so every snippet compiles
// and works.
#undef NDEBUG  // the asserts are this smoke test's checks, in every build type
#include <ordo/coro.hpp>
#include <ordo/ordo.hpp>
#include <ordo/resource.hpp>
#include <ordo/storage.hpp>

#include <cassert>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <vector>

namespace {

void pool_basics() {
  ordo::Engine engine;
  ordo::Var sum = engine.new_variable();
  std::uint64_t total = 0;
  // [snippet:pool]
  ordo::BufferPool pool(engine);  // page-aligned host memory, no limit
  for (int batch = 0; batch < 100; ++batch) {
    ordo::Buffer buf = pool.acquire(256 * 1024).wait();  // blocks only at a limit
    engine.push_sync([p = buf.data(), batch] { std::memset(p, batch, 256 * 1024); }, ordo::Context::cpu(), {},
                     {buf.var()}, {.name = "fill"});
    engine.push_sync([p = buf.data(), &total] { total += static_cast<std::uint64_t>(p[4096]); },
                     ordo::Context::cpu(), {buf.var()}, {sum}, {.name = "use"});
    buf.release();  // back to its bucket once "fill" and "use" have finished
  }
  engine.wait_for_all();
  ordo::BufferPoolStats st = pool.stats();
  std::printf("%llu acquires, %.0f%% from the pool, at most %zu KiB held\n",
              static_cast<unsigned long long>(st.acquires), 100 * st.hit_rate(), st.peak_reserved_bytes / 1024);
  // [end]
  assert(total == 99 * 100 / 2);
  assert(st.acquires == 100 && st.in_use_bytes == 0);

  // [snippet:buffer]
  ordo::Buffer buf = pool.acquire(1000).wait();
  std::size_t asked = buf.size();             // 1000: the size asked for
  std::size_t usable = buf.capacity();        // the block's size class (>= size()), all of it usable
  std::span<std::byte> bytes = buf.bytes();   // {buf.data(), buf.size()}
  std::uint32_t* words = buf.as<std::uint32_t>();  // data() as another type (page-aligned)
  ordo::Var var = buf.var();                  // what ops on this memory declare
  // [end]
  assert(asked == 1000 && usable >= asked && bytes.data() == buf.data() && bytes.size() == asked);
  assert(static_cast<void*>(words) == static_cast<void*>(buf.data()) && var == buf.var());
  buf.release();
  assert(buf.size() == 0 && buf.data() == nullptr);  // an empty handle after release()
}

// [snippet:coro_acquire]
ordo::Task<void> produce(ordo::Engine& engine, ordo::BufferPool& pool, ordo::Var out, std::uint64_t& total) {
  for (int batch = 0; batch < 64; ++batch) {
    // At the pool's limit this suspends (no thread waits) until a release.
    ordo::Buffer buf = co_await pool.acquire(64 * 1024);
    engine.push_sync([p = buf.data(), batch] { std::memset(p, batch, 64 * 1024); }, ordo::Context::cpu(), {},
                     {buf.var()});
    engine.push_sync([p = buf.data(), &total] { total += static_cast<std::uint64_t>(p[0]); }, ordo::Context::cpu(),
                     {buf.var()}, {out});
  }  // each buffer is released by its destructor, behind its two ops
}
// [end]

void coro_acquire() {
  ordo::Engine engine;
  ordo::Var out = engine.new_variable();
  std::uint64_t total = 0;
  // [snippet:limit]
  ordo::BufferPool pool(engine, {.limit_bytes = 4 * 64 * 1024});  // 4 batches in flight at most
  ordo::sync_wait(produce(engine, pool, out, total));
  engine.wait_for_all();
  assert(pool.stats().peak_reserved_bytes <= 4 * 64 * 1024);
  // [end]
  assert(total == 63 * 64 / 2);
}

void scratch_and_random() {
  ordo::Engine engine;
  std::vector<float> in(4096, 1.0F), out(4096);
  ordo::Var vin = engine.new_variable(), vout = engine.new_variable();
  // [snippet:resources]
  ordo::TempSpace temp(engine, {.arenas = 4, .cap_bytes = 1 << 20});
  ordo::RandomStream rng(engine, /*seed=*/42);
  ordo::TempArena& scratch = temp.next();  // round robin over the 4 arenas
  engine.push_sync(
      [&] {
        std::span<float> tmp = scratch.get_as<float>(in.size());  // grows on demand, never shrinks
        const float gain = 0.5F + static_cast<float>(rng.uniform());  // this op's draw, in push order
        for (std::size_t i = 0; i < in.size(); ++i) tmp[i] = in[i] * gain;
        for (std::size_t i = 0; i < in.size(); ++i) out[i] = tmp[in.size() - 1 - i];
      },
      ordo::Context::cpu(), {vin}, {vout, scratch.var(), rng.var()}, {.name = "augment"});
  // [end]
  engine.wait_for_all();
  std::mt19937_64 ref(42);
  const float gain = 0.5F + static_cast<float>(static_cast<double>(ref() >> 11) * 0x1.0p-53);
  assert(out[0] == gain);
}

void parallel_streams() {
  ordo::Engine engine;
  std::vector<double> noise(64);
  // [snippet:streams]
  ordo::RandomStreams streams(engine, /*seed=*/7, /*n=*/4);  // stream i seeded 7 + i
  for (std::size_t sample = 0; sample < noise.size(); ++sample) {
    ordo::RandomStream& rs = streams[sample];  // by the sample's index, not by the worker
    engine.push_sync([&rs, &noise, sample] { noise[sample] = rs.uniform(); }, ordo::Context::cpu(), {}, {rs.var()});
  }
  engine.wait_for_all();  // the same numbers on every run, with any number of workers
  // [end]
  std::mt19937_64 s1(7 + 1);
  assert(noise[1] == static_cast<double>(s1() >> 11) * 0x1.0p-53);
}

}  // namespace

int main() {
  pool_basics();
  coro_acquire();
  scratch_and_random();
  parallel_streams();
  std::printf("storage examples: OK\n");
  return 0;
}

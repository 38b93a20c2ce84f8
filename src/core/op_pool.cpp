// src/core/op_pool.cpp - recycled op records and access-node blocks: a push
// allocates nothing from the heap in steady state.
#include "ordo/detail/op_record.hpp"

#include <cstddef>

#include "recycler.hpp"

namespace ordo::detail {
namespace {

/// Access nodes of an op with more variables than fit inline.
template <std::size_t N>
struct AccessBlock {
  AccessNode nodes[N];
  AccessBlock* next = nullptr;
};
using SmallBlock = AccessBlock<16>;
using LargeBlock = AccessBlock<64>;

// OpRecord's layout (see its comment): `wait` and the first two inline
// access nodes in the record's first cache line. offsetof on a record that
// is not standard-layout is supported by GCC and Clang.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
static_assert(alignof(OpRecord) == 64 && kInlineAccess >= 2 && offsetof(OpRecord, wait) < 64 &&
                  offsetof(OpRecord, inline_access) + 2 * sizeof(AccessNode) <= 64,
              "OpRecord: wait and two access nodes share the first line");
#pragma GCC diagnostic pop

}  // namespace

OpRecord* op_alloc() { return Recycler<OpRecord>::alloc(); }

AccessNode* access_alloc(std::size_t n) {
  static_assert(offsetof(SmallBlock, nodes) == 0 && offsetof(LargeBlock, nodes) == 0);
  if (n <= 16) return Recycler<SmallBlock>::alloc()->nodes;
  if (n <= 64) return Recycler<LargeBlock>::alloc()->nodes;
  return new AccessNode[n];  // more than 64 distinct variables: rare enough for the heap
}

namespace {
// The block's size class follows from the op's variable count.
int access_class(std::size_t n) noexcept { return n <= static_cast<std::size_t>(kInlineAccess) ? 0 : n <= 16 ? 1 : n <= 64 ? 2 : 3; }

void access_free(OpRecord* op) noexcept {
  if (op->access == op->inline_access) return;
  switch (access_class(op->n_access)) {
    case 1:
      Recycler<SmallBlock>::free(reinterpret_cast<SmallBlock*>(op->access));
      break;
    case 2:
      Recycler<LargeBlock>::free(reinterpret_cast<LargeBlock*>(op->access));
      break;
    default:
      delete[] op->access;
  }
  op->access = op->inline_access;
}
}  // namespace

void access_shrink(OpRecord* op, std::size_t n) {
  if (access_class(n) != access_class(op->n_access)) {
    access_free(op);
    if (n > static_cast<std::size_t>(kInlineAccess)) op->access = access_alloc(n);
  }
  op->n_access = static_cast<std::uint16_t>(n);
}

void op_free(OpRecord* op) noexcept {
  access_free(op);
  op->traits = kNoTraits;  // OR-ed into by the next push (EngineCore::prepare)
  op->engine = nullptr;
  op->oper = nullptr;
  op->aux = nullptr;
  op->name = nullptr;
  Recycler<OpRecord>::free(op);
}

}  // namespace ordo::detail

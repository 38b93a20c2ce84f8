// gpu/operators.cpp - pre-built GPU operators (Runtime::new_operator): the
// plan is built once, each push is a two-word stream-ordered engine op. Not an
// engine Operator: the fence gate would hold those (see docs/gpu.md).
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "runtime_impl.hpp"

namespace ordo::gpu {

void Runtime::Impl::release_operator(detail::OperatorState* st) noexcept {
  if (st->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  st->fn.reset();  // the last push finished: destroy the body here
  std::lock_guard lock(oper_mutex);
  st->free_next = oper_free;
  oper_free = st;
}

/// The engine op body of one push of a GPU operator: two words (inline in
/// the op record), holding a reference to the operator until destroyed.
struct Runtime::OperatorBody {
  Runtime* rt;
  detail::OperatorState* st;
  OperatorBody(Runtime* r, detail::OperatorState* s) noexcept : rt(r), st(s) {}
  OperatorBody(OperatorBody&& o) noexcept : rt(o.rt), st(std::exchange(o.st, nullptr)) {}
  OperatorBody(const OperatorBody&) = delete;
  OperatorBody& operator=(const OperatorBody&) = delete;
  OperatorBody& operator=(OperatorBody&&) = delete;
  ~OperatorBody() {
    if (st != nullptr) rt->impl_->release_operator(st);
  }
  void operator()(const RunContext& rc, OnComplete done) { rt->run_operator(rc, *st, done); }
};

Operator Runtime::init_operator(std::unique_ptr<detail::OperatorFnBase> fn, VarSpan reads, VarSpan writes,
                                const OpAttrs& attrs) {
  Impl& m = *impl_;
  if (attrs.prop == FnProperty::delete_var) {
    throw Error(Errc::invalid_argument, "FnProperty::delete_var is reserved for delete_variable");
  }
  detail::OperatorState* st = nullptr;
  {
    std::lock_guard lock(m.oper_mutex);
    if (m.oper_free != nullptr) {
      st = std::exchange(m.oper_free, m.oper_free->free_next);
    } else {
      st = &m.oper_storage.emplace_back();
    }
  }
  try {
    fill_plan(st->plan, reads, writes, attrs);  // checks the variables (throws like a push)
    st->reads.assign(reads.begin(), reads.end());
    st->writes.assign(writes.begin(), writes.end());
    st->name = attrs.name != nullptr ? attrs.name : "";
    st->attrs = attrs;
    st->attrs.name = attrs.name != nullptr ? st->name.c_str() : nullptr;
  } catch (...) {
    std::lock_guard lock(m.oper_mutex);
    st->free_next = m.oper_free;
    m.oper_free = st;
    throw;
  }
  st->owner = &m;
  st->fn = std::move(fn);
  st->refs.store(1, std::memory_order_release);
  return Operator{st, st->gen.load(std::memory_order_acquire)};
}

void Runtime::push(Operator op, Context ctx) { push(op, ctx, op.st_ != nullptr ? op.st_->attrs.priority : 0); }

void Runtime::push(Operator op, Context ctx, int priority) {
  detail::OperatorState* st = op.st_;
  Impl& m = *impl_;
  if (st == nullptr) throw Error(Errc::deleted_operator, "push of an empty gpu::Operator handle");
  if (st->owner != &m) throw Error(Errc::deleted_operator, "push of a gpu::Operator of another runtime");
  std::int64_t refs = st->refs.load(std::memory_order_relaxed);
  do {
    if (refs == 0) throw Error(Errc::deleted_operator, "push of a deleted gpu::Operator");
  } while (!st->refs.compare_exchange_weak(refs, refs + 1, std::memory_order_acq_rel));
  OperatorBody body(this, st);  // owns the reference from here on
  if (st->gen.load(std::memory_order_acquire) != op.gen_) {
    throw Error(Errc::deleted_operator, "push of a deleted gpu::Operator");
  }
  m.check_device(ctx);
  OpAttrs attrs = st->attrs;
  attrs.priority = priority;
  ordo::detail::EngineExtension::push(engine_, std::move(body), ctx, st->reads, st->writes, attrs,
                                      ordo::detail::kFenceExempt);
}

void Runtime::delete_operator(Operator op) {
  detail::OperatorState* st = op.st_;
  if (st == nullptr || st->owner != impl_.get()) {
    throw Error(Errc::deleted_operator, "delete_operator: empty handle or gpu::Operator of another runtime");
  }
  std::uint64_t gen = op.gen_;
  if (!st->gen.compare_exchange_strong(gen, gen + 1, std::memory_order_acq_rel)) {
    throw Error(Errc::deleted_operator, "delete_operator: the gpu::Operator was already deleted");
  }
  impl_->release_operator(st);
}

void Runtime::run_operator(const RunContext& rc, detail::OperatorState& st, const OnComplete& done) {
  std::exception_ptr error;
  const Stream s = begin_op(rc, st.plan, error);
  if (!error) {
    try {
      (*st.fn)(s);
    } catch (...) {
      error = std::current_exception();
    }
    end_op(s, st.plan, error);
  }
  done(error);
}

}  // namespace ordo::gpu

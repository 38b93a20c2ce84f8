// gpu/operators.cpp - pre-built GPU operators (Runtime::new_operator): an
// engine Operator (its lists normalised once) whose body is the usual GPU op
// body with its plan built once; fence-exempt, as every GPU op.
#include "runtime_impl.hpp"

namespace ordo::gpu {

detail::PlanPtr Runtime::operator_plan(VarSpan reads, VarSpan writes, const OpAttrs& attrs) {
  detail::PlanPtr plan(new OpPlan);
  fill_plan(*plan, reads, writes, attrs);
  if (plan->name != nullptr) {
    plan->owned_name = plan->name;  // the caller's name may go before the operator
    plan->name = plan->owned_name.c_str();
  }
  return plan;
}

void Runtime::push(Operator op, Context ctx) {
  impl_->check_device(ctx);
  if (capturing()) [[unlikely]] {
    record_operator(op, ctx, nullptr);
    return;
  }
  engine_.push(op.op_, ctx);
}

void Runtime::push(Operator op, Context ctx, int priority) {
  impl_->check_device(ctx);
  if (capturing()) [[unlikely]] {
    record_operator(op, ctx, &priority);
    return;
  }
  engine_.push(op.op_, ctx, priority);
}

void Runtime::delete_operator(Operator op) {
  engine_.delete_operator(op.op_);
  std::lock_guard lock(impl_->operators_mutex);
  impl_->operators.erase(op.id_);  // graphs that captured a push of it keep its body
}

}  // namespace ordo::gpu

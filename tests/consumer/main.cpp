// A program outside the ordo tree, built against an installed ordo.
#include <ordo/ordo.hpp>

#include <cstdio>

int main() {
  ordo::Engine engine;
  ordo::Var v = engine.new_variable();
  int value = 0;
  for (int i = 0; i < 100; ++i) engine.push_sync([&value] { value += 1; }, ordo::Context::cpu(), {}, {v});
  engine.wait_for_var(v);
  std::printf("consumer: value=%d\n", value);
  return value == 100 ? 0 : 1;
}

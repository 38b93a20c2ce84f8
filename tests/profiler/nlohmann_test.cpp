// The Chrome trace read back by nlohmann/json (Debian's nlohmann-json3-dev), a
// widely used parser independent of the test's own: the document parses, and
// both parsers see the same events. Built only when the package is found.
#ifdef ORDO_HAVE_NLOHMANN_JSON
#include <nlohmann/json.hpp>

#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "coro/coro_test_util.hpp"
#include "ordo/profiler.hpp"
#include "profiler/json.hpp"

namespace ordo::test {
namespace {

TEST(ProfilerNlohmann, TraceParsesAndAgreesWithTheStrictParser) {
  Options o;
  o.kind = EngineKind::pooled;
  o.cpu_workers = 2;
  o.profile.enabled = true;
  Engine engine(o);
  Var a = engine.new_variable(), b = engine.new_variable();
  for (int i = 0; i < 50; ++i) {
    engine.push_sync([] {}, Context::cpu(), {a}, {b}, {.name = "a_to_b"});
    engine.push_sync([] {}, Context::cpu(), {b}, {a}, {.name = "b_to_a \"quoted\" \\ name"});
  }
  engine.wait_for_all();
  std::ostringstream out;
  engine.profiler().write_chrome_trace(out);

  const nlohmann::json doc = nlohmann::json::parse(out.str());  // throws on malformed JSON
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc.at("traceEvents").is_array());
  std::map<std::tuple<std::string, std::string>, int> seen_nlohmann;  // (ph, name) -> count
  int complete_ops = 0;
  for (const auto& ev : doc.at("traceEvents")) {
    ASSERT_TRUE(ev.is_object());
    ASSERT_TRUE(ev.at("ph").is_string());
    ASSERT_TRUE(ev.at("pid").is_number());
    ++seen_nlohmann[{ev.at("ph").get<std::string>(), ev.at("name").get<std::string>()}];
    if (ev.at("ph") == "X" && ev.contains("args") && ev.at("args").contains("id")) ++complete_ops;
  }
  EXPECT_EQ(complete_ops, 100 + 1) << "every op once, plus the wait_for_all slice";

  const json::Value mine = json::parse(out.str());
  std::map<std::tuple<std::string, std::string>, int> seen_mine;
  for (const json::Value& ev : mine["traceEvents"].array()) ++seen_mine[{ev["ph"].string(), ev["name"].string()}];
  EXPECT_EQ(seen_mine, seen_nlohmann);
  EXPECT_EQ((seen_nlohmann[{"X", "b_to_a \"quoted\" \\ name"}]), 50) << "escaped names round-trip";
}

}  // namespace
}  // namespace ordo::test
#endif

// Options::from_env: every ORDO_* variable of the core, each spelling, and a
// bad value's error naming the variable and the value (the parsing is
// ordo/detail/env.hpp's, shared with io::IoOptions::from_env). And the rule
// that engines never read the environment themselves.
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ordo/detail/env.hpp"
#include "test_util.hpp"

namespace ordo::test {
namespace {

const char* const kOn[] = {"1", "true", "TRUE", "True", "on", "ON", "yes", "Yes"};
const char* const kOff[] = {"0", "false", "FALSE", "off", "Off", "no", "NO"};

/// from_env(base) must throw Errc::invalid_argument naming `name` and `value`.
void expect_rejected(const char* name, const char* value, const Options& base = {}) {
  SCOPED_TRACE(std::string(name) + "='" + value + "'");
  ScopedEnv env(name, value);
  try {
    (void)Options::from_env(base);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    const std::string what = e.what();
    EXPECT_NE(what.find(std::string(name) + "='" + value + "'"), std::string::npos) << what;
  }
}

TEST(EnvParse, BooleanSpellings) {
  for (const char* s : kOn) EXPECT_EQ(detail::parse_bool(s), std::optional<bool>(true)) << s;
  for (const char* s : kOff) EXPECT_EQ(detail::parse_bool(s), std::optional<bool>(false)) << s;
  for (const char* s : {"", "2", "y", "n", "enable", "truee", " 1", "on "}) {
    EXPECT_EQ(detail::parse_bool(s), std::nullopt) << "'" << s << "'";
  }
}

// Regression (issue 31): ORDO_PROFILE=true used to mean "write the trace to a
// file named true". Every boolean spelling is a switch; on, the trace goes to
// the default file, so setting the variable always leaves a trace somewhere.
TEST(OptionsEnv, ProfileTakesEveryBooleanSpelling) {
  for (const char* s : kOn) {
    SCOPED_TRACE(s);
    ScopedEnv env("ORDO_PROFILE", s);
    const Options o = Options::from_env();
    EXPECT_TRUE(o.profile.enabled);
    EXPECT_EQ(o.profile.trace_path, ProfileOptions::kDefaultTracePath);
  }
  Options on;
  on.profile.enabled = true;
  for (const char* s : kOff) {
    SCOPED_TRACE(s);
    ScopedEnv env("ORDO_PROFILE", s);
    EXPECT_FALSE(Options::from_env(on).profile.enabled);
  }
}

TEST(OptionsEnv, ProfileOnKeepsATracePathTheProgramChose) {
  Options base;
  base.profile.trace_path = "mine.json";
  ScopedEnv env("ORDO_PROFILE", "on");
  const Options o = Options::from_env(base);
  EXPECT_TRUE(o.profile.enabled);
  EXPECT_EQ(o.profile.trace_path, "mine.json");
}

TEST(OptionsEnv, ProfileAnythingElseIsThePathOfTheTrace) {
  for (const char* path : {"/tmp/some trace.json", "trace.json", "./on", "2"}) {
    SCOPED_TRACE(path);
    ScopedEnv env("ORDO_PROFILE", path);
    const Options o = Options::from_env();
    EXPECT_TRUE(o.profile.enabled);
    EXPECT_EQ(o.profile.trace_path, path);
  }
  expect_rejected("ORDO_PROFILE", "");
}

TEST(OptionsEnv, EngineKind) {
  const std::pair<const char*, EngineKind> kinds[] = {{"naive", EngineKind::naive},
                                                      {"pooled", EngineKind::pooled},
                                                      {"per_device", EngineKind::per_device},
                                                      {"per-device", EngineKind::per_device}};
  for (const auto& [spelling, kind] : kinds) {
    ScopedEnv env("ORDO_ENGINE", spelling);
    EXPECT_EQ(Options::from_env(Options{.kind = EngineKind::naive}).kind, kind) << spelling;
  }
  expect_rejected("ORDO_ENGINE", "turbo");
  expect_rejected("ORDO_ENGINE", "");
}

TEST(OptionsEnv, EveryNumberVariable) {
  struct Number {
    const char* name;
    std::uint64_t (*get)(const Options&);
  };
  const Number numbers[] = {
      {"ORDO_CPU_WORKERS", [](const Options& o) -> std::uint64_t { return o.cpu_workers; }},
      {"ORDO_CPU_PRIORITY_WORKERS", [](const Options& o) -> std::uint64_t { return o.cpu_priority_workers; }},
      {"ORDO_IO_WORKERS", [](const Options& o) -> std::uint64_t { return o.io_workers; }},
      {"ORDO_MAX_IN_FLIGHT", [](const Options& o) -> std::uint64_t { return o.max_in_flight; }},
      {"ORDO_PROFILE_MAX_EVENTS", [](const Options& o) -> std::uint64_t { return o.profile.max_events; }},
  };
  for (const Number& n : numbers) {
    SCOPED_TRACE(n.name);
    {
      ScopedEnv env(n.name, "3");
      EXPECT_EQ(n.get(Options::from_env()), 3U);
      env.set("0");
      EXPECT_EQ(n.get(Options::from_env()), 0U);
    }
    EXPECT_EQ(n.get(Options::from_env()), n.get(Options{}));  // unset: base kept
    for (const char* bad : {"two", "-1", "3x", " 3", "+3", "", "99999999999999999999999"}) {
      expect_rejected(n.name, bad);
    }
  }
  expect_rejected("ORDO_CPU_WORKERS", "4294967296");  // past `unsigned`
}

TEST(OptionsEnv, UnsetVariablesLeaveTheBaseAlone) {
  for (const char* name : {"ORDO_ENGINE", "ORDO_CPU_WORKERS", "ORDO_CPU_PRIORITY_WORKERS", "ORDO_IO_WORKERS",
                           "ORDO_MAX_IN_FLIGHT", "ORDO_PROFILE", "ORDO_PROFILE_MAX_EVENTS"}) {
    ASSERT_EQ(std::getenv(name), nullptr) << name << " is set in the test's environment";
  }
  Options base{.kind = EngineKind::pooled, .cpu_workers = 3, .max_in_flight = 7};
  base.profile.enabled = true;
  base.profile.trace_path = "t.json";
  const Options o = Options::from_env(base);
  EXPECT_EQ(o.kind, EngineKind::pooled);
  EXPECT_EQ(o.cpu_workers, 3U);
  EXPECT_EQ(o.max_in_flight, 7U);
  EXPECT_TRUE(o.profile.enabled);
  EXPECT_EQ(o.profile.trace_path, "t.json");
}

// The whole path a user takes: ORDO_PROFILE=true, a program that builds its
// options with from_env, and a trace in ordo-trace.json, not in "true".
TEST(OptionsEnv, ProfileTrueWritesTheDefaultTraceFile) {
  namespace fs = std::filesystem;
  std::string dir_template = (fs::temp_directory_path() / "ordo_env_XXXXXX").string();
  ASSERT_NE(::mkdtemp(dir_template.data()), nullptr);
  const fs::path dir = dir_template;
  const fs::path before = fs::current_path();
  fs::current_path(dir);
  {
    ScopedEnv env("ORDO_PROFILE", "true");
    Engine engine(Options::from_env(Options{.cpu_workers = 1}));
    Var v = engine.new_variable();
    engine.push_sync([] {}, Context::cpu(), {}, {v}, {.name = "traced"});
    engine.wait_for_all();
  }
  fs::current_path(before);
  EXPECT_FALSE(fs::exists(dir / "true"));
  ASSERT_TRUE(fs::exists(dir / ProfileOptions::kDefaultTracePath));
  EXPECT_GT(fs::file_size(dir / ProfileOptions::kDefaultTracePath), 0U);
  fs::remove_all(dir);
}

// Engines never read the environment (docs/guide.md, "Environment
// variables"): Engine(Options{}) is the same whatever is set; a program opts
// in with Options::from_env().
TEST(OptionsEnv, EnginesNeverReadTheEnvironment) {
  ScopedEnv kind("ORDO_ENGINE", "naive");
  ScopedEnv workers("ORDO_CPU_WORKERS", "1");
  ScopedEnv window("ORDO_MAX_IN_FLIGHT", "7");
  ScopedEnv profile("ORDO_PROFILE", "1");
  Engine engine;
  EXPECT_EQ(engine.kind(), EngineKind::per_device);
  EXPECT_EQ(engine.options().max_in_flight, Options{}.max_in_flight);
  EXPECT_EQ(engine.options().cpu_workers, usable_cpus());  // 0 resolved, not 1
  EXPECT_FALSE(engine.options().profile.enabled);
  EXPECT_FALSE(engine.profiler().enabled());
}

// Under mpirun every rank reads the same ORDO_PROFILE: each gets a file of
// its own, named after its rank (scripts/merge_traces.py joins them).
TEST(Options, ProfilePathGetsTheMpiRank) {
  const ScopedEnv profile("ORDO_PROFILE", "out/trace.json");
  const ScopedEnv pmix("PMIX_RANK", nullptr);
  const ScopedEnv pmi("PMI_RANK", nullptr);
  {
    const ScopedEnv rank("OMPI_COMM_WORLD_RANK", nullptr);
    EXPECT_EQ(Options::from_env().profile.trace_path, "out/trace.json");
  }
  const ScopedEnv rank("OMPI_COMM_WORLD_RANK", "3");
  EXPECT_EQ(Options::from_env().profile.trace_path, "out/trace.rank3.json");
  const ScopedEnv no_ext("ORDO_PROFILE", "dir.d/trace");
  EXPECT_EQ(Options::from_env().profile.trace_path, "dir.d/trace.rank3");
  const ScopedEnv on("ORDO_PROFILE", "1");
  EXPECT_EQ(Options::from_env().profile.trace_path, "ordo-trace.rank3.json");
  const ScopedEnv off("ORDO_PROFILE", "0");
  EXPECT_FALSE(Options::from_env().profile.enabled);
}

}  // namespace
}  // namespace ordo::test

// ordo::io requests in the profiler's trace (docs/profiler.md): each request
// a slice on the io process, on a track named after its backend, an arrow
// from the op whose body submitted it and an arrow to the op its delivery
// finished or pushed; the summary's io rows. Read back with the strict JSON
// parser, on every backend of this build.
#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/test_util.hpp"
#include "io/io_test_util.hpp"
#include "ordo/coro.hpp"
#include "ordo/io.hpp"
#include "ordo/task.hpp"
#include "profiler/json.hpp"

namespace ordo::io {
namespace {

/// A file with `text` in it, removed with the object.
struct TempFile {
  std::string path;
  int fd = -1;
  explicit TempFile(const std::string& text) {
    char name[] = "/tmp/ordo-trace-XXXXXX";
    fd = ::mkstemp(name);
    path = name;
    EXPECT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  ~TempFile() {
    ::close(fd);
    ::unlink(path.c_str());
  }
};

struct Flow {
  const json::Value* s = nullptr;
  const json::Value* f = nullptr;
};

/// The X event enclosing time `ts` on track (pid, tid), innermost; null if none.
const json::Value* enclosing(const json::Array& events, double pid, double tid, double ts) {
  const json::Value* best = nullptr;
  for (const json::Value& ev : events) {
    if (ev["ph"].string() != "X" || ev["pid"].number() != pid || ev["tid"].number() != tid) continue;
    const double b = ev["ts"].number(), e = b + ev["dur"].number();
    if (ts + 1e-6 < b || ts > e + 1e-6) continue;
    if (best == nullptr || ev["dur"].number() < (*best)["dur"].number()) best = &ev;
  }
  return best;
}

class IoTrace : public ::testing::TestWithParam<Backend> {};

// Three requests, one per way to start one, each read back from the trace:
//  - push_read: the launcher op submits it; its delivery finishes that op
//    (OnComplete): arrows launch (op -> request) and completion (request -> op's end);
//  - then(callback) from an op's body: the callback is pushed by the delivery;
//  - co_await in a coroutine holding a lease: its resumption is pushed.
TEST_P(IoTrace, RequestsAreSlicesWithArrowsToTheirOps) {
  Options o;
  o.cpu_workers = 2;
  o.profile.enabled = true;
  Engine engine(o);
  const std::string text = "hello, trace";
  TempFile file(text);
  {
    Reactor io(engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}});
    // push_read
    std::array<std::byte, 5> a{};
    const Var va = engine.new_variable();
    io.push_read(va, file.fd, a, 0, {}, OpAttrs{.name = "read_op"});
    // then() from an op
    std::array<std::byte, 4> b{};
    ordo::test::Counter called;
    engine.push_sync(
        [&] {
          io.read(file.fd, b, 7).then([&](Result r) {
            EXPECT_EQ(r.value(), 4U);
            called.arrive();
          });
        },
        Context::cpu(), {}, {engine.new_variable()}, OpAttrs{.name = "submitter"});
    // co_await under a lease
    std::array<std::byte, 3> c{};
    const Var vc = engine.new_variable();
    sync_wait([&]() -> Task<void> {
      Lease lease = co_await push(engine, reads(), writes(vc), OpAttrs{.name = "lease"});
      EXPECT_EQ(co_await io.read(file.fd, c, 1), 3U);
    }());
    ASSERT_TRUE(called.wait_for(1));
    engine.wait_for_all();
  }
  std::ostringstream out;
  engine.profiler().write_chrome_trace(out);
  const json::Value doc = json::parse(out.str());
  const json::Array& events = doc["traceEvents"].array();
  const std::string backend = GetParam() == Backend::threads ? "threads" : "io_uring";

  // The io process and its tracks are named.
  bool process_named = false;
  std::map<double, std::string> track_names;
  for (const json::Value& ev : events) {
    if (ev["ph"].string() != "M" || ev["pid"].number() != 4) continue;
    if (ev["name"].string() == "process_name") process_named = true;
    if (ev["name"].string() == "thread_name") track_names[ev["tid"].number()] = ev["args"]["name"].string();
  }
  EXPECT_TRUE(process_named);

  // Three read slices, each on a track named after the backend.
  std::map<double, const json::Value*> slices;  // by args.slice
  std::map<double, const json::Value*> ops;     // by args.id
  std::map<double, Flow> flows;
  for (const json::Value& ev : events) {
    const std::string& ph = ev["ph"].string();
    if (ph == "X" && ev["pid"].number() == 4) {
      EXPECT_EQ(ev["cat"].string(), "io");
      EXPECT_EQ(ev["args"]["track"].string(), backend);
      EXPECT_EQ(track_names[ev["tid"].number()].rfind(backend, 0), 0U) << track_names[ev["tid"].number()];
      slices[ev["args"]["slice"].number()] = &ev;
    } else if (ph == "X" && ev["args"].has("id")) {
      ops[ev["args"]["id"].number()] = &ev;
    } else if (ph == "s") {
      flows[ev["id"].number()].s = &ev;
    } else if (ph == "f") {
      flows[ev["id"].number()].f = &ev;
    }
  }
  ASSERT_EQ(slices.size(), 3U);
  std::map<double, std::string> launched_by_name;  // bytes -> the launching op's name
  for (const auto& [id, ev] : slices) {
    const json::Value& args = (*ev)["args"];
    EXPECT_EQ((*ev)["name"].string(), "read");
    EXPECT_EQ(args["result"].number(), args["bytes"].number()) << "each read got what it asked for";
    ASSERT_NE(args["launched_by"].number(), 0) << "slice " << id << " of " << args["bytes"].number() << " bytes";
    launched_by_name[args["bytes"].number()] = (*ops.at(args["launched_by"].number()))["name"].string();
  }
  EXPECT_EQ(launched_by_name, (std::map<double, std::string>{{5, "read_op"}, {4, "submitter"}, {3, "lease"}}));

  // Every flow has both ends; the io ones bind to the right slices.
  int launches = 0, completions = 0;
  std::map<double, std::string> released_name;  // bytes -> what its completion released
  for (const auto& [id, fl] : flows) {
    ASSERT_NE(fl.s, nullptr) << "flow " << id;
    ASSERT_NE(fl.f, nullptr) << "flow " << id;
    const std::string& cat = (*fl.s)["cat"].string();
    EXPECT_EQ((*fl.f)["cat"].string(), cat);
    const json::Value* from = enclosing(events, (*fl.s)["pid"].number(), (*fl.s)["tid"].number(), (*fl.s)["ts"].number());
    const json::Value* to = enclosing(events, (*fl.f)["pid"].number(), (*fl.f)["tid"].number(), (*fl.f)["ts"].number());
    ASSERT_NE(from, nullptr) << cat << " flow " << id << " starts outside any slice";
    ASSERT_NE(to, nullptr) << cat << " flow " << id << " ends outside any slice";
    if (cat == "launch") {
      ++launches;
      EXPECT_EQ((*to)["pid"].number(), 4);
      EXPECT_EQ((*to)["args"]["slice"].number(), (*fl.s)["args"]["slice"].number());
    } else if (cat == "completion") {
      ++completions;
      EXPECT_EQ((*from)["pid"].number(), 4);
      EXPECT_EQ((*from)["args"]["slice"].number(), (*fl.s)["args"]["slice"].number());
      const json::Value& op = *ops.at((*fl.f)["args"]["op"].number());
      released_name[(*from)["args"]["bytes"].number()] =
          op["name"].string() + "@" + (*fl.f)["args"]["at"].string();
    }
  }
  EXPECT_EQ(launches, 3);
  // push_read's op finished by its delivery; the callback and the
  // coroutine's resumption pushed by theirs (posts, unnamed).
  ASSERT_EQ(completions, 3) << ::testing::PrintToString(released_name);
  EXPECT_EQ(released_name[5], "read_op@end");
  EXPECT_EQ(released_name[4].substr(released_name[4].find('@')), "@push");
  EXPECT_EQ(released_name[3].substr(released_name[3].find('@')), "@push");

  // The summary's io row.
  const ProfileSummary s = engine.profiler().summary();
  ASSERT_EQ(s.slices.size(), 1U);
  EXPECT_EQ(s.slices[0].category, "io");
  EXPECT_EQ(s.slices[0].name, "read");
  EXPECT_EQ(s.slices[0].count, 3U);
  EXPECT_EQ(s.slices[0].bytes, 12U);
  EXPECT_EQ(s.slices[0].failed, 0U);
  EXPECT_LE(s.slices[0].p50_ns, s.slices[0].p99_ns);
  EXPECT_LE(s.slices[0].p99_ns, s.slices[0].max_ns);
  EXPECT_NE(s.table().find("read"), std::string::npos);
}

// A read whose data an op then consumes: the critical path goes through the
// request (the launcher op waited for it), and the DOT graph draws it.
TEST_P(IoTrace, CriticalPathGoesThroughTheRequest) {
  Options o;
  o.cpu_workers = 2;
  o.profile.enabled = true;
  Engine engine(o);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::array<std::byte, 10> buf{};
  {
    Reactor io(engine, IoOptions{.backend = GetParam(), .log = [](std::string_view) {}});
    const Var v = engine.new_variable();
    // An empty pipe: the read waits until the data comes, after the consumer is queued behind it.
    io.push_read(v, p[0], buf, Reactor::kCurrent, {}, OpAttrs{.name = "load"});
    engine.push_sync([&] { EXPECT_EQ(buf[9], std::byte{'9'}); }, Context::cpu(), {v}, {}, OpAttrs{.name = "consume"});
    ASSERT_EQ(::write(p[1], "0123456789", 10), 10);
    engine.wait_for_all();
  }
  ::close(p[0]);
  ::close(p[1]);
  const CriticalPath cp = engine.profiler().summary().critical_path;
  std::vector<std::string> steps;
  for (const CriticalStep& st : cp.steps) steps.push_back(st.kind + ":" + st.name);
  EXPECT_EQ(steps, (std::vector<std::string>{"io:read", "op:load", "op:consume"}));
  EXPECT_LE(cp.length_ns, cp.wall_ns);
  std::ostringstream dot;
  engine.profiler().write_dot(dot);
  EXPECT_NE(dot.str().find("[shape=note, label=\"io read #1\\n"), std::string::npos) << dot.str();
  EXPECT_NE(dot.str().find("  s1 -> n1 [penwidth=3"), std::string::npos) << dot.str();
  EXPECT_NE(engine.profiler().summary().table().find("critical path: 3 step(s)"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, IoTrace, ::testing::ValuesIn(backends()), backend_name);

}  // namespace
}  // namespace ordo::io

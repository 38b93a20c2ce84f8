// tests/gpu/gpu_trace_check.hpp - GPU work in the engine's trace, read back
// from the JSON (docs/profiler.md): a small loader program that runs on any
// backend, and the reader that checks its trace. trace_test.cpp runs both on
// the simulated backend; cuda_trace_test.cpp on a device (scripts/gpu_check.sh).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/test_util.hpp"
#include "gpu/gpu_test_util.hpp"
#include "ordo/profiler.hpp"
#include "profiler/json.hpp"

namespace ordo::test {

/// The loader, per device and round: "upload" (h2d copy stream: waits at
/// a gate, then copies `floats` floats to the device), "scale" (a compute
/// stream: a host task standing for a kernel), "download" (d2h: copies them
/// back), "consume" (a CPU op reading the copy: held by download's fence).
/// The gate holds the device's work back, instead of timing it, until every
/// consume is held, so each of those steps waits for the one before it on
/// the device. Returns the consumes that saw their data intact.
inline int run_gpu_loader(Engine& engine, gpu::Runtime& rt, int devices, int rounds, std::size_t floats) {
  struct Round {
    gpu::Buffer in, dev, out;
    Var v_in, v_dev, v_out;
  };
  std::vector<Round> rs;
  for (int d = 0; d < devices; ++d) {
    for (int r = 0; r < rounds; ++r) {
      Round x{rt.alloc_host(floats * sizeof(float)), rt.alloc_device(d, floats * sizeof(float)),
              rt.alloc_host(floats * sizeof(float)), engine.new_variable(), engine.new_variable(),
              engine.new_variable()};
      std::iota(x.in.as<float>(), x.in.as<float>() + floats, static_cast<float>(d * 1000 + r));
      rs.push_back(x);
    }
  }
  Gate gate;
  std::atomic<int> intact{0};
  std::atomic<int> kernels{0};
  const std::size_t bytes = floats * sizeof(float);
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const Round& x = rs[i];
    const Context ctx = Context::gpu(static_cast<int>(i) / rounds);
    rt.push(
        [&gate, x, bytes](const gpu::Stream& s) {
          s.host_task([&gate] { (void)gate.wait(); });  // bounded: a lost open fails the checks, not the run
          s.copy(x.dev.data(), x.in.data(), bytes);
        },
        ctx, {x.v_in}, {x.v_dev}, {.prop = FnProperty::copy_to_device, .name = "upload"});
    rt.push([&kernels](const gpu::Stream& s) { s.host_task([&kernels] { kernels.fetch_add(1); }); }, ctx, {},
            {x.v_dev}, {.name = "scale"});
    rt.push([x, bytes](const gpu::Stream& s) { s.copy(x.out.data(), x.dev.data(), bytes); }, ctx, {x.v_dev},
            {x.v_out}, {.prop = FnProperty::copy_from_device, .name = "download"});
    engine.push_sync(
        [&intact, x, floats] {
          if (std::equal(x.in.as<float>(), x.in.as<float>() + floats, x.out.as<float>())) intact.fetch_add(1);
        },
        Context::cpu(), {x.v_out}, {}, {.name = "consume"});
  }
  // Every consume held by its download's fence, then the device may go on.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (rt.stats().held_ops < rs.size() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_GE(rt.stats().held_ops, rs.size()) << "the consumes were not held by their downloads' fences";
  gate.open();
  engine.wait_for_all();
  EXPECT_EQ(kernels.load(), static_cast<int>(rs.size()));
  for (const Round& x : rs) {
    rt.free(x.in);
    rt.free(x.dev);
    rt.free(x.out);
  }
  return intact.load();
}

/// What check_gpu_trace expects of a run_gpu_loader trace.
struct GpuTraceExpect {
  int devices = 1;
  int rounds = 1;
  std::size_t bytes = 0;    ///< per copy
  /// One thread enqueues on each stream (the per-device engine): slices of
  /// a stream never overlap.
  bool exclusive_streams = false;
  /// How far device times may stray from host times (CUDA: the anchor's
  /// error), in microseconds.
  double tolerance_us = 0;
};

/// Reads the trace back and checks its GPU tracks, slices and arrows.
inline void check_gpu_trace(const std::string& text, const GpuTraceExpect& want) {
  constexpr double kGpuPid = 5;
  const json::Value doc = json::parse(text);
  const json::Array& events = doc["traceEvents"].array();
  const double tol = want.tolerance_us + 1e-6;
  auto end_of = [](const json::Value& ev) { return ev["ts"].number() + ev["dur"].number(); };

  // The process and its tracks: one per device and stream, named so.
  bool process_named = false;
  std::map<double, std::string> tracks;  // tid -> name
  for (const json::Value& ev : events) {
    if (ev["ph"].string() != "M" || ev["pid"].number() != kGpuPid) continue;
    if (ev["name"].string() == "process_name") process_named = true;
    if (ev["name"].string() == "thread_name") tracks[ev["tid"].number()] = ev["args"]["name"].string();
  }
  EXPECT_TRUE(process_named);
  const std::regex track_re("gpu([0-9]+) (compute [0-9]+|copy h2d|copy d2h)( #[0-9]+)?");
  std::set<std::string> devices_seen;
  for (const auto& [tid, name] : tracks) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(name, m, track_re)) << "track '" << name << "'";
    devices_seen.insert(m[1]);
    if (want.exclusive_streams) {
      EXPECT_FALSE(m[3].matched) << "slices overlap on " << name;
    }
  }
  EXPECT_EQ(devices_seen.size(), static_cast<std::size_t>(want.devices));

  // Slices, ops and flows.
  struct Flow {
    const json::Value* s = nullptr;
    const json::Value* f = nullptr;
  };
  std::map<double, const json::Value*> slices;  // by args.slice
  std::map<double, const json::Value*> ops;     // by args.id
  std::map<double, Flow> flows;
  std::map<std::string, int> op_count;
  for (const json::Value& ev : events) {
    const std::string& ph = ev["ph"].string();
    if (ph == "X" && ev["pid"].number() == kGpuPid) {
      slices[ev["args"]["slice"].number()] = &ev;
    } else if (ph == "X" && ev["args"].has("id")) {
      ops[ev["args"]["id"].number()] = &ev;
      ++op_count[ev["name"].string()];
    } else if (ph == "s") {
      flows[ev["id"].number()].s = &ev;
    } else if (ph == "f") {
      flows[ev["id"].number()].f = &ev;
    }
  }
  const int n = want.devices * want.rounds;
  const std::map<std::string, std::string> stream_of{
      {"upload", "copy h2d"}, {"scale", "compute"}, {"download", "copy d2h"}};
  std::map<std::string, int> slice_count;
  for (const auto& [id, ev] : slices) {
    const json::Value& a = (*ev)["args"];
    const std::string& name = (*ev)["name"].string();
    ++slice_count[name];
    EXPECT_EQ((*ev)["cat"].string(), "gpu");
    ASSERT_EQ(stream_of.count(name), 1U) << "a gpu slice of an unknown op: " << name;
    EXPECT_NE(a["track"].string().find(stream_of.at(name)), std::string::npos) << name << " on " << a["track"].string();
    EXPECT_EQ(tracks[(*ev)["tid"].number()].rfind(a["track"].string(), 0), 0U);
    EXPECT_GE((*ev)["dur"].number(), 0);
    EXPECT_EQ(a["result"].number(), 0) << name;
    EXPECT_EQ(a["bytes"].number(), name == "scale" ? 0 : static_cast<double>(want.bytes)) << name;
    // Launched by its op, after that op started.
    ASSERT_EQ(ops.count(a["launched_by"].number()), 1U) << name << " slice " << id << " has no launching op";
    const json::Value& op = *ops.at(a["launched_by"].number());
    EXPECT_EQ(op["name"].string(), name);
    EXPECT_GE((*ev)["ts"].number() + tol, op["args"]["start_us"].number()) << name << " began before its op";
  }
  for (const char* name : {"upload", "scale", "download"}) {
    EXPECT_EQ(slice_count[name], n) << "one slice per " << name;
    EXPECT_EQ(op_count[name], n) << name;
  }
  if (want.exclusive_streams) {
    std::map<double, double> last_end;  // per tid
    for (const auto& [id, ev] : slices) {  // by begin time
      const double tid = (*ev)["tid"].number();
      if (last_end.count(tid) != 0) {
        EXPECT_GE((*ev)["ts"].number() + tol, last_end[tid]) << "stream order";
      }
      last_end[tid] = end_of(*ev);
    }
  }

  // Arrows: launch (op -> its slice), stream_wait (the slice a stream
  // waited for -> the slice after it), fence (download -> consume).
  std::map<double, int> launches;                       // per slice
  std::map<std::string, std::set<double>> waited_by;    // "upload->scale" -> the later slices
  std::set<double> fenced;                              // consume ops
  for (const auto& [id, fl] : flows) {
    ASSERT_NE(fl.s, nullptr) << "flow " << id;
    ASSERT_NE(fl.f, nullptr) << "flow " << id;
    const std::string& cat = (*fl.s)["cat"].string();
    const json::Value& args = (*fl.s)["args"];
    if (cat == "launch" && args.has("slice") && slices.count(args["slice"].number()) != 0) {
      ++launches[args["slice"].number()];
      EXPECT_EQ((*fl.f)["pid"].number(), kGpuPid);
    } else if (cat == "stream_wait") {
      const json::Value& before = *slices.at(args["before"].number());
      const json::Value& after = *slices.at(args["after"].number());
      EXPECT_NE(before["tid"].number(), after["tid"].number()) << "a wait within one stream";
      EXPECT_GE(after["ts"].number() + tol, end_of(before)) << "began before the work it waited for ended";
      waited_by[before["name"].string() + "->" + after["name"].string()].insert(args["after"].number());
    } else if (cat == "fence") {
      const json::Value& from = *slices.at(args["slice"].number());
      const json::Value& op = *ops.at(args["op"].number());
      EXPECT_EQ(from["name"].string(), "download");
      EXPECT_EQ(op["name"].string(), "consume");
      EXPECT_EQ(args["at"].string(), "start");
      EXPECT_EQ((*fl.f)["ts"].number(), op["ts"].number()) << "a fence arrow ends at the op's start";
      EXPECT_GE(op["args"]["start_us"].number() + tol, end_of(from)) << "released before the work ended";
      fenced.insert(args["op"].number());
    }
  }
  for (const auto& [id, ev] : slices) EXPECT_EQ(launches[id], 1) << (*ev)["name"].string() << " slice " << id;
  EXPECT_EQ(waited_by["upload->scale"].size(), static_cast<std::size_t>(n));
  EXPECT_EQ(waited_by["scale->download"].size(), static_cast<std::size_t>(n));
  EXPECT_EQ(fenced.size(), static_cast<std::size_t>(n));
}

}  // namespace ordo::test

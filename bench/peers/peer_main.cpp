// bench/peers/peer_main.cpp - main() of every peer executable (see peer_main.hpp).
#include "peer_main.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string_view>
#include <vector>

namespace ob = ordo_bench;

namespace {

[[noreturn]] void usage(const char* prog, const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s --workload W --ops N [--runs R] [--spin S] [--workers N] [--reference DIGEST] [--label L] "
               "[--time-build | --warm]\n",
               prog, why.c_str(), prog);
  std::exit(2);
}

ob::peer::Args parse(int argc, char** argv) {
  ob::peer::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0], std::string(flag) + " needs a value");
      return argv[++i];
    };
    try {
      if (flag == "--workload") {
        a.workload = value();
      } else if (flag == "--ops") {
        a.ops = std::stoull(value());
      } else if (flag == "--runs") {
        a.runs = std::stoi(value());
      } else if (flag == "--spin") {
        a.spin_iters = static_cast<std::uint32_t>(std::stoul(value()));
      } else if (flag == "--workers") {
        a.workers = static_cast<unsigned>(std::stoul(value()));
      } else if (flag == "--reference") {
        a.reference = std::stoull(value());
      } else if (flag == "--label") {
        a.label = value();
      } else if (flag == "--progress") {
        a.progress = value();
      } else if (flag == "--of") {
        a.of = value();
      } else if (flag == "--t0") {
        a.t0 = std::stod(value());
      } else if (flag == "--time-build") {
        a.time_build = true;
      } else if (flag == "--warm") {
        a.warm = true;
      } else {
        usage(argv[0], "unknown option " + std::string(flag));
      }
    } catch (const std::exception&) {
      usage(argv[0], "bad value for " + std::string(flag));
    }
  }
  if (!ob::is_workload_id(a.workload) || a.ops == 0 || a.runs < 1) usage(argv[0], "need --workload and --ops");
  if (a.label.empty()) a.label = a.workload;
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const ob::peer::Args args = parse(argc, argv);
  const bool tty = isatty(STDERR_FILENO) == 1;
  ob::Measurement m;
  try {
    const ob::Trace trace = ob::make_trace(args.workload, args.ops, args.spin_iters);
    m.ops = trace.ops();
    m.workers = ob::peer::init(args);
    bool consistent = true;
    std::vector<double> untimed;
    for (int r = 1; r <= args.runs; ++r) {
      if (tty) {  // the status line of ordo_workloads (figure.hpp's Progress), or a plain one
        if (!args.progress.empty() && args.t0 >= 0) {
          const double now =
              std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
          const std::string run = args.of.empty() ? std::to_string(r) + "/" + std::to_string(args.runs) : args.of;
          std::fprintf(stderr, "\r\033[K[%s, %.1f s] %s: run %s", args.progress.c_str(), now - args.t0,
                       args.label.c_str(), run.c_str());
        } else {
          std::fprintf(stderr, "\r\033[K%s: run %d/%d", args.label.c_str(), r, args.runs);
        }
        std::fflush(stderr);
      }
      std::vector<std::uint64_t> slots = ob::initial_slots(trace.num_vars);
      const ob::peer::Run res = ob::peer::run(trace, slots.data(), args);
      const std::uint64_t d = ob::digest(slots);
      if (r == 1) m.digest = d;
      consistent = consistent && d == m.digest && (!args.reference || d == *args.reference);
      m.seconds.push_back(res.seconds);
      untimed.push_back(res.untimed_seconds);
    }
    m.untimed_seconds = ob::median(untimed);
    m.ok = consistent;
    if (!m.ok) {
      m.error = "digest_mismatch";
      std::fprintf(stderr, "\n%s: RESULT DIFFERS FROM THE SERIAL LOOP (digest %llu, serial %llu)\n",
                   args.label.c_str(), static_cast<unsigned long long>(m.digest),
                   static_cast<unsigned long long>(args.reference.value_or(0)));
    }
    ob::peer::shutdown();
  } catch (const std::exception& e) {
    m.ok = false;
    m.error = std::string("exception:") + e.what();
  }
  const std::string line = ob::serialize(m);
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
  return 0;
}

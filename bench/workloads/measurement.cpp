// bench/workloads/measurement.cpp - Measurement <-> one line of text.
#include "measurement.hpp"

#include <algorithm>
#include <exception>
#include <sstream>
#include <string_view>

namespace ordo_bench {

namespace {

std::vector<std::string> split_commas(std::string_view s) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start <= s.size();) {
    const auto comma = std::min(s.find(',', start), s.size());
    if (comma > start) out.emplace_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string no_spaces(std::string s) {
  for (char& ch : s) {
    if (ch == ' ' || ch == '\n' || ch == '\t') ch = '_';
  }
  return s.empty() ? "-" : s;
}

}  // namespace

std::string serialize(const Measurement& m) {
  std::ostringstream out;
  out.precision(17);
  out << "ops=" << m.ops << " digest=" << m.digest << " ok=" << m.ok << " workers=" << m.workers
      << " newvar=" << m.new_variable_ns << " untimed=" << m.untimed_seconds << " error=" << no_spaces(m.error)
      << " split=";
  for (std::size_t i = 0; i < m.split_seconds.size(); ++i) out << (i ? "," : "") << m.split_seconds[i];
  if (m.split_seconds.empty()) out << "-";
  out << " secs=";
  for (std::size_t i = 0; i < m.seconds.size(); ++i) out << (i ? "," : "") << m.seconds[i];
  out << "\n";
  return out.str();
}

bool deserialize(const std::string& line, Measurement& m) try {
  std::istringstream in(line);
  bool complete = false;
  for (std::string field; in >> field;) {
    const auto eq = field.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = field.substr(0, eq);
    const std::string value = field.substr(eq + 1);
    if (key == "ops") m.ops = std::stoull(value);
    if (key == "digest") m.digest = std::stoull(value);
    if (key == "ok") m.ok = value == "1";
    if (key == "workers") m.workers = static_cast<unsigned>(std::stoul(value));
    if (key == "newvar") m.new_variable_ns = std::stod(value);
    if (key == "untimed") m.untimed_seconds = std::stod(value);
    if (key == "error") m.error = value == "-" ? "" : value;
    if (key == "split" && value != "-") {
      for (const auto& s : split_commas(value)) m.split_seconds.push_back(std::stod(s));
    }
    if (key == "secs") {
      for (const auto& s : split_commas(value)) m.seconds.push_back(std::stod(s));
      complete = true;
    }
  }
  return complete;
} catch (const std::exception&) {  // a garbled answer (std::stoull and friends)
  return false;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace ordo_bench

// bench/workloads/metg_svg.cpp - the METG curves as a hand-written SVG
// (no plotting dependency): efficiency against busy work per op on a log
// axis, one polyline per engine x pattern (colour: engine, dash: pattern),
// the 50% line, each curve's METG marked on it, and a legend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "metg.hpp"

namespace ordo_bench {

namespace {

constexpr double kWidth = 900, kHeight = 520;
constexpr double kLeft = 70, kRight = 620, kTop = 64, kBottom = 460;  // the plot area
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
constexpr const char* kDashes[] = {"", "8,4", "2,3", "10,3,2,3", "1,2"};

std::string num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

template <class C>
std::size_t index_of(const C& names, const std::string& name) {
  std::size_t i = 0;
  for (const auto& n : names) {
    if (n == name) return i;
    ++i;
  }
  return i;
}

}  // namespace

void write_metg_svg(const std::string& path, const std::vector<MetgCurve>& curves, const MetgConfig& cfg,
                    const std::string& caption) {
  // Axes: log10 of the busy work across the swept range; efficiency from 0 to
  // at least 100% (a little above when a point is: calibration noise).
  double lx0 = std::log10(cfg.lo_us), lx1 = std::log10(cfg.hi_us);
  if (lx1 - lx0 < 1e-9) {
    lx0 -= 0.5;
    lx1 += 0.5;
  }
  double ymax = 1.0;
  for (const MetgCurve& c : curves) {
    for (const MetgPoint& p : c.points) ymax = std::max(ymax, std::min(1.5, std::ceil(p.efficiency * 10) / 10));
  }
  auto X = [&](double us) { return kLeft + (std::log10(us) - lx0) / (lx1 - lx0) * (kRight - kLeft); };
  auto Y = [&](double eff) { return kBottom - std::clamp(eff, 0.0, ymax) / ymax * (kBottom - kTop); };

  std::vector<std::string> engines, patterns;
  for (const EngineSpec* e : cfg.engines) engines.push_back(e->name);
  patterns = cfg.patterns;

  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kLeft << "\" y=\"24\" font-size=\"15\" font-weight=\"bold\">METG: parallel efficiency "
       "against busy work per op</text>\n"
    << "<text x=\"" << kLeft << "\" y=\"44\" font-size=\"11\" fill=\"#444\">" << escape(caption) << "</text>\n";

  // Grid: a line per decade and per 10% (labelled every 20%).
  for (int d = static_cast<int>(std::ceil(lx0 - 1e-9)); d <= static_cast<int>(std::floor(lx1 + 1e-9)); ++d) {
    const double x = X(std::pow(10.0, d));
    char label[32];
    std::snprintf(label, sizeof label, "%g", std::pow(10.0, d));
    s << "<line x1=\"" << num(x) << "\" y1=\"" << kTop << "\" x2=\"" << num(x) << "\" y2=\"" << kBottom
      << "\" stroke=\"#ddd\"/>\n<text x=\"" << num(x) << "\" y=\"" << kBottom + 18
      << "\" text-anchor=\"middle\">" << label << "</text>\n";
  }
  for (int k = 0; k <= static_cast<int>(std::lround(ymax * 10)); ++k) {
    const double y = Y(k / 10.0);
    s << "<line x1=\"" << kLeft << "\" y1=\"" << num(y) << "\" x2=\"" << kRight << "\" y2=\"" << num(y)
      << "\" stroke=\"#eee\"/>\n";
    if (k % 2 == 0) {
      s << "<text x=\"" << kLeft - 6 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">" << k * 10
        << "%</text>\n";
    }
  }
  s << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kRight - kLeft << "\" height=\""
    << kBottom - kTop << "\" fill=\"none\" stroke=\"#333\"/>\n"
    << "<text x=\"" << (kLeft + kRight) / 2 << "\" y=\"" << kBottom + 40
    << "\" text-anchor=\"middle\">busy work per op (microseconds, log scale)</text>\n"
    << "<text transform=\"translate(18," << (kTop + kBottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">efficiency = ops x work / (workers x wall time)</text>\n";

  // The 50% line.
  s << "<line x1=\"" << kLeft << "\" y1=\"" << num(Y(0.5)) << "\" x2=\"" << kRight << "\" y2=\"" << num(Y(0.5))
    << "\" stroke=\"#d62728\" stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>\n"
    << "<text x=\"" << kRight - 4 << "\" y=\"" << num(Y(0.5) - 5)
    << "\" text-anchor=\"end\" fill=\"#d62728\">50%</text>\n";

  // The curves (verified points only), their METG marked on the 50% line.
  double legend_y = kTop + 8;
  for (const MetgCurve& c : curves) {
    const char* colour = kColours[index_of(engines, c.engine) % std::size(kColours)];
    const char* dash = kDashes[index_of(patterns, c.pattern) % std::size(kDashes)];
    const std::string style = std::string("fill=\"none\" stroke=\"") + colour + "\" stroke-width=\"2\"" +
                              (*dash != 0 ? std::string(" stroke-dasharray=\"") + dash + "\"" : std::string());
    s << "<polyline " << style << " points=\"";
    for (const MetgPoint& p : c.points) {
      if (p.ok) s << num(X(p.us)) << ',' << num(Y(p.efficiency)) << ' ';
    }
    s << "\"/>\n";
    for (const MetgPoint& p : c.points) {
      if (p.ok) {
        s << "<circle cx=\"" << num(X(p.us)) << "\" cy=\"" << num(Y(p.efficiency)) << "\" r=\"2.5\" fill=\"" << colour
          << "\"/>\n";
      }
    }
    const MetgValue v = metg_of(c);
    std::string label = c.engine + " " + c.pattern + ": METG ";
    char value[48];
    if (v.above_range) {
      std::snprintf(value, sizeof value, v.us >= 100 ? "> %.0f us" : "> %.3g us", v.us);
    } else if (v.below_range) {
      std::snprintf(value, sizeof value, "< %.3g us", v.us);
    } else {
      std::snprintf(value, sizeof value, "%.3g us", v.us);
      s << "<circle cx=\"" << num(X(v.us)) << "\" cy=\"" << num(Y(0.5)) << "\" r=\"4.5\" fill=\"white\" stroke=\""
        << colour << "\" stroke-width=\"2\"/>\n";
    }
    label += value;
    s << "<line x1=\"" << kRight + 16 << "\" y1=\"" << num(legend_y) << "\" x2=\"" << kRight + 50 << "\" y2=\""
      << num(legend_y) << "\" " << style << "/>\n<text x=\"" << kRight + 56 << "\" y=\"" << num(legend_y + 4)
      << "\">" << escape(label) << "</text>\n";
    legend_y += 20;
  }
  s << "</svg>\n";

  std::ofstream out(path, std::ios::trunc);
  out << s.str();
  out.close();
  if (!out) throw std::runtime_error("cannot write " + path);
}

}  // namespace ordo_bench

// `klab report`: the HTML page (klab/report_html.hpp). Everything on the page is made
// here as text: inline CSS, a few lines of JS (sorting the tables), and inline SVG charts.
#include "klab/report_html.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "klab/error.hpp"
#include "klab/report.hpp"

namespace klab {

namespace {

using nlohmann::json;

// ---- reading and checking -------------------------------------------------------------

std::string shorten_json_error(std::string what) {
  // "[json.exception.parse_error.101] parse error at line 1, ..." -> "parse error at line 1, ..."
  if (!what.empty() && what[0] == '[') {
    const auto close = what.find("] ");
    if (close != std::string::npos) what = what.substr(close + 2);
  }
  std::replace(what.begin(), what.end(), '\n', ' ');
  return what;
}

void need(bool ok, const std::string& path, const std::string& where, const std::string& what, bool hint = true) {
  if (!ok)
    throw UsageError(fmt::format("{}: {}{}{}", path, where.empty() ? "" : where + ": ", what,
                                 hint ? " (expected the output of `klab bench --json`)" : ""));
}

double num(const json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_number() ? it->get<double>() : 0.0;
}

std::string str(const json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag(const json& r, const char* key) {
  const auto it = r.find(key);
  return it != r.end() && it->is_boolean() && it->get<bool>();
}

// ---- records as the page sees them ------------------------------------------------------

struct Rec {
  std::string lesson, op, impl, kind, status, message, peak, baseline, problem, events;
  double median = 0, min = 0, max = 0, gbps = 0, tflops = 0, pct = 0, speedup = 0;
  long long reps = 0;
  bool graph = false, throttled = false;
  bool measured() const { return status != "unsupported" && median > 0; }
  bool vendor() const { return kind == "vendor"; }
};

Rec to_rec(const json& r) {
  Rec x;
  x.lesson = str(r, "lesson");
  x.op = str(r, "op");
  x.impl = str(r, "impl");
  x.kind = str(r, "kind");
  x.status = str(r, "status");
  x.message = str(r, "message");
  x.peak = str(r, "peak");
  x.baseline = str(r, "baseline");
  x.median = num(r, "median_ms");
  x.min = num(r, "min_ms");
  x.max = num(r, "max_ms");
  x.gbps = num(r, "gbps");
  x.tflops = num(r, "tflops");
  x.pct = num(r, "pct_peak");
  x.speedup = num(r, "speedup");
  x.reps = static_cast<long long>(num(r, "reps"));
  x.graph = flag(r, "graph");
  const json& p = r.at("problem");
  std::string shape;
  for (const auto& d : p.at("shape")) shape += (shape.empty() ? "" : "x") + std::to_string(d.get<long long>());
  x.problem = shape + " " + str(p, "dtype");
  if (!str(p, "variant").empty()) x.problem += " " + str(p, "variant");
  if (x.graph) x.problem += " [CUDA graph]";
  if (const auto t = r.find("telemetry"); t != r.end() && t->is_object()) {
    x.throttled = flag(*t, "throttled");
    if (const auto e = t->find("events"); e != t->end() && e->is_array())
      for (const auto& ev : *e)
        if (ev.is_string()) x.events += (x.events.empty() ? "" : ", ") + ev.get<std::string>();
  }
  return x;
}

// ---- small HTML and SVG helpers -----------------------------------------------------------

std::string esc(const std::string& s) { return html_escape(s); }

std::string pct_text(double p) { return p > 0 ? fmt::format("{:.1f}%", p) : "-"; }

std::string cut(const std::string& s, std::size_t n) { return s.size() <= n ? s : s.substr(0, n - 1) + "…"; }

// Numbers in SVG attributes: fixed, short, locale-free.
std::string f1(double v) { return fmt::format("{:.1f}", v); }

// "10 G", "1 T": a power of ten with an SI prefix (FLOP/s axis).
std::string si_decade(double v) {
  static const char* prefix[] = {"", "k", "M", "G", "T", "P", "E"};
  const int e = static_cast<int>(std::lround(std::log10(v)));
  if (e < 0 || e >= 21) return fmt::format("1e{}", e);
  return fmt::format("{} {}", e % 3 == 0 ? "1" : e % 3 == 1 ? "10" : "100", prefix[e / 3]);
}

std::string plain_decade(double v) {
  const int e = static_cast<int>(std::lround(std::log10(v)));
  if (e >= 0 && e <= 6) return fmt::format("{}", static_cast<long long>(std::llround(v)));
  if (e < 0 && e >= -4) return fmt::format("{:.{}f}", v, -e);
  return fmt::format("1e{}", e);
}

const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"};

// The version ladder of one op at one problem: a row per impl, a bar of its median time
// and a bar of its % of peak; vendor impls hatched, with a dashed line at their time.
std::string bar_chart(const std::vector<const Rec*>& rows, const std::string& title) {
  const double row_h = 24, top = 40, label_w = 200, t0 = 210, t_bar = 180, p0 = 520, p_bar = 160;
  const double h = top + row_h * static_cast<double>(rows.size()) + 12, w = 780;
  double tmax = 0, pmax = 100;
  std::string peak;
  for (const Rec* r : rows)
    if (r->measured()) {
      tmax = std::max(tmax, r->median);
      pmax = std::max(pmax, r->pct);
      if (peak.empty()) peak = r->peak;
    }
  std::string s = fmt::format(
      "<svg class=\"bar-chart\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n<title>{}</title>\n",
      f1(w), f1(h), esc(title), esc(title));
  s += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"16\">median time (shorter is faster)</text>\n", f1(t0));
  s += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"16\">% of peak{}</text>\n", f1(p0),
                   peak.empty() ? "" : " (" + esc(peak) + ")");
  s += fmt::format("<line class=\"pct-100\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>"
                   "<text class=\"tick\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">100%</text>\n",
                   f1(p0 + p_bar * 100 / pmax), f1(top - 6), f1(h - 6), f1(top - 9));
  double y = top;
  for (const Rec* r : rows) {
    std::string cls = "ladder-row";
    if (r->vendor()) cls += " vendor";
    if (r->throttled) cls += " throttled";
    const double cy = y + row_h / 2;
    std::string tip = r->impl + (r->vendor() ? " (vendor)" : "") + ": ";
    tip += r->measured() ? fmt_ms(r->median) + ", " + pct_text(r->pct) + " of peak" : r->status;
    if (r->throttled) tip += "; throttled (" + r->events + ")";
    s += fmt::format("<g class=\"{}\"><title>{}</title>\n", cls, esc(tip));
    s += fmt::format("<text class=\"impl\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}{}</text>\n", f1(label_w), f1(cy + 4),
                     esc(cut(r->impl, 28)), r->vendor() ? " <tspan class=\"tag\">vendor</tspan>" : "");
    if (!r->measured()) {
      const std::string what = r->status + (r->message.empty() ? "" : ": " + r->message);
      s += fmt::format("<text class=\"not-measured\" x=\"{}\" y=\"{}\">{}</text>\n", f1(t0), f1(cy + 4), esc(cut(what, 80)));
    } else {
      const double tw = std::max(1.0, t_bar * r->median / tmax), pw = std::max(0.0, p_bar * r->pct / pmax);
      const std::string bc = std::string(r->vendor() ? " vendor" : "") + (r->throttled ? " throttled" : "");
      s += fmt::format("<rect class=\"bar bar-time{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", bc, f1(t0),
                       f1(y + 4), f1(tw), f1(row_h - 8));
      s += fmt::format("<text class=\"value\" x=\"{}\" y=\"{}\">{}{}</text>\n", f1(t0 + tw + 4), f1(cy + 4),
                       esc(fmt_ms(r->median)), r->throttled ? " <tspan class=\"warn\">throttled</tspan>" : "");
      s += fmt::format("<rect class=\"bar bar-pct{}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", bc, f1(p0),
                       f1(y + 4), f1(pw), f1(row_h - 8));
      s += fmt::format("<text class=\"value\" x=\"{}\" y=\"{}\">{}</text>\n", f1(p0 + pw + 4), f1(cy + 4),
                       esc(pct_text(r->pct)));
    }
    s += "</g>\n";
    y += row_h;
  }
  // The vendor's time as a dashed line across the time bars: what the ladder climbs toward.
  for (const Rec* r : rows)
    if (r->vendor() && r->measured()) {
      const double x = t0 + std::max(1.0, t_bar * r->median / tmax);
      s += fmt::format("<line class=\"vendor-mark\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"><title>{3}</title></line>\n",
                       f1(x), f1(top - 4), f1(h - 6), esc(r->impl + " (vendor): " + fmt_ms(r->median)));
    }
  s += "</svg>\n";
  return s;
}

struct Roof {
  std::string cls, label;
  double flops;  // FLOP/s
};

// Arithmetic intensity (FLOP/byte, log x) against achieved FLOP/s (log y): a point per
// measured impl that does arithmetic; the bandwidth slope and the GEMM peaks as roofs.
std::string roofline(const std::vector<const Rec*>& recs, const json& peaks, const std::string& title,
                     std::vector<std::string>& left_out) {
  struct Pt { const Rec* r; double ai, flops; };
  std::vector<Pt> pts;
  std::set<std::string> no_flops, no_bytes;
  for (const Rec* r : recs) {
    if (!r->measured()) continue;
    if (r->tflops > 0 && r->gbps > 0) pts.push_back({r, r->tflops * 1e3 / r->gbps, r->tflops * 1e12});
    else (r->tflops > 0 ? no_bytes : no_flops).insert(r->op);
  }
  for (const auto& op : no_flops) left_out.push_back(op + " (it counts no FLOPs: intensity 0)");
  for (const auto& op : no_bytes)
    if (!no_flops.count(op)) left_out.push_back(op + " (no bytes recorded: intensity unknown)");
  if (pts.empty()) return "";
  const double bw = peaks.is_object() ? num(peaks, "copy_gbps") * 1e9 : 0;  // bytes/s
  std::vector<Roof> roofs;
  if (peaks.is_object()) {
    if (num(peaks, "bf16_tflops") > 0)
      roofs.push_back({"roof-tensor", fmt::format("tensor (cuBLAS bf16) {:.0f} TFLOP/s", num(peaks, "bf16_tflops")),
                       num(peaks, "bf16_tflops") * 1e12});
    if (num(peaks, "sgemm_tflops") > 0)
      roofs.push_back({"roof-fp32", fmt::format("fp32 (cuBLAS) {:.1f} TFLOP/s", num(peaks, "sgemm_tflops")),
                       num(peaks, "sgemm_tflops") * 1e12});
  }
  double xlo = 1e300, xhi = 0, ylo = 1e300, yhi = 0;
  for (const auto& p : pts) {
    xlo = std::min(xlo, p.ai), xhi = std::max(xhi, p.ai);
    ylo = std::min(ylo, p.flops), yhi = std::max(yhi, p.flops);
  }
  for (const auto& r : roofs) {
    yhi = std::max(yhi, r.flops);
    if (bw > 0) xlo = std::min(xlo, r.flops / bw), xhi = std::max(xhi, r.flops / bw);
  }
  auto decade_floor = [](double v) { return std::pow(10.0, std::floor(std::log10(v))); };
  auto decade_ceil = [](double v) { return std::pow(10.0, std::ceil(std::log10(v))); };
  xlo = decade_floor(xlo / 2), xhi = decade_ceil(xhi * 2);
  ylo = decade_floor(ylo / 2), yhi = decade_ceil(yhi * 1.5);
  if (bw > 0) ylo = std::min(ylo, decade_floor(bw * xlo));   // the slope starts inside the plot
  ylo = std::max(ylo, yhi / 1e9);                          // at most 9 decades down
  const double W = 720, H = 440, L = 80, R = 20, T = 20, B = 56;
  const double pw = W - L - R, ph = H - T - B;
  auto X = [&](double v) { return L + pw * (std::log10(v) - std::log10(xlo)) / (std::log10(xhi) - std::log10(xlo)); };
  auto Y = [&](double v) { return T + ph * (1 - (std::log10(v) - std::log10(ylo)) / (std::log10(yhi) - std::log10(ylo))); };
  static int clip_id = 0;
  const std::string clip = fmt::format("roofclip{}", ++clip_id);
  std::string s = fmt::format(
      "<svg class=\"roofline\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"{}\" xmlns=\"http://www.w3.org/2000/svg\">\n"
      "<title>{}</title>\n<defs><clipPath id=\"{}\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></clipPath></defs>\n",
      f1(W), f1(H), esc(title), esc(title), clip, f1(L), f1(T), f1(pw), f1(ph));
  s += fmt::format("<rect class=\"plot\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", f1(L), f1(T), f1(pw), f1(ph));
  for (double v = xlo; v <= xhi * 1.001; v *= 10)
    s += fmt::format("<line class=\"grid\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" y2=\"{2}\"/>"
                     "<text class=\"tick\" x=\"{0}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                     f1(X(v)), f1(T), f1(T + ph), f1(T + ph + 16), plain_decade(v));
  for (double v = ylo; v <= yhi * 1.001; v *= 10)
    s += fmt::format("<line class=\"grid\" x1=\"{1}\" x2=\"{2}\" y1=\"{0}\" y2=\"{0}\"/>"
                     "<text class=\"tick\" x=\"{3}\" y=\"{4}\" text-anchor=\"end\">{5}</text>\n",
                     f1(Y(v)), f1(L), f1(L + pw), f1(L - 6), f1(Y(v) + 4), si_decade(v));
  s += fmt::format("<text class=\"axis-title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">arithmetic intensity "
                   "(FLOP per byte moved, log)</text>\n", f1(L + pw / 2), f1(H - 12));
  s += fmt::format("<text class=\"axis-title\" transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">"
                   "achieved FLOP/s (log)</text>\n", f1(T + ph / 2));
  s += fmt::format("<g clip-path=\"url(#{})\">\n", clip);
  if (bw > 0) {
    const double top = roofs.empty() ? yhi : std::max_element(roofs.begin(), roofs.end(), [](auto& a, auto& b) {
                                               return a.flops < b.flops; })->flops;
    s += fmt::format("<line class=\"roof roof-mem\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"><title>{}</title></line>\n",
                     f1(X(xlo)), f1(Y(bw * xlo)), f1(X(top / bw)), f1(Y(top)),
                     esc(fmt::format("copy bandwidth {:.0f} GB/s", bw / 1e9)));
    s += fmt::format("<text class=\"roof-label\" x=\"{}\" y=\"{}\">copy {:.0f} GB/s</text>\n", f1(X(xlo) + 6),
                     f1(Y(bw * xlo) - 6), bw / 1e9);
  }
  for (const auto& r : roofs) {
    const double x0 = bw > 0 ? r.flops / bw : xlo;
    s += fmt::format("<line class=\"roof {}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"><title>{}</title></line>\n", r.cls,
                     f1(X(x0)), f1(Y(r.flops)), f1(X(xhi)), f1(Y(r.flops)), esc(r.label));
    s += fmt::format("<text class=\"roof-label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", f1(X(xhi) - 4),
                     f1(Y(r.flops) - 5), esc(r.label));
  }
  s += "</g>\n";
  std::vector<std::string> ops;
  for (const auto& p : pts)
    if (std::find(ops.begin(), ops.end(), p.r->op) == ops.end()) ops.push_back(p.r->op);
  for (const auto& p : pts) {
    const auto oi = std::find(ops.begin(), ops.end(), p.r->op) - ops.begin();
    std::string cls = "point";
    if (p.r->vendor()) cls += " vendor";
    if (p.r->throttled) cls += " throttled";
    const std::string tip = fmt::format("{} {} {}{}: {:.3g} FLOP/byte, {} TFLOP/s, {} GB/s{}", p.r->op, p.r->impl,
                                        p.r->problem, p.r->vendor() ? " (vendor)" : "", p.ai, fmt_sig(p.r->tflops, 3),
                                        fmt_sig(p.r->gbps, 4), p.r->throttled ? ", throttled" : "");
    s += fmt::format("<circle class=\"{}\" cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"><title>{}</title></circle>\n", cls,
                     f1(X(p.ai)), f1(Y(p.flops)), kPalette[oi % 8], esc(tip));
    s += fmt::format("<text class=\"point-label\" x=\"{}\" y=\"{}\">{}</text>\n", f1(X(p.ai) + 7), f1(Y(p.flops) + 3),
                     esc(cut(p.r->impl, 20)));
  }
  // Legend: one swatch per op.
  double ly = T + 14;
  for (std::size_t i = 0; i < ops.size(); ++i, ly += 16)
    s += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"/><text class=\"legend\" x=\"{}\" y=\"{}\">{}</text>\n",
                     f1(L + 14), f1(ly), kPalette[i % 8], f1(L + 24), f1(ly + 4), esc(ops[i]));
  s += "</svg>\n";
  return s;
}

std::string table(const std::vector<const Rec*>& recs, const std::string& caption) {
  std::string s = "<table class=\"numbers\">\n<caption>" + esc(caption) + "</caption>\n<thead><tr>";
  const char* heads[] = {"op", "problem", "impl", "kind", "median", "min", "max", "GB/s", "TFLOP/s", "% of peak",
                         "peak", "vs baseline", "reps", "status"};
  for (const char* h : heads) s += fmt::format("<th scope=\"col\">{}</th>", h);
  s += "</tr></thead>\n<tbody>\n";
  for (const Rec* r : recs) {
    std::string cls = "row";
    if (r->vendor()) cls += " vendor";
    if (r->throttled) cls += " throttled";
    if (!r->measured()) cls += " not-measured";
    std::string status = r->status == "pass" ? "ok" : r->status + (r->message.empty() ? "" : ": " + r->message);
    if (r->throttled) status += " — throttled" + (r->events.empty() ? "" : " (" + r->events + ")");
    auto cell = [](double v, const std::string& text) {
      return fmt::format("<td class=\"n\" data-v=\"{}\">{}</td>", v, esc(text));
    };
    const bool m = r->measured();
    s += fmt::format("<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}{}</td><td>{}</td>", cls, esc(r->op), esc(r->problem),
                     esc(r->impl), r->baseline == r->impl ? " <span class=\"tag\">baseline</span>" : "", esc(r->kind));
    s += cell(m ? r->median : 0, m ? fmt_ms(r->median) : "-") + cell(m ? r->min : 0, m ? fmt_ms(r->min) : "-") +
         cell(m ? r->max : 0, m ? fmt_ms(r->max) : "-") + cell(r->gbps, m ? fmt_sig(r->gbps, 4) : "-") +
         cell(r->tflops, m ? fmt_sig(r->tflops, 3) : "-") + cell(r->pct, m ? pct_text(r->pct) : "-");
    s += fmt::format("<td>{}</td>", esc(r->peak));
    s += cell(r->speedup, m && r->speedup > 0 ? fmt::format("{:.2f}x", r->speedup) : "-");
    s += cell(static_cast<double>(r->reps), m ? std::to_string(r->reps) : "-");
    s += fmt::format("<td class=\"status\">{}</td></tr>\n", esc(status));
  }
  s += "</tbody>\n</table>\n";
  return s;
}

const char* kCss = R"CSS(
:root { --fg: #1b1f24; --muted: #5b6470; --bg: #ffffff; --panel: #f5f7fa; --line: #d0d7de;
        --bar: #3b82c4; --pct: #2f9e68; --vendor: #8a8f98; --warn: #c2410c; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg);
       max-width: 1100px; margin: 0 auto; padding: 1.5em; }
h1 { font-size: 1.6em; margin-bottom: .2em; } h2 { margin-top: 2em; border-bottom: 1px solid var(--line); }
h3 { margin-top: 1.6em; } h4 { margin: 1.2em 0 .3em; }
.meta, .note { color: var(--muted); } .note { font-size: .92em; }
code { background: var(--panel); padding: 0 .25em; border-radius: 3px; }
.empty { background: var(--panel); border: 1px solid var(--line); padding: 1em 1.2em; border-radius: 6px; }
svg { width: 100%; height: auto; display: block; margin: .3em 0 1em; font-size: 12px; }
svg text { fill: var(--fg); } svg .tick, svg .not-measured { fill: var(--muted); }
svg .axis-title { font-weight: 600; }
.bar-time { fill: var(--bar); } .bar-pct { fill: var(--pct); }
.bar.vendor { fill: var(--vendor); } .bar.throttled { stroke: var(--warn); stroke-width: 2; stroke-dasharray: 4 2; }
.tag { font-size: .8em; fill: var(--vendor); color: var(--vendor); font-style: italic; }
.warn { fill: var(--warn); font-weight: 600; }
.pct-100 { stroke: var(--line); stroke-dasharray: 2 3; }
.vendor-mark { stroke: var(--vendor); stroke-width: 1.5; stroke-dasharray: 5 3; }
.plot { fill: var(--panel); stroke: var(--line); } .grid { stroke: var(--line); stroke-width: .7; }
.roof { stroke-width: 2.5; } .roof-mem { stroke: #444; } .roof-tensor { stroke: #7c3aed; } .roof-fp32 { stroke: #b45309; }
.roof-label { font-size: 11px; fill: var(--muted); }
.point { stroke: #fff; stroke-width: 1.5; } .point.vendor { stroke: #000; stroke-width: 2; }
.point.throttled { stroke: var(--warn); stroke-width: 2.5; }
.point-label { font-size: 10px; fill: var(--muted); } .legend { font-size: 11px; }
table.numbers { border-collapse: collapse; width: 100%; font-size: .88em; margin: .5em 0 1.5em; }
table.numbers caption { text-align: left; font-weight: 600; padding: .3em 0; }
table.numbers th, table.numbers td { border-bottom: 1px solid var(--line); padding: .25em .5em; text-align: left; }
table.numbers th { cursor: pointer; background: var(--panel); user-select: none; }
table.numbers th[aria-sort]::after { content: " ▾"; } table.numbers th[aria-sort=ascending]::after { content: " ▴"; }
table.numbers td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.throttled td { background: #fff4ec; } tr.throttled td.status { color: var(--warn); font-weight: 600; }
tr.not-measured td { color: var(--muted); }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e6e6; --muted: #9aa4b0; --bg: #111418; --panel: #1b2027; --line: #333b45; }
  tr.throttled td { background: #3a2416; } .roof-mem { stroke: #bbb; } .point { stroke: #111418; }
}
)CSS";

// Sorting: a click on a column's header sorts the table's rows by it (numbers by value).
const char* kJs = R"JS(
(function () {
  'use strict';
  document.querySelectorAll('table.numbers').forEach(function (table) {
    var heads = table.querySelectorAll('thead th');
    heads.forEach(function (th, col) {
      th.addEventListener('click', function () {
        var asc = th.getAttribute('aria-sort') !== 'ascending';
        heads.forEach(function (h) { h.removeAttribute('aria-sort'); });
        th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col];
          var vx = x.dataset.v !== undefined ? parseFloat(x.dataset.v) : x.textContent;
          var vy = y.dataset.v !== undefined ? parseFloat(y.dataset.v) : y.textContent;
          var c = typeof vx === 'number' ? vx - vy : String(vx).localeCompare(String(vy));
          return asc ? c : -c;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
  document.documentElement.setAttribute('data-report-ready', '1');
})();
)JS";

std::string peaks_line(const json& dev) {
  const auto p = dev.find("peaks");
  if (p == dev.end() || !p->is_object())
    return "No measured peaks in this file (`klab doctor` measures them; `klab bench --json` records them), so no roofs.";
  return fmt::format("Measured peaks of this device: copy {:.0f} GB/s, read {:.0f} GB/s, cuBLAS fp32 {:.1f}, tf32 {:.0f}, "
                     "bf16 {:.0f} TFLOP/s{}.",
                     num(*p, "copy_gbps"), num(*p, "read_gbps"), num(*p, "sgemm_tflops"), num(*p, "tf32_tflops"),
                     num(*p, "bf16_tflops"),
                     str(*p, "measured_at").empty() ? "" : " (measured " + str(*p, "measured_at") + ")");
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

void check_bench_doc(const std::string& path, const json& doc) {
  need(doc.is_object(), path, "", "not a JSON object");
  const auto b = doc.find("bench");
  need(b != doc.end(), path, "", "no \"bench\" records (`klab test --json` writes none; use `klab bench --json` or `klab run --json`)", false);
  need(b->is_array(), path, "", "\"bench\" is not an array");
  if (const auto d = doc.find("device"); d != doc.end()) {
    need(d->is_object(), path, "", "\"device\" is not an object");
    if (const auto p = d->find("peaks"); p != d->end()) {
      need(p->is_object(), path, "device", "\"peaks\" is not an object");
      for (const auto& [k, v] : p->items())
        need(k == "measured_at" || v.is_number(), path, "device.peaks", "\"" + k + "\" is not a number");
    }
  }
  std::size_t i = 0;
  for (const auto& r : *b) {
    const std::string where = fmt::format("bench[{}]", i++);
    need(r.is_object(), path, where, "not an object");
    for (const char* k : {"lesson", "op", "impl", "status"}) {
      const auto it = r.find(k);
      need(it != r.end() && it->is_string(), path, where, fmt::format("\"{}\" missing or not a string", k));
    }
    for (const char* k : {"kind", "message", "peak", "baseline"}) {
      const auto it = r.find(k);
      need(it == r.end() || it->is_string(), path, where, fmt::format("\"{}\" is not a string", k));
    }
    const auto m = r.find("median_ms");
    need(m != r.end() && m->is_number(), path, where, "\"median_ms\" missing or not a number");
    for (const char* k : {"min_ms", "max_ms", "gbps", "tflops", "pct_peak", "speedup", "reps"}) {
      const auto it = r.find(k);
      need(it == r.end() || it->is_number(), path, where, fmt::format("\"{}\" is not a number", k));
      need(it == r.end() || std::isfinite(it->get<double>()), path, where, fmt::format("\"{}\" is not finite", k));
    }
    need(std::isfinite(m->get<double>()), path, where, "\"median_ms\" is not finite");
    const auto p = r.find("problem");
    need(p != r.end() && p->is_object(), path, where, "\"problem\" missing or not an object");
    const auto s = p->find("shape");
    need(s != p->end() && s->is_array(), path, where, "\"problem.shape\" missing or not an array");
    for (const auto& d : *s) need(d.is_number_integer(), path, where, "\"problem.shape\" holds a non-integer");
    const auto dt = p->find("dtype");
    need(dt != p->end() && dt->is_string(), path, where, "\"problem.dtype\" missing or not a string");
    if (const auto v = p->find("variant"); v != p->end()) need(v->is_string(), path, where, "\"problem.variant\" is not a string");
    if (const auto t = r.find("telemetry"); t != r.end()) need(t->is_object(), path, where, "\"telemetry\" is not an object");
  }
}

BenchFile load_bench_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) throw UsageError("an empty file name was given");
  if (!fs::exists(path, ec)) throw UsageError(fmt::format("{}: no such file", path));
  if (fs::is_directory(path, ec)) throw UsageError(fmt::format("{}: is a directory, not a bench JSON file", path));
  std::ifstream f(path);
  if (!f) throw UsageError(fmt::format("{}: cannot be read", path));
  BenchFile b{path, {}};
  try {
    b.doc = json::parse(f);
  } catch (const json::exception& e) {
    throw UsageError(fmt::format("{}: not valid JSON: {}", path, shorten_json_error(e.what())));
  }
  check_bench_doc(path, b.doc);
  return b;
}

std::vector<std::string> checked_in_bench_files(const std::string& root) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path lessons = fs::path(root) / "lessons";
  if (!fs::is_directory(lessons, ec)) return out;
  for (const auto& l : fs::directory_iterator(lessons, ec)) {
    const fs::path bench = l.path() / "bench";
    if (!fs::is_directory(bench, ec)) continue;
    for (const auto& f : fs::directory_iterator(bench, ec))
      if (f.path().extension() == ".json" && f.is_regular_file(ec)) out.push_back(f.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string report_html(const std::vector<BenchFile>& files, const std::map<std::string, std::string>& titles) {
  std::ostringstream o;
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       "<meta name=\"generator\" content=\"klab report\">\n"
       "<title>Kernel Lab report</title>\n<style>"
    << kCss << "</style>\n</head>\n<body>\n<h1>Kernel Lab report</h1>\n";
  o << "<p class=\"meta\">Made by <code>klab report</code> on " << esc(utc_now_iso()) << " from "
    << files.size() << (files.size() == 1 ? " bench file" : " bench files")
    << ". Each op's versions at each bench problem: median time and % of the measured peak (vendor impls grey, "
       "throttled rows outlined); a roofline per lesson and file; then the numbers.</p>\n";

  // Lessons in order; within a lesson, each file on its own (its device and peaks).
  std::map<std::string, std::vector<std::pair<const BenchFile*, std::vector<Rec>>>> by_lesson;
  std::size_t n_records = 0;
  for (const auto& f : files) {
    std::map<std::string, std::vector<Rec>> part;
    for (const auto& r : f.doc.at("bench")) part[str(r, "lesson")].push_back(to_rec(r));
    for (auto& [id, recs] : part) {
      n_records += recs.size();
      by_lesson[id].push_back({&f, std::move(recs)});
    }
  }
  if (n_records == 0) {
    o << "<div class=\"empty\" id=\"no-results\"><p><strong>No bench results yet.</strong>";
    if (!files.empty()) o << " The files given hold no bench records.";
    o << "</p>\n<p>Make one on a machine with a GPU with <code>klab bench NN --json FILE</code> (NN a lesson, e.g. "
         "<code>klab bench 01 --json bench-01.json</code>), then run <code>klab report FILE</code>. A lesson's "
         "checked-in results live in <code>lessons/NN-*/bench/&lt;gpu&gt;-&lt;date&gt;.json</code>; "
         "<code>klab report</code> with no files reads those.</p></div>\n";
  }
  for (const auto& [id, parts] : by_lesson) {
    const auto t = titles.find(id);
    o << "<section class=\"lesson\" data-lesson=\"" << esc(id) << "\">\n<h2>Lesson " << esc(id)
      << (t != titles.end() && !t->second.empty() ? " — " + esc(t->second) : "") << "</h2>\n";
    for (const auto& [file, recs] : parts) {
      const json empty = json::object();
      const auto dit = file->doc.find("device");
      const json& dev = dit != file->doc.end() ? *dit : empty;
      const std::string fname = std::filesystem::path(file->path).filename().string();
      o << "<section class=\"run\">\n<h3>" << esc(fname) << "</h3>\n<p class=\"meta\">"
        << esc(str(dev, "name").empty() ? "unknown device" : str(dev, "name"));
      if (!str(file->doc, "date").empty()) o << ", " << esc(str(file->doc, "date"));
      o << " (<code>" << esc(file->path) << "</code>). " << esc(peaks_line(dev)) << "</p>\n";
      // Bar charts: one per (op, problem), in the file's order.
      std::vector<std::string> keys;
      std::map<std::string, std::vector<const Rec*>> groups;
      for (const auto& r : recs) {
        const std::string k = r.op + "\x1f" + r.problem;
        if (!groups.count(k)) keys.push_back(k);
        groups[k].push_back(&r);
      }
      std::string op_now;
      for (const auto& k : keys) {
        const auto& g = groups[k];
        if (g.front()->op != op_now) {
          op_now = g.front()->op;
          o << "<h4 class=\"op\">" << esc(op_now) << "</h4>\n";
        }
        o << "<figure class=\"ladder\"><figcaption>" << esc(g.front()->op + " at " + g.front()->problem)
          << "</figcaption>\n"
          << bar_chart(g, "Version ladder of " + g.front()->op + " at " + g.front()->problem) << "</figure>\n";
      }
      std::vector<const Rec*> all;
      for (const auto& r : recs) all.push_back(&r);
      std::vector<std::string> left_out;
      const auto pk = dev.find("peaks");
      const std::string roof = roofline(all, pk != dev.end() ? *pk : json(), "Roofline of lesson " + id + " (" + fname + ")", left_out);
      o << "<h4>Roofline</h4>\n";
      if (!roof.empty()) o << "<figure class=\"roof\">" << roof << "</figure>\n";
      else o << "<p class=\"note no-roofline\">No roofline: no measured impl here has both a FLOP and a byte count.</p>\n";
      if (!left_out.empty()) {
        std::string ops;
        for (const auto& op : left_out) ops += (ops.empty() ? "" : "; ") + op;
        o << "<p class=\"note\">Not on the roofline: " << esc(ops) << ". Their bars above show time and % of peak.</p>\n";
      }
      o << table(all, "Lesson " + id + ", " + fname + ": every record");
      o << "</section>\n";
    }
    o << "</section>\n";
  }
  o << "<script>" << kJs << "</script>\n</body>\n</html>\n";
  return o.str();
}

}  // namespace klab

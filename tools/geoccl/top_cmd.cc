#include "top_cmd.h"

#include <httplib.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <regex>
#include <thread>

#include "geoccl/error.h"
#include "metrics/exposition.h"

namespace geoccl::tools {

namespace {

std::atomic<bool> g_top_stop{false};

struct Endpoint {
  std::string host;
  int port = 0;
  std::string path = "/metrics";
  std::string text;  // as given
};

Endpoint parse_endpoint(const std::string& s) {
  static const std::regex re(
      R"(^(?:http://)?([A-Za-z0-9._-]+|\[[0-9a-fA-F:]+\]):(\d{1,5})(/[^\s]*)?$)");
  std::smatch m;
  if (!std::regex_match(s, m, re))
    throw Error(ErrorCode::kInvalidArgument,
                "geoccl top: endpoint '" + s + "' is not host:port[/path]");
  Endpoint e;
  e.host = m[1];
  e.port = std::stoi(m[2]);
  if (e.port < 1 || e.port > 65535)
    throw Error(ErrorCode::kInvalidArgument, "geoccl top: port out of range in '" + s + "'");
  if (m[3].matched && m[3].length() > 1) e.path = m[3];
  e.text = s;
  return e;
}

// One poll of one endpoint.
struct Scrape {
  bool ok = false;
  std::string error;
  std::chrono::steady_clock::time_point at;
  std::vector<metrics::Sample> samples;
};

Scrape poll(const Endpoint& e) {
  Scrape s;
  s.at = std::chrono::steady_clock::now();
  httplib::Client c(e.host, e.port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(2, 0);
  auto res = c.Get(e.path.c_str());
  if (!res) {
    s.error = "unreachable (" + httplib::to_string(res.error()) + ")";
    return s;
  }
  if (res->status != 200) {
    s.error = "HTTP " + std::to_string(res->status);
    return s;
  }
  try {
    s.samples = metrics::parse_exposition(res->body);
    s.ok = true;
  } catch (const Error& err) {
    s.error = err.what();
  }
  return s;
}

using Key = std::vector<std::pair<std::string, std::string>>;

// Sum of the samples named `name` per value of the labels `by`.
std::map<std::vector<std::string>, double> sum_by(const Scrape& s, const std::string& name,
                                                  const std::vector<std::string>& by) {
  std::map<std::vector<std::string>, double> out;
  for (const auto& x : s.samples) {
    if (x.name != name) continue;
    std::vector<std::string> k;
    for (const auto& l : by) k.push_back(x.label(l));
    out[k] += x.value;
  }
  return out;
}

std::string fmt(double v, const char* f) {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// The table of one refresh: `cur` against `prev` (the poll before; rates need two).
std::string render(const std::vector<Endpoint>& eps, const std::vector<Scrape>& prev,
                   const std::vector<Scrape>& cur, double interval_s) {
  std::string out;
  char line[512];
  const std::time_t now = std::time(nullptr);
  char when[32];
  std::strftime(when, sizeof when, "%H:%M:%S", std::localtime(&now));
  int up = 0;
  for (const auto& s : cur) up += s.ok;
  std::snprintf(line, sizeof line,
                "geoccl top  %s  %d/%zu ranks up  every %.1f s  (Ctrl-C quits)\n\n", when, up,
                cur.size(), interval_s);
  out += line;
  std::snprintf(line, sizeof line, "%-5s %-5s %-5s %-9s %9s %9s %12s %12s %10s %8s %7s\n", "PEER",
                "rank", "peer", "transport", "rtt_ms", "minrtt_ms", "send_Mbit/s", "recv_Mbit/s",
                "retrans/s", "retrans", "reconn");
  out += line;
  auto rank_of = [&](const Scrape& s, size_t i) {
    for (const auto& x : s.samples)
      if (x.name == "geoccl_rank_info") return x.label("rank");
    return "?" + std::to_string(i);
  };
  for (size_t i = 0; i < cur.size(); ++i) {
    const Scrape& s = cur[i];
    if (!s.ok) {
      std::snprintf(line, sizeof line, "%-5s %-5s %s: %s\n", "PEER", "?", eps[i].text.c_str(),
                    s.error.c_str());
      out += line;
      continue;
    }
    const bool have_prev = i < prev.size() && prev[i].ok;
    const double dt = have_prev ? std::chrono::duration<double>(s.at - prev[i].at).count() : 0;
    const auto sent = sum_by(s, "geoccl_peer_bytes_sent_total", {"peer"});
    const auto recv = sum_by(s, "geoccl_peer_bytes_received_total", {"peer"});
    const auto retr = sum_by(s, "geoccl_peer_retransmits_total", {"peer"});
    const auto reconn = sum_by(s, "geoccl_stream_reconnects_total", {"peer"});
    const auto minrtt = sum_by(s, "geoccl_peer_min_rtt_seconds", {"peer"});
    std::map<std::string, std::pair<std::string, double>> rtt;  // peer -> transport, seconds
    for (const auto& x : s.samples)
      if (x.name == "geoccl_peer_rtt_seconds")
        rtt[x.label("peer")] = {x.label("transport"), x.value};
    std::map<std::vector<std::string>, double> psent, precv, pretr;
    if (have_prev) {
      psent = sum_by(prev[i], "geoccl_peer_bytes_sent_total", {"peer"});
      precv = sum_by(prev[i], "geoccl_peer_bytes_received_total", {"peer"});
      pretr = sum_by(prev[i], "geoccl_peer_retransmits_total", {"peer"});
    }
    auto rate = [&](const std::map<std::vector<std::string>, double>& a,
                    const std::map<std::vector<std::string>, double>& b,
                    const std::vector<std::string>& k) {
      if (dt <= 0 || !b.count(k) || !a.count(k)) return std::nan("");
      return std::max(0.0, a.at(k) - b.at(k)) / dt;
    };
    for (const auto& [k, bytes] : sent) {
      const std::string& peer = k[0];
      const auto r = rtt.find(peer);
      const std::string transport = r != rtt.end() ? r->second.first : "shm/-";
      std::snprintf(line, sizeof line, "%-5s %-5s %-5s %-9s %9s %9s %12s %12s %10s %8.0f %7.0f\n",
                    "PEER", rank_of(s, i).c_str(), peer.c_str(), transport.c_str(),
                    fmt(r != rtt.end() ? r->second.second * 1e3 : std::nan(""), "%.3f").c_str(),
                    fmt(minrtt.count(k) ? minrtt.at(k) * 1e3 : std::nan(""), "%.3f").c_str(),
                    fmt(rate(sent, psent, k) * 8 / 1e6, "%.2f").c_str(),
                    fmt(rate(recv, precv, k) * 8 / 1e6, "%.2f").c_str(),
                    fmt(rate(retr, pretr, k), "%.1f").c_str(), retr.count(k) ? retr.at(k) : 0.0,
                    reconn.count(k) ? reconn.at(k) : 0.0);
      out += line;
      (void)bytes;
    }
  }
  out += "\n";
  std::snprintf(line, sizeof line, "%-5s %-5s %-15s %10s %10s %10s %14s\n", "OP", "rank", "op",
                "ops/s", "mean_ms", "total", "MB/s");
  out += line;
  for (size_t i = 0; i < cur.size(); ++i) {
    const Scrape& s = cur[i];
    if (!s.ok) continue;
    const bool have_prev = i < prev.size() && prev[i].ok;
    const double dt = have_prev ? std::chrono::duration<double>(s.at - prev[i].at).count() : 0;
    const auto count = sum_by(s, "geoccl_op_duration_seconds_count", {"op"});
    const auto sum = sum_by(s, "geoccl_op_duration_seconds_sum", {"op"});
    const auto bytes = sum_by(s, "geoccl_op_bytes_total", {"op"});
    std::map<std::vector<std::string>, double> pcount, psum, pbytes;
    if (have_prev) {
      pcount = sum_by(prev[i], "geoccl_op_duration_seconds_count", {"op"});
      psum = sum_by(prev[i], "geoccl_op_duration_seconds_sum", {"op"});
      pbytes = sum_by(prev[i], "geoccl_op_bytes_total", {"op"});
    }
    for (const auto& [k, n] : count) {
      const double dn = have_prev && pcount.count(k) ? n - pcount[k] : std::nan("");
      // Latency over the last interval when operations completed in it, else over the whole run.
      const double mean =
          dn > 0 ? (sum.at(k) - psum[k]) / dn : (n > 0 ? sum.at(k) / n : std::nan(""));
      const double mbs = dt > 0 && bytes.count(k) && pbytes.count(k)
                             ? (bytes.at(k) - pbytes[k]) / dt / 1e6
                             : std::nan("");
      std::snprintf(line, sizeof line, "%-5s %-5s %-15s %10s %10s %10.0f %14s\n", "OP",
                    rank_of(s, i).c_str(), k[0].c_str(),
                    fmt(dt > 0 ? dn / dt : std::nan(""), "%.1f").c_str(),
                    fmt(mean * 1e3, "%.3f").c_str(), n, fmt(mbs, "%.2f").c_str());
      out += line;
    }
  }
  return out;
}

}  // namespace

int run_top(const TopSpec& spec) {
  if (spec.endpoints.empty())
    throw Error(ErrorCode::kInvalidArgument, "geoccl top: no endpoint given");
  if (!(spec.interval_s >= 0.1 && spec.interval_s <= 3600))
    throw Error(ErrorCode::kInvalidArgument, "geoccl top: --interval must be in 0.1..3600 s");
  std::vector<Endpoint> eps;
  for (const auto& e : spec.endpoints) eps.push_back(parse_endpoint(e));
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_top_stop.store(true); };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::vector<Scrape> prev;
  for (int it = 0; !g_top_stop.load() && (spec.iterations == 0 || it < spec.iterations); ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<Scrape> cur(eps.size());
    std::vector<std::thread> th;
    for (size_t i = 0; i < eps.size(); ++i) th.emplace_back([&, i] { cur[i] = poll(eps[i]); });
    for (auto& t : th) t.join();
    const std::string table = render(eps, prev, cur, spec.interval_s);
    std::fputs(spec.plain ? "\n" : "\x1b[H\x1b[2J", stdout);
    std::fputs(table.c_str(), stdout);
    std::fflush(stdout);
    prev = std::move(cur);
    const auto next = t0 + std::chrono::duration<double>(spec.interval_s);
    while (!g_top_stop.load() && std::chrono::steady_clock::now() < next &&
           (spec.iterations == 0 || it + 1 < spec.iterations))
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return 0;
}

}  // namespace geoccl::tools

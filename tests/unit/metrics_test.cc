// The metrics layer: the registry's text format, the HTTP endpoint, the reader `geoccl top`
// uses, and the series a real two-rank communicator exports over TCP.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <thread>

#include "error_code.h"
#include "geoccl/geoccl.h"
#include "metrics/comm_metrics.h"
#include "metrics/exporter.h"
#include "metrics/exposition.h"
#include "metrics/registry.h"
#include "runtime/socket.h"

namespace geoccl::metrics {
namespace {

using test::code_of;

TEST(MetricsRegistry, WritesTheTextFormat) {
  Registry r;
  r.counter("t_requests_total", "Requests", {"path"}).with({"/a\"b\\c\nd"}).inc(3);
  r.gauge("t_temp", "Temperature").with({}).set(-1.5);
  auto& h = r.histogram("t_lat_seconds", "Latency", {"op"}, {0.1, 1});
  h.with({"x"}).observe(0.05);
  h.with({"x"}).observe(0.1);  // upper-inclusive
  h.with({"x"}).observe(5);
  const std::string text = r.render();
  EXPECT_NE(text.find("# TYPE t_requests_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_requests_total{path=\"/a\\\"b\\\\c\\nd\"} 3\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("t_temp -1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_lat_seconds_bucket{op=\"x\",le=\"0.1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_lat_seconds_bucket{op=\"x\",le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_lat_seconds_bucket{op=\"x\",le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_lat_seconds_count{op=\"x\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_lat_seconds_sum{op=\"x\"} 5.15\n"), std::string::npos) << text;
  // What the exporter writes, the reader reads back (label unescaped).
  const auto samples = parse_exposition(text);
  EXPECT_EQ(find_sample(samples, "t_requests_total", {{"path", "/a\"b\\c\nd"}}), 3.0);
  EXPECT_EQ(find_sample(samples, "t_lat_seconds_bucket", {{"le", "+Inf"}}), 3.0);
}

TEST(MetricsRegistry, RefusesBadNamesAndConflicts) {
  Registry r;
  EXPECT_EQ(code_of([&] { r.counter("1bad", "x"); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { r.counter("ok", "x", {"bad-label"}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { r.histogram("h", "x", {"le"}, {1}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { r.histogram("h2", "x", {}, {2, 1}); }), ErrorCode::kInvalidArgument);
  r.counter("c", "x", {"a"});
  EXPECT_EQ(code_of([&] { r.gauge("c", "x", {"a"}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { r.counter("c", "x", {"b"}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] {
              r.counter("c", "x", {"a"}).with({"1", "2"});
            }),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(&r.counter("c", "x", {"a"}), &r.counter("c", "y", {"a"}));
}

TEST(MetricsExposition, ReadsAndRefuses) {
  const auto s = parse_exposition(
      "# HELP a b\n\na_b{x=\"1\", y=\"q\\\"\"} 2.5e3 1700000000\nc NaN\nd -Inf\r\n");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].value, 2500);
  EXPECT_EQ(s[0].label("y"), "q\"");
  EXPECT_TRUE(std::isnan(s[1].value));
  EXPECT_EQ(s[2].value, -HUGE_VAL);
  for (const char* bad : {"a{x=\"1} 2", "a{x=1} 2", "a 2 x", "a nan", "a{x=\"\\t\"} 1", "{} 1", "a",
                          "a 0x10", "a{x=\"1\"", "a infinity"})
    EXPECT_EQ(code_of([&] { parse_exposition(bad); }), ErrorCode::kProtocol) << bad;
}

std::string get(int port, const std::string& path, int* status = nullptr) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(5);
  c.set_read_timeout(10);
  auto res = c.Get(path.c_str());
  if (status) *status = res ? res->status : -1;
  return res ? res->body : std::string();
}

TEST(MetricsExporter, ServesAndRefusesBadPorts) {
  Registry r;
  r.counter("served_total", "x").with({}).inc(7);
  HttpExporter ex(r, "127.0.0.1", 0);
  int status = 0;
  const std::string body = get(ex.port(), "/metrics", &status);
  EXPECT_EQ(status, 200);
  EXPECT_NE(body.find("served_total 7\n"), std::string::npos) << body;
  EXPECT_EQ(code_of([&] { HttpExporter(r, "127.0.0.1", 70000); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { HttpExporter(r, "127.0.0.1", ex.port()); }), ErrorCode::kIo);  // in use
  EXPECT_EQ(code_of([&] { HttpExporter(r, "192.0.2.1", 0); }), ErrorCode::kIo);          // not ours
}

TEST(MetricsConfig, BadPortIsInvalidArgument) {
  setenv("GEOCCL_METRICS_PORT", "http", 1);
  EXPECT_EQ(code_of([] { Config::from_env(); }), ErrorCode::kInvalidArgument);
  setenv("GEOCCL_METRICS_PORT", "70000", 1);
  Config c = Config::from_env();
  c.rank = 0;
  c.world_size = 1;
  EXPECT_EQ(code_of([&] { c.validate(); }), ErrorCode::kInvalidArgument);
  unsetenv("GEOCCL_METRICS_PORT");
}

TEST(CommMetrics, LimitAndErrors) {
  EXPECT_EQ(allreduce_limit_s(1000, 1, 1e9, 0.02), 0);
  // 3 domains, 1 Gbit/s: 2*2/3 * 8e6 bit / 1e9 + 20 ms = 30.67 ms.
  EXPECT_NEAR(allreduce_limit_s(1000000, 3, 1e9, 0.02), 0.0306667, 1e-6);
  Registry r;
  CommMetrics m(r, 0, 2, "a", 1e9);
  m.record_error(1, "allreduce", ErrorCode::kPeerLost);
  m.record(1, "allreduce", "ring", 4096, 0.001);
  const auto s = parse_exposition(r.render());
  EXPECT_EQ(find_sample(s, "geoccl_op_errors_total", {{"op", "allreduce"}, {"code", "peer_lost"}}),
            1.0)
      << r.render();
  EXPECT_EQ(
      find_sample(s, "geoccl_op_duration_seconds_count", {{"algo", "ring"}, {"size_class", "4K"}}),
      1.0);
  EXPECT_GT(*find_sample(s, "geoccl_process_resident_bytes"), 1 << 20);
}

// Every PromQL expression of a Grafana dashboard (panel targets, template variables).
void collect_queries(const nlohmann::json& j, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      if ((k == "expr" || k == "definition" || k == "query") && v.is_string()) out->push_back(v);
      collect_queries(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_queries(v, out);
  }
}

// Two real ranks over TCP on loopback, in two labelled domains, each serving /metrics: the series
// after three 1 MiB allreduces, read through HTTP the way Prometheus does; and every query of the
// shipped Grafana dashboard names a series found in that scrape.
TEST(CommunicatorMetrics, TwoRanksOverTcp) {
  const uint16_t store_port = runtime::pick_free_port();
  const int ports[2] = {runtime::pick_free_port(), runtime::pick_free_port()};
  constexpr size_t kCount = 256 * 1024;  // 1 MiB of f32
  std::string scraped, after_error;
  auto rank_main = [&](int rank) {
    Config c;
    c.rank = rank;
    c.world_size = 2;
    c.master_port = store_port;
    c.transport = "tcp";
    c.metrics_port = ports[rank];
    c.metrics_bind = "127.0.0.1";
    c.connect_timeout = std::chrono::seconds(30);
    c.domain = rank == 0 ? "a" : "b";
    c.metrics_link_bps = 1000000000;
    c.plan_probe_bytes = 0;  // no start-up path probe: the peer's bytes are the operations' only
    Communicator comm(c);
    std::vector<float> buf(kCount, 1.0f);
    for (int i = 0; i < 3; ++i)
      comm.allreduce(buf.data(), kCount, DataType::kFloat32, ReduceOp::kSum).wait();
    comm.barrier().wait();
    if (rank == 0) scraped = get(ports[0], "/metrics");
    comm.barrier().wait();  // rank 1 serves until rank 0 has read
    if (rank == 0) {
      // An operation that fails is counted by its error code, not timed.
      comm.abort("metrics test");
      EXPECT_THROW(comm.allreduce(buf.data(), kCount, DataType::kFloat32, ReduceOp::kSum).wait(),
                   Error);
      after_error = get(ports[0], "/metrics");
    }
  };
  std::thread r1(rank_main, 1);
  rank_main(0);
  r1.join();
  ASSERT_FALSE(scraped.empty());
  const auto s = parse_exposition(scraped);
  const double op_bytes = 3.0 * kCount * 4;
  EXPECT_EQ(find_sample(s, "geoccl_op_bytes_total", {{"op", "allreduce"}}), op_bytes) << scraped;
  double count = 0;
  for (const auto& x : s)
    if (x.name == "geoccl_op_duration_seconds_count" && x.label("op") == "allreduce") {
      count += x.value;
      EXPECT_EQ(x.label("size_class"), "1M");
    }
  EXPECT_EQ(count, 3);
  EXPECT_EQ(find_sample(s, "geoccl_op_bytes_total", {{"op", "barrier"}}), 0.0);
  // A two-rank ring sends half the buffer in each of its two phases: 1x the buffer per call,
  // plus frame headers and control traffic.
  const double sent = *find_sample(s, "geoccl_peer_bytes_sent_total", {{"peer", "1"}});
  EXPECT_GE(sent, op_bytes);
  EXPECT_LE(sent, op_bytes * 1.05);
  const auto rtt = find_sample(s, "geoccl_peer_rtt_seconds", {{"peer", "1"}, {"transport", "tcp"}});
  ASSERT_TRUE(rtt.has_value()) << scraped;
  EXPECT_GT(*rtt, 0);
  EXPECT_LT(*rtt, 0.05);
  double errors = 0;
  const auto e = parse_exposition(after_error);
  for (const auto& x : e)
    if (x.name == "geoccl_op_errors_total" && x.label("op") == "allreduce") errors += x.value;
  EXPECT_EQ(errors, 1) << after_error;  // aborted (or peer_lost, had rank 1 left first)
  EXPECT_EQ(find_sample(e, "geoccl_op_bytes_total", {{"op", "allreduce"}}), op_bytes);
  EXPECT_EQ(
      find_sample(s, "geoccl_rank_info", {{"rank", "0"}, {"world_size", "2"}, {"domain", "a"}}),
      1.0);
  ASSERT_TRUE(
      find_sample(s, "geoccl_link_utilization_ratio", {{"from", "a"}, {"to", "b"}}).has_value());
  EXPECT_GT(*find_sample(s, "geoccl_op_limit_ratio", {{"op", "allreduce"}}), 0);

  std::set<std::string> emitted;
  for (const auto& x : s) emitted.insert(x.name);
  // Families without a series yet (no error so far) are declared by their TYPE line.
  const std::regex type_line("# TYPE (\\S+) (\\S+)");
  for (std::sregex_iterator it(scraped.begin(), scraped.end(), type_line), end; it != end; ++it) {
    emitted.insert((*it)[1]);
    if ((*it)[2] == "histogram")
      for (const char* suffix : {"_bucket", "_sum", "_count"})
        emitted.insert((*it)[1].str() + suffix);
  }
  std::ifstream f(GEOCCL_DASHBOARD_PATH);
  ASSERT_TRUE(f.good()) << GEOCCL_DASHBOARD_PATH;
  std::vector<std::string> queries;
  collect_queries(nlohmann::json::parse(f), &queries);
  std::set<std::string> named;
  const std::regex series("geoccl_[a-z_]+");
  for (const auto& q : queries)
    for (std::sregex_iterator it(q.begin(), q.end(), series), end; it != end; ++it) {
      named.insert(it->str());
      EXPECT_TRUE(emitted.count(it->str()))
          << "dashboard query names " << it->str() << ", which the exporter does not emit: " << q;
    }
  EXPECT_GE(named.size(), 12u) << "the dashboard's queries were not found";
}

}  // namespace
}  // namespace geoccl::metrics

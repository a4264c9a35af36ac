// Traces (GEOCCL_TRACE): bad directories are typed errors, the merge refuses what geoccl did not
// write, and a real four-rank job across two labelled domains yields per-rank files that
// `geoccl trace merge` (the CLI) puts on one timeline where one allreduce's spans overlap on
// every rank, its hierarchical phases nest inside it, and per-peer transfers carry their bytes.
#include "metrics/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "error_code.h"
#include "geoccl/geoccl.h"
#include "metrics/trace_merge.h"
#include "runtime/socket.h"

namespace geoccl::metrics {
namespace {

using test::code_of;

TEST(Trace, BadDirectoriesAreTypedErrors) {
  EXPECT_EQ(code_of([] { TraceWriter("", 0, 1, ""); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([] { TraceWriter("/proc/geoccl-trace", 0, 1, ""); }), ErrorCode::kIo);
  const std::string file = "/tmp/geoccl-trace-file-" + std::to_string(getpid());
  std::ofstream(file) << "x";
  EXPECT_EQ(code_of([&] { TraceWriter(file, 0, 1, ""); }), ErrorCode::kIo);  // a file, not a dir
  std::filesystem::remove(file);
  Config c;
  c.rank = 0;
  c.world_size = 1;
  c.trace_dir = "/proc/geoccl-trace";
  EXPECT_EQ(code_of([&] { Communicator comm(c); }), ErrorCode::kIo);
}

TEST(Trace, MergeRefusesForeignFiles) {
  for (const char* bad :
       {"", "[]", "{\"traceEvents\":[]}", "{\"otherData\":{\"geoccl_rank\":0},\"traceEvents\":[]}",
        "{\"otherData\":{\"geoccl_rank\":0,\"clock_offset_us\":0},\"traceEvents\":[1]}",
        "{\"otherData\":{\"geoccl_rank\":0,\"clock_offset_us\":0},\"traceEvents\":[{\"ts\":\"x\"}]"
        "}"})
    EXPECT_EQ(code_of([&] { merge_traces({bad}); }), ErrorCode::kProtocol) << bad;
  const std::string ok =
      "{\"otherData\":{\"geoccl_rank\":0,\"clock_offset_us\":0},\"traceEvents\":[]}";
  EXPECT_EQ(code_of([&] { merge_traces({ok, ok}); }), ErrorCode::kProtocol);  // rank 0 twice
  EXPECT_EQ(code_of([&] { merge_traces({}); }), ErrorCode::kInvalidArgument);
  const auto m =
      merge_traces({"{\"otherData\":{\"geoccl_rank\":1,\"clock_offset_us\":250},"
                    "\"traceEvents\":[{\"ph\":\"X\",\"ts\":1000,\"dur\":5}]}"});
  EXPECT_EQ(nlohmann::json::parse(m.json)["traceEvents"][0]["ts"], 750);  // on rank 0's clock
}

TEST(Trace, FourRanksOnOneTimeline) {
  const std::string dir = "/tmp/geoccl-trace-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  const uint16_t port = runtime::pick_free_port();
  constexpr size_t kLarge = 1 << 20;  // floats: 4 MiB, the hierarchical ring
  auto rank_main = [&](int rank) {
    Config c;
    c.rank = rank;
    c.world_size = 4;
    c.master_port = port;
    c.domain = rank < 2 ? "a" : "b";
    c.trace_dir = dir;
    c.connect_timeout = std::chrono::seconds(30);
    Communicator comm(c);
    std::vector<float> big(kLarge, 1.0f), small(1024, 1.0f);
    comm.allreduce(small.data(), small.size(), DataType::kFloat32, ReduceOp::kSum).wait();
    comm.allreduce(big.data(), big.size(), DataType::kFloat32, ReduceOp::kSum).wait();
  };
  std::vector<std::thread> ranks;
  for (int r = 1; r < 4; ++r) ranks.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : ranks) t.join();

  const std::string out = dir + "/job.json";
  const std::string cmd =
      std::string(GEOCCL_CLI_PATH) + " trace merge " + dir + " -o " + out + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // A directory that is not there, or holds no rank file: the command fails (kIo,
  // kInvalidArgument).
  EXPECT_NE(std::system((std::string(GEOCCL_CLI_PATH) + " trace merge " + dir + "/none -o " + out +
                         ".x 2> /dev/null")
                            .c_str()),
            0);
  std::filesystem::create_directories(dir + "/empty");
  EXPECT_NE(std::system((std::string(GEOCCL_CLI_PATH) + " trace merge " + dir + "/empty -o " + out +
                         ".x 2> /dev/null")
                            .c_str()),
            0);
  std::ifstream f(out);
  const auto doc = nlohmann::json::parse(f);
  // The round trip each rank's offset was measured over: on one host the true offset is 0, and a
  // ping-pong estimate is off by at most half its round trip (a loaded machine lengthens that).
  std::map<std::string, double> rtt_us;
  for (int r = 0; r < 4; ++r) {
    std::ifstream rf(dir + "/rank-" + std::to_string(r) + ".json");
    rtt_us[std::to_string(r)] = nlohmann::json::parse(rf)["otherData"]["clock_offset_rtt_us"].get<double>();
  }
  std::filesystem::remove_all(dir);
  EXPECT_EQ(doc["otherData"]["geoccl_ranks"], 4);
  for (const auto& [r, off] : doc["otherData"]["clock_offsets_us"].items()) {
    ASSERT_TRUE(rtt_us.count(r)) << "rank " << r;
    EXPECT_LE(std::abs(off.get<double>()), rtt_us[r] / 2 + 50) << "rank " << r << ": one host, one clock";
  }

  struct Span {
    int64_t ts = 0, end = 0;
  };
  std::map<int, Span> op;                            // rank -> the large allreduce
  std::map<int, std::map<std::string, Span>> phase;  // rank -> name -> span
  std::map<int, int64_t> sent;                       // rank -> bytes of its sends in that op
  std::map<int, bool> named;
  uint64_t large_seq = 0;
  for (const auto& e : doc["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid")) << e;
    const int pid = e["pid"];
    if (e["ph"] == "M" && e["name"] == "process_name") named[pid] = true;
    if (e["ph"] == "X" && e["name"] == "allreduce" && e["args"]["bytes"] == kLarge * 4) {
      op[pid] = {e["ts"], e["ts"].get<int64_t>() + e["dur"].get<int64_t>()};
      large_seq = e["args"]["seq"];
      EXPECT_EQ(e["args"]["algo"], "hier");
    }
    if (e["ph"] == "X" && e["cat"] == "phase")
      phase[pid][e["name"]] = {e["ts"], e["ts"].get<int64_t>() + e["dur"].get<int64_t>()};
  }
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "b" && e["name"] == "send" && e["args"]["seq"] == large_seq &&
        e["args"]["op"] == "allreduce")
      sent[e["pid"]] += e["args"]["bytes"].get<int64_t>();
  ASSERT_EQ(op.size(), 4u);
  int64_t latest_start = 0, earliest_end = INT64_MAX;
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(named[r]) << r;
    latest_start = std::max(latest_start, op[r].ts);
    earliest_end = std::min(earliest_end, op[r].end);
    for (const char* p : {"domain reduce-scatter", "inter-domain allreduce", "domain allgather"}) {
      ASSERT_TRUE(phase[r].count(p)) << "rank " << r << " has no phase " << p;
      EXPECT_GE(phase[r][p].ts, op[r].ts) << p;
      EXPECT_LE(phase[r][p].end, op[r].end) << p;
    }
    // 2 x 2: half the buffer reduce-scattered to the domain peer, the rank's half exchanged in
    // a two-rank ring across (half of it sent), half gathered back: 1.5x the buffer.
    EXPECT_EQ(sent[r], static_cast<int64_t>(kLarge * 4 * 3 / 2)) << "rank " << r;
  }
  EXPECT_LT(latest_start, earliest_end) << "the allreduce's spans on the four ranks do not overlap";
}

}  // namespace
}  // namespace geoccl::metrics

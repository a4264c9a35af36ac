#include "membership/group_params.h"

#include <type_traits>

#include "geoccl/compression.h"
#include "geoccl/error.h"
#include "protocol/wire.h"

namespace geoccl::membership {
namespace {

// The one list of settings, in encoding order, with the variable (or GEOCCL_EXPERIMENT key) that
// sets each. encode, decode and describe_difference all walk it, so a setting added here is
// handled everywhere.
template <class P, class F>
void for_each_setting(P& p, F&& f) {
  f("GEOCCL_TCP_STREAMS", p.data_streams);
  f("GEOCCL_EXPERIMENT chunk", p.chunk_bytes);
  f("GEOCCL_EXPERIMENT small_msg", p.small_msg_bytes);
  f("GEOCCL_EXPERIMENT wan_small_msg", p.wan_small_msg_bytes);
  f("GEOCCL_ALGO", p.algo);
  f("GEOCCL_TRANSPORT", p.transport);
  f("GEOCCL_TOPOLOGY", p.topology);
  f("GEOCCL_WAN_COMPRESSION", p.compression);
  f("security", p.security);
  f("GEOCCL_HEARTBEAT_MS", p.heartbeat_ms);
  f("GEOCCL_LIVENESS_WINDOW_MS", p.liveness_window_ms);
  f("GEOCCL_EXPERIMENT lazy_connect", p.lazy_connect);
}

void put(protocol::Writer& w, uint32_t v) { w.u32(v); }
void put(protocol::Writer& w, uint64_t v) { w.u64(v); }
void put(protocol::Writer& w, const std::string& v) { w.str(v); }
bool get(protocol::Reader& r, uint32_t* v) { return r.u32(v); }
bool get(protocol::Reader& r, uint64_t* v) { return r.u64(v); }
bool get(protocol::Reader& r, std::string* v) { return r.str(v, kMaxParamString); }

std::string show(uint64_t v) { return std::to_string(v); }
std::string show(const std::string& v) { return "'" + v + "'"; }

}  // namespace

GroupParams GroupParams::from_config(const Config& cfg, int resolved_streams) {
  if (resolved_streams < 0 || resolved_streams > kMaxDataStreams)
    throw Error(ErrorCode::kInvalidArgument,
                "data streams per peer must be in 0.." + std::to_string(kMaxDataStreams) + ", got " +
                    std::to_string(resolved_streams));
  GroupParams p;
  p.data_streams = static_cast<uint32_t>(resolved_streams);
  p.chunk_bytes = cfg.chunk_bytes;
  p.small_msg_bytes = cfg.small_msg_bytes;
  p.wan_small_msg_bytes = cfg.wan_small_msg_bytes;
  p.algo = cfg.algo;
  p.transport = cfg.transport;
  p.topology = cfg.topology;
  p.compression = Compression::parse(cfg.wan_compression).name();
  p.heartbeat_ms = static_cast<uint64_t>(cfg.heartbeat_interval.count());
  p.liveness_window_ms = static_cast<uint64_t>(cfg.liveness_window.count());
  p.lazy_connect = cfg.lazy_connect;
  for_each_setting(p, [](const char* name, const auto& v) {
    if constexpr (std::is_same_v<std::decay_t<decltype(v)>, std::string>)
      if (v.size() > kMaxParamString)
        throw Error(ErrorCode::kInvalidArgument,
                    std::string(name) + " is longer than " + std::to_string(kMaxParamString) +
                        " bytes");
  });
  return p;
}

std::vector<uint8_t> GroupParams::encode() const {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u16(kGroupParamsVersion);
  for_each_setting(*this, [&](const char*, const auto& v) { put(w, v); });
  return out;
}

std::optional<GroupParams> GroupParams::decode(std::span<const uint8_t> in, std::string* why) {
  auto fail = [&](std::string m) -> std::optional<GroupParams> {
    if (why) *why = std::move(m);
    return std::nullopt;
  };
  protocol::Reader r(in);
  uint16_t version = 0;
  if (!r.u16(&version)) return fail("group parameters truncated");
  if (version != kGroupParamsVersion)
    return fail("group parameters of format " + std::to_string(version) + ", this build reads " +
                std::to_string(kGroupParamsVersion) + " (another geoccl version?)");
  GroupParams p;
  const char* bad = nullptr;
  for_each_setting(p, [&](const char* name, auto& v) {
    if (!bad && !get(r, &v)) bad = name;
  });
  if (bad) return fail(std::string("group parameters malformed at ") + bad);
  if (p.data_streams > static_cast<uint32_t>(kMaxDataStreams))
    return fail("group parameters: GEOCCL_TCP_STREAMS " + std::to_string(p.data_streams) +
                " out of range");
  if (r.remaining() != 0) return fail("group parameters have trailing bytes");
  return p;
}

uint64_t GroupParams::hash() const {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 offset basis
  for (uint8_t b : encode()) {
    h ^= b;
    h *= 0x100000001b3ull;  // FNV-1a 64 prime
  }
  return h;
}

std::string describe_difference(const GroupParams& rank0, const GroupParams& mine) {
  std::vector<std::string> theirs;
  for_each_setting(rank0, [&](const char*, const auto& v) { theirs.push_back(show(v)); });
  std::string out;
  size_t i = 0;
  for_each_setting(mine, [&](const char* name, const auto& v) {
    const std::string ours = show(v);
    if (ours != theirs[i])
      out += (out.empty() ? "" : "; ") + std::string(name) + ": rank 0 has " + theirs[i] +
             ", this rank " + ours;
    ++i;
  });
  return out;
}

}  // namespace geoccl::membership

// The settings every rank of a group must share, taken from rank 0: rank 0 publishes its
// GroupParams, every rank compares them with its own (describe_difference names what differs),
// and every handshake carries hash() so that no two ranks with different settings connect.
//
// Canonical encoding (little-endian, src/protocol/wire.h), version kGroupParamsVersion:
//   u16 version | u32 data_streams | u64 chunk_bytes | u64 small_msg_bytes |
//   u64 wan_small_msg_bytes | str algo | str transport | str topology | str compression |
//   str security | u64 heartbeat_ms | u64 liveness_window_ms | str lazy_connect
//                                                     (str = u32 length + bytes, <= kMaxParamString)
// A setting added later goes at the end and bumps the version: ranks of different versions then
// disagree on the hash, and decode() of an unknown version says so.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "geoccl/config.h"

namespace geoccl::membership {

inline constexpr uint16_t kGroupParamsVersion = 3;  // 2: heartbeat and liveness window; 3: lazy_connect
inline constexpr size_t kMaxParamString = 1024;
inline constexpr int kMaxDataStreams = 64;  // as GEOCCL_TCP_STREAMS allows

struct GroupParams {
  uint32_t data_streams = 1;                  // GEOCCL_TCP_STREAMS; 0: measured per WAN peer
  uint64_t chunk_bytes = 1 << 20;             // GEOCCL_EXPERIMENT chunk
  uint64_t small_msg_bytes = 64 * 1024;       // GEOCCL_EXPERIMENT small_msg
  uint64_t wan_small_msg_bytes = 1 << 20;     // GEOCCL_EXPERIMENT wan_small_msg
  std::string algo = "auto";                  // GEOCCL_ALGO (forced algorithm)
  std::string transport = "auto";             // GEOCCL_TRANSPORT
  std::string topology = "auto";              // GEOCCL_TOPOLOGY
  std::string compression = "none";           // GEOCCL_WAN_COMPRESSION (canonical name)
  std::string security = "off";               // no setting yet
  // A rank's window is measured against its peers' heartbeat interval: they must agree.
  uint64_t heartbeat_ms = 1000;               // GEOCCL_HEARTBEAT_MS
  uint64_t liveness_window_ms = 10000;        // GEOCCL_LIVENESS_WINDOW_MS
  // Which TCP pairs connect at start-up: every rank must expect the same ones.
  std::string lazy_connect = "auto";          // GEOCCL_EXPERIMENT lazy_connect

  bool operator==(const GroupParams&) const = default;

  // `resolved_streams`: the data streams per peer (1..kMaxDataStreams; 0: measured per WAN peer).
  // Throws Error(kInvalidArgument) when it is out of range or a string setting is longer than
  // kMaxParamString.
  static GroupParams from_config(const Config& cfg, int resolved_streams);

  std::vector<uint8_t> encode() const;
  // nullopt when the bytes are truncated, have trailing bytes, an over-long string, streams out
  // of range or another version; *why (if given) then says which.
  static std::optional<GroupParams> decode(std::span<const uint8_t> in, std::string* why = nullptr);

  // FNV-1a 64 of encode(): equal settings give equal hashes on every host and build. Not a
  // security measure.
  uint64_t hash() const;
};

// Every setting where `mine` differs from `rank0`, with both values and its variable, joined by
// "; " (e.g. "GEOCCL_EXPERIMENT chunk: rank 0 has 1048576, this rank 262144"); "" when equal.
std::string describe_difference(const GroupParams& rank0, const GroupParams& mine);

}  // namespace geoccl::membership

#include "membership/rendezvous.h"

#include <random>

#include "core/logging.h"
#include "geoccl/error.h"
#include "protocol/wire.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::membership {
namespace {

// The group's parameters, chosen by rank 0: u64 session id | u32 data streams per peer.
std::vector<uint8_t> encode_params(uint64_t session, int streams) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u64(session);
  w.u32(static_cast<uint32_t>(streams));
  return out;
}

void decode_params(const std::vector<uint8_t>& b, RendezvousInfo* info) {
  protocol::Reader r(b);
  uint64_t session = 0;
  uint32_t streams = 0;
  if (!r.u64(&session) || !r.u32(&streams) || streams < 1 || streams > 64)
    throw Error(ErrorCode::kProtocol, "malformed group parameters in the store");
  info->session_id = session;
  info->data_streams = static_cast<int>(streams);
}

}  // namespace

std::string choose_bind_address(const Config& cfg) {
  if (!cfg.bind_addr.empty()) return cfg.bind_addr;
  std::string a = transport::tcp::route_source_address(cfg.master_addr);
  return a.empty() ? "127.0.0.1" : a;
}

RendezvousInfo join_store(const Config& cfg) {
  RendezvousInfo info;
  if (cfg.rank == 0) {
    // Host the store unless something already serves master_addr:master_port.
    try {
      info.server = std::make_unique<StoreServer>(cfg.master_addr, cfg.master_port);
    } catch (const Error& e) {
      GEOCCL_LOG(kInfo, "not hosting the store (" << e.what() << "); connecting to the existing one");
    }
  }
  info.store = std::make_unique<StoreClient>(cfg.master_addr, cfg.master_port, cfg.connect_timeout);
  // Several communicators may share one store (new groups, tests): every rank counts the ones it
  // created in this session, and all ranks create them in the same order.
  const std::string base = "geoccl/" + cfg.session + "/";
  const int64_t gen = info.store->add(base + "gen/" + std::to_string(cfg.rank), 1);
  info.prefix = base + "g" + std::to_string(gen) + "/";
  if (cfg.rank == 0) {
    std::random_device rd;
    info.session_id = (uint64_t{rd()} << 32) ^ rd() ^ 0x9e3779b97f4a7c15ull;
    // Auto: 4, so that peers found to be across a WAN (labels or measured RTTs) can be striped;
    // peers in the rank's own domain use one of them.
    info.data_streams = cfg.tcp_streams > 0 ? cfg.tcp_streams : 4;
    info.store->set(info.prefix + "params", encode_params(info.session_id, info.data_streams));
  } else {
    decode_params(info.store->get(info.prefix + "params", cfg.connect_timeout), &info);
  }
  return info;
}

}  // namespace geoccl::membership

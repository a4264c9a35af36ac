#include "membership/rendezvous.h"

#include <random>

#include "core/logging.h"
#include "geoccl/error.h"
#include "protocol/wire.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::membership {
namespace {

std::vector<uint8_t> u64_bytes(uint64_t v) {
  std::vector<uint8_t> out;
  protocol::Writer(&out).u64(v);
  return out;
}

uint64_t bytes_u64(const std::vector<uint8_t>& b) {
  protocol::Reader r(b);
  uint64_t v = 0;
  if (!r.u64(&v)) throw Error(ErrorCode::kProtocol, "malformed session id in the store");
  return v;
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
    info.store->set(info.prefix + "session_id", u64_bytes(info.session_id));
  } else {
    info.session_id = bytes_u64(info.store->get(info.prefix + "session_id", cfg.connect_timeout));
  }
  return info;
}

}  // namespace geoccl::membership

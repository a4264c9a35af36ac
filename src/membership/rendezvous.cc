#include "membership/rendezvous.h"

#include <cstdio>
#include <random>
#include <thread>

#include "core/logging.h"
#include "geoccl/error.h"
#include "membership/sealed_store.h"
#include "membership/store_url.h"
#include "protocol/store_codec.h"
#include "protocol/wire.h"
#include "runtime/socket.h"

namespace geoccl::membership {
namespace {

using protocol::StoreOwner;

uint64_t random_u64() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd() ^ 0x9e3779b97f4a7c15ull;
}

// Where the store is, for messages: the URL of an external store, else host:port.
std::string store_address(const Config& cfg) {
  return cfg.store.empty() ? cfg.master_addr + ":" + std::to_string(cfg.master_port) : cfg.store;
}

// The group's parameters, chosen by rank 0:
// u64 session id | u32 world size | str session name | blob GroupParams (group_params.h).
struct Params {
  uint64_t session_id = 0;
  uint32_t world_size = 0;
  std::string session;
  GroupParams group;
};

std::vector<uint8_t> encode_params(const Params& p) {
  std::vector<uint8_t> out;
  protocol::Writer w(&out);
  w.u64(p.session_id);
  w.u32(p.world_size);
  w.str(p.session);
  w.blob(p.group.encode());
  return out;
}

Params decode_params(const std::vector<uint8_t>& b) {
  protocol::Reader r(b);
  Params p;
  std::vector<uint8_t> group;
  std::string why;
  std::optional<GroupParams> g;
  if (!r.u64(&p.session_id) || !r.u32(&p.world_size) || !r.str(&p.session, protocol::kMaxKey) ||
      !r.blob(&group, 64 << 10) || r.remaining() != 0 || !(g = GroupParams::decode(group, &why)))
    throw Error(ErrorCode::kProtocol, "malformed group parameters in the store" + (why.empty() ? "" : ": " + why));
  p.group = *g;
  return p;
}

// A rank joins only a group of its own world size and session: anything else is another job's
// store, or a rank started with the wrong settings.
void check_group(const Config& cfg, uint32_t world_size, const std::string& session,
                 const std::string& whose) {
  const std::string me = "this rank (rank " + std::to_string(cfg.rank) + ")";
  if (world_size != static_cast<uint32_t>(cfg.world_size))
    throw Error(ErrorCode::kInvalidArgument,
                "world size mismatch: " + me + " has world size " + std::to_string(cfg.world_size) + ", " +
                    whose + " has " + std::to_string(world_size) + " (session '" + session +
                    "'): another job's store, or a wrong WORLD_SIZE");
  if (session != cfg.session)
    throw Error(ErrorCode::kInvalidArgument,
                "session mismatch: " + me + " has session '" + cfg.session + "', " + whose + " has '" +
                    session + "': another job's store, or a wrong GEOCCL_SESSION");
}

// A store hosted by a job's rank 0 names its owner (see protocol/store_codec.h). A rank 0 that
// could not host its own store refuses any owned one: it belongs to another job's rank 0. Other
// ranks refuse one owned by a group they do not belong to. Standalone stores are shared.
void check_owner(const Config& cfg, Store& store) {
  const std::string key(protocol::kOwnerKey);
  if (!store.check(key)) return;
  const auto owner = protocol::decode_store_owner(store.get(key, cfg.connect_timeout));
  const std::string where = store_address(cfg);
  if (!owner) throw Error(ErrorCode::kProtocol, "the store at " + where + " holds a malformed owner record");
  if (cfg.rank == 0) {
    char token[32];
    std::snprintf(token, sizeof token, "%016llx", static_cast<unsigned long long>(owner->token));
    const std::string other = "the store at " + where + " belongs to another job (session '" +
                              owner->session + "', world size " + std::to_string(owner->world_size) +
                              ", job token " + token + "): this job's rank 0 (session '" + cfg.session +
                              "', world size " + std::to_string(cfg.world_size) + ")";
    if (!cfg.store.empty())
      throw Error(ErrorCode::kProtocol, other + " was told to use it by GEOCCL_STORE, but that store is "
                                                "hosted by another job's rank 0 and dies with it. Point "
                                                "GEOCCL_STORE at a standalone `geoccl store` or etcd");
    throw Error(ErrorCode::kProtocol,
                other + " could not host its own store there because the port is taken. Use a free "
                        "MASTER_PORT, or a standalone `geoccl store` for groups that share one store");
  }
  check_group(cfg, owner->world_size, owner->session, "the job that owns the store at " + where);
}

// The store cfg.store names, else the TCP store at master_addr:master_port.
std::unique_ptr<Store> connect_store(const Config& cfg) {
  if (cfg.store.empty()) return std::make_unique<StoreClient>(cfg.master_addr, cfg.master_port, cfg.connect_timeout);
  parse_store_url(cfg.store, "GEOCCL_STORE");  // a malformed URL is named by its variable
  return open_store(cfg.store, cfg.connect_timeout);
}

}  // namespace

std::string choose_bind_address(const Config& cfg) {
  if (!cfg.bind_addr.empty()) return cfg.bind_addr;
  std::string a = runtime::route_source_address(cfg.master_addr);
  return a.empty() ? "127.0.0.1" : a;
}

RendezvousInfo join_store(const Config& cfg) {
  RendezvousInfo info;
  info.secret = security::load_secret(cfg);
  if (cfg.rank == 0 && cfg.store.empty()) {
    // Host the store unless something already serves master_addr:master_port. With a secret it
    // takes only requests authenticated with it.
    const StoreOwner me{cfg.session, static_cast<uint32_t>(cfg.world_size), random_u64()};
    try {
      info.server = std::make_unique<StoreServer>(cfg.master_addr, cfg.master_port,
                                                  protocol::encode_store_owner(me), info.secret);
    } catch (const Error& e) {
      GEOCCL_LOG(kInfo, "not hosting the store (" << e.what() << "); connecting to the existing one");
    }
  }
  info.store = connect_store(cfg);
  // Every request to the TCP store authenticated (a store with the secret requires it; etcd has
  // its own access control).
  if (auto* tcp = dynamic_cast<StoreClient*>(info.store.get()); tcp && info.secret) tcp->authenticate(*info.secret);
  if (!info.server) check_owner(cfg, *info.store);  // the owner record is the server's, in clear
  if (info.secret) info.store = std::make_unique<SealedStore>(std::move(info.store), *info.secret);
  // Several communicators may share one store (new groups, tests): every rank counts the ones it
  // created in this session, and all ranks create them in the same order.
  const std::string base = "geoccl/" + cfg.session + "/";
  const int64_t gen = info.store->add(base + "gen/" + std::to_string(cfg.rank), 1);
  info.prefix = base + "g" + std::to_string(gen) + "/";
  info.session = std::string(protocol::key_session(info.prefix));
  // Unset (0): each WAN peer's stream count is measured (api/startup/device_options.cc).
  const GroupParams mine = GroupParams::from_config(cfg, cfg.tcp_streams);
  if (cfg.rank == 0) {
    info.session_id = random_u64();
    info.params = mine;
    info.store->set(info.prefix + "params",
                    encode_params({info.session_id, static_cast<uint32_t>(cfg.world_size), cfg.session, mine}));
  } else {
    std::vector<uint8_t> params;
    try {
      params = info.store->get(info.prefix + "params", cfg.connect_timeout);
    } catch (const Error& e) {
      // Sealed with another secret: this rank's secret differs from rank 0's. The others learn it
      // from the setup error this rank leaves (which they cannot open either: kProtocol).
      if (e.code() == ErrorCode::kProtocol && info.secret) {
        const std::string msg = "rank " + std::to_string(cfg.rank) + " cannot open the group's parameters: " +
                                "its group secret differs from rank 0's";
        try {
          info.store->set(info.prefix + kSetupErrorKey, std::vector<uint8_t>(msg.begin(), msg.end()));
        } catch (const Error&) {
        }
        throw Error(ErrorCode::kProtocol, msg + " (" + e.what() + ")");
      }
      throw;
    }
    const Params p = decode_params(params);
    check_group(cfg, p.world_size, p.session, "rank 0 of group " + info.prefix + " at " + store_address(cfg));
    info.session_id = p.session_id;
    info.params = p.group;
    const std::string diff = describe_difference(p.group, mine);
    if (!diff.empty()) {
      // Every other rank learns it from the store while it connects (setup_error()).
      const std::string msg = "rank " + std::to_string(cfg.rank) + " was started with group parameters "
                              "that differ from rank 0's: " + diff;
      info.store->set(info.prefix + kSetupErrorKey, std::vector<uint8_t>(msg.begin(), msg.end()));
      throw Error(ErrorCode::kInvalidArgument, msg);
    }
  }
  info.data_streams = static_cast<int>(info.params.data_streams);
  return info;
}

std::optional<std::string> setup_error(const RendezvousInfo& info) {
  if (!info.store) return std::nullopt;
  // The store refused a rank's requests for want of the secret: that rank never comes.
  const std::string refused = protocol::refused_key(info.session);
  if (info.secret && info.store->check(refused)) {
    const auto v = info.store->get(refused, std::chrono::seconds(5));
    throw Error(ErrorCode::kProtocol, std::string(v.begin(), v.end()));
  }
  const std::string key = info.prefix + kSetupErrorKey;
  if (!info.store->check(key)) return std::nullopt;
  const auto v = info.store->get(key, std::chrono::seconds(5));
  return std::string(v.begin(), v.end());
}

void await_setup_error_seen(const RendezvousInfo& info, int ranks, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  try {
    while (info.store->add(info.prefix + kSetupErrorSeenKey, 0) < ranks &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } catch (const Error&) {
    // The store is gone already: nothing to wait for.
  }
}

}  // namespace geoccl::membership

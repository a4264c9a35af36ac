// Start-up step "connect" (startup.h).
#include <algorithm>

#include "api/startup/device_options.h"
#include "api/startup/startup.h"
#include "core/logging.h"
#include "transport/router.h"

namespace geoccl::api::startup {

using Clock = std::chrono::steady_clock;

std::unique_ptr<transport::Router> connect(const Config& cfg, transport::Group& group,
                                           membership::RendezvousInfo& rdv) {
  const auto deadline = Clock::now() + cfg.connect_timeout;
  // A rank that could not join (other group parameters) left its reason in the store: every
  // rank still setting up fails with it instead of waiting for that rank.
  auto poll = [&] {
    std::optional<std::string> why;
    ErrorCode code = ErrorCode::kInvalidArgument;
    try {
      why = membership::setup_error(rdv);
    } catch (const Error& e) {
      // A reason sealed with another group secret (security/store_seal.h): a rank with a wrong
      // secret left it.
      if (e.code() != ErrorCode::kProtocol) throw;
      const std::string what = e.what(), prefix = std::string(error_code_name(e.code())) + ": ";
      why = what.starts_with(prefix) ? what.substr(prefix.size()) : what;
      code = ErrorCode::kProtocol;
    }
    if (why) {
      rdv.store->add(rdv.prefix + membership::kSetupErrorSeenKey, 1);
      throw Error(code, *why);
    }
  };
  auto publish = [&](const std::string& key, const std::vector<uint8_t>& value) {
    rdv.store->set(rdv.prefix + "addr/" + key, value);
  };
  // Every key read as soon as it is there: all that are, in one batch (Store::get_present); then
  // a wait for the first still missing one, the set-up's errors polled every 200 ms meanwhile,
  // and a batch of the rest again once it came. At most kBatches batches, then one key at a time:
  // ranks that publish one by one cost the store at most kBatches + 1 reads of each key per rank.
  constexpr int kBatches = 8;
  auto lookup = [&](const std::vector<std::string>& keys) {
    std::vector<std::string> full;
    for (const auto& k : keys) full.push_back(rdv.prefix + "addr/" + k);
    std::vector<std::optional<std::vector<uint8_t>>> got(keys.size());
    int batches = 0;
    for (bool batch = true;;) {
      if (batch && batches < kBatches) {
        ++batches;
        std::vector<size_t> missing;
        std::vector<std::string> ask;
        for (size_t i = 0; i < keys.size(); ++i)
          if (!got[i]) {
            missing.push_back(i);
            ask.push_back(full[i]);
          }
        auto present = rdv.store->get_present(ask);
        for (size_t j = 0; j < missing.size() && j < present.size(); ++j)
          if (present[j]) got[missing[j]] = std::move(present[j]);
      }
      const auto first = std::find_if(got.begin(), got.end(), [](const auto& v) { return !v; });
      if (first == got.end()) break;
      const auto i = static_cast<size_t>(first - got.begin());
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      try {
        got[i] = rdv.store->get(full[i], std::clamp(left, std::chrono::milliseconds(1), std::chrono::milliseconds(200)));
        batch = true;
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kTimeout || left.count() <= 200) throw;
        poll();
        batch = false;
      }
    }
    std::vector<std::vector<uint8_t>> values;
    values.reserve(got.size());
    for (auto& v : got) values.push_back(std::move(*v));
    return values;
  };
  try {
    const std::string bind = cfg.world_size > 1 ? membership::choose_bind_address(cfg) : "";
    auto router = std::make_unique<transport::Router>(group, device_options(cfg, rdv.data_streams),
                                                      router_options(cfg), bind, publish, lookup, poll, deadline);
    if (cfg.world_size > 1) GEOCCL_LOG(kInfo, "connected to all peers");
    return router;
  } catch (const Error& e) {
    // A peer that rejected this rank's handshake (a wrong group secret, another version): the
    // ranks still setting up fail with the reason too, instead of waiting for this one.
    if (e.code() == ErrorCode::kProtocol && rdv.store) {
      const std::string msg = "rank " + std::to_string(cfg.rank) + " could not connect: " + e.what();
      try {
        if (!membership::setup_error(rdv))
          rdv.store->set(rdv.prefix + membership::kSetupErrorKey, std::vector<uint8_t>(msg.begin(), msg.end()));
      } catch (const Error&) {
      }
    }
    // The store lives in this process: keep it up until the other ranks have read why the
    // setup failed (bounded), so that they fail with that reason rather than a lost store.
    if (rdv.server && (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kProtocol))
      membership::await_setup_error_seen(rdv, cfg.world_size - 1, std::chrono::seconds(5));
    throw;
  }
}

}  // namespace geoccl::api::startup

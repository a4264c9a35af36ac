#include "transport/liveness_monitor.h"

#include <algorithm>

#include "core/logging.h"

namespace geoccl::transport {

LivenessMonitor::LivenessMonitor(Group& group, const protocol::LivenessOptions& o, std::vector<Device*> carrier,
                                 std::vector<Device*> devices)
    : group_(group), options_(o), carrier_(std::move(carrier)), devices_(std::move(devices)),
      liveness_(group.rank(), group.size(), o, Clock::now()), next_heartbeat_(Clock::now()) {
  group_.loop().run_owned([this] {
    group_.set_liveness(&liveness_);
    tick();
  });
}

LivenessMonitor::~LivenessMonitor() {
  group_.loop().run_owned([this] {
    stopped_ = true;
    group_.loop().cancel_timer(timer_);
    group_.set_liveness(nullptr);
  });
}

void LivenessMonitor::set_domains(std::vector<int> domain_of, std::vector<std::string> names) {
  group_.loop().run_owned([&] { liveness_.set_domains(std::move(domain_of), std::move(names)); });
}

protocol::Liveness::State LivenessMonitor::state(int peer) const {
  protocol::Liveness::State s{};
  group_.loop().run_owned([&] { s = liveness_.state(peer); });
  return s;
}

void LivenessMonitor::tick() {
  timer_ = 0;
  if (stopped_ || group_.failed()) return;
  const auto now = Clock::now();
  for (Device* d : devices_) d->tick(now);
  if (now >= next_heartbeat_) {
    const auto payload = protocol::encode_heartbeat(liveness_.silent_peers(now));
    for (int p : liveness_.watched())
      if (Device* d = carrier_[static_cast<size_t>(p)]) d->send_heartbeat(p, payload);
    next_heartbeat_ = now + options_.interval;
  }
  // A host answers when it acknowledged something within three intervals: a heartbeat left in
  // each of them.
  for (int p : liveness_.watched())
    if (Device* d = carrier_[static_cast<size_t>(p)]) liveness_.host_answers(p, d->host_answers(p, 3 * options_.interval), now);
  for (auto& a : liveness_.tick(now)) {
    using Kind = protocol::Liveness::Action::Kind;
    if (a.kind == Kind::kWarn) GEOCCL_LOG(kWarn, a.message);
    if (a.kind == Kind::kRecovered) GEOCCL_LOG(kWarn, a.message);
    if (a.kind == Kind::kFail) {
      GEOCCL_LOG(kError, a.message);
      group_.fail(a.code, a.message, /*tell_peers=*/true, {a.peer});
      return;
    }
  }
  const auto period = std::min<Clock::duration>(options_.interval / 4, std::chrono::milliseconds(250));
  timer_ = group_.loop().add_timer(now + period, [this] { tick(); });
}

}  // namespace geoccl::transport

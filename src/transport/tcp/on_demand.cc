// TcpDevice, connections on demand (TcpOptions::lazy): a pair that connect() left out is
// connected when a frame first needs it. The higher rank's connector thread dials it as connect()
// does; the lower rank's asks the higher one to dial back (a Hello with kHelloFlagDialBack,
// directly or through another rank's relay, with the group secret's proof when there is one),
// and the higher rank serves that request here.
#include "transport/tcp/device.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "core/logging.h"

#include "protocol/handshake_machine.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::transport::tcp {

void TcpDevice::want_connection(TcpPeer& p, bool sending) {
  if (!options_.lazy || p.met || !set_up_.load() || closing_.load() || group_.failed() ||
      !std::binary_search(served_.begin(), served_.end(), p.rank))
    return;
  if (group_.rank() < p.rank && !sending) return;  // a receive waits for its sender
  if (p.connecting.exchange(true)) return;
  if (p.connector.joinable()) p.connector.join();  // an earlier attempt that has ended
  p.connector = std::thread([this, &p] { connect_on_demand(p); });
}

void TcpDevice::connect_on_demand(TcpPeer& p) {
  const auto deadline = Clock::now() + options_.resume_timeout;
  try {
    if (group_.rank() > p.rank) {
      GEOCCL_LOG(kDebug, "connecting rank " << p.rank << " on demand");
      if (dial_setup_streams(p, deadline, closing_, true) == SetupDial::kRelay) {
        const Poll none;
        connect_through_relay(p, served_, none, deadline);
      }
    } else {
      ask_dial_back(p, deadline);
    }
  } catch (const Error& e) {
    // e.what() begins with its code's name, which the group's failure says again.
    const ErrorCode code = e.code();
    std::string what = e.what();
    if (const std::string prefix = std::string(error_code_name(code)) + ": "; what.starts_with(prefix))
      what = what.substr(prefix.size());
    const std::string why = "connecting rank " + std::to_string(p.rank) + " on demand: " + what;
    group_.loop().post([this, &p, code, why] {
      if (closing_.load() || group_.failed()) return;
      group_.fail(code, why, true, {p.rank});
    });
  }
  // A later frame may start another attempt (the pair is met by now, or the group has failed).
  p.connecting.store(false);
}

bool TcpDevice::request_dial_back(const TcpPeer& p, int via, Clock::time_point deadline, std::string* why,
                                  bool* refused) {
  if (endpoint_of(via >= 0 ? via : p.rank).empty()) {
    *refused = false;
    *why = "no address for rank " + std::to_string(via >= 0 ? via : p.rank);
    return false;
  }
  bool rejected = false;
  security::ConnectionKeys none;  // with a secret the request is authenticated; its keys go unused
  const int fd = dial_via(p, via, false, kControlStream, protocol::kHelloFlagDialBack, deadline, why, &rejected, &none,
                          refused);
  // The peer said no: it does not connect on demand (another setting), or we are not welcome
  // (with a secret the request is authenticated: another secret is refused here too).
  if (rejected) throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " refused to connect to this rank: " + *why);
  if (fd < 0) return false;
  ::close(fd);  // answered: it dials back
  return true;
}

void TcpDevice::ask_dial_back(TcpPeer& p, Clock::time_point deadline) {
  const std::string ep = endpoint_of(p.rank);
  if (ep.empty())
    throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " published a malformed TCP address");
  // Where dial_via() reaches the peer (connect() notes a higher peer's address only for resume).
  group_.loop().run_owned([&] { p.endpoint = ep; });
  const bool may_relay = options_.relay_after.count() > 0 && group_.size() > 2;
  const auto direct_until = Clock::now() + options_.relay_after;
  std::string why = "no answer";
  while (!p.control_up.load()) {
    if (closing_.load() || group_.failed()) return;
    const auto now = Clock::now();
    if (now >= deadline)
      throw Error(ErrorCode::kTimeout, "rank " + std::to_string(p.rank) + " did not connect to this rank when asked (last: " +
                                           why + ")");
    bool refused = false, relayed = false;
    bool asked = request_dial_back(p, -1, std::min(deadline, now + std::chrono::seconds(2)), &why, &refused);
    if (refused)
      throw Error(ErrorCode::kPeerLost, "rank " + std::to_string(p.rank) + " refuses connections: its process is gone");
    if (!asked && may_relay && Clock::now() >= direct_until) {
      // No direct answer (a cut path, a firewall): through the ranks this one reaches, which the
      // peer's dial back will use too (connect_through_relay).
      std::vector<int> via;
      group_.loop().run_owned([&] {
        for (int r : served_)
          if (r != p.rank && peer(r).streams[kControlStream] && peer(r).relay.load() < 0) via.push_back(r);
      });
      for (int v : via) {
        if (closing_.load() || group_.failed()) return;
        std::string vwhy;
        if ((asked = relayed = request_dial_back(p, v, std::min(deadline, Clock::now() + relayed_attempt()), &vwhy,
                                                 &refused)))
          break;
        GEOCCL_LOG(kDebug, vwhy);
      }
    }
    // Its connection comes within a round trip or two (or a relay's time); ask again after that.
    const auto wait = std::min(deadline, Clock::now() + (asked && relayed ? relayed_attempt() : std::chrono::seconds(1)));
    while (!p.control_up.load() && Clock::now() < wait && !closing_.load() && !group_.failed())
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void TcpDevice::serve_dial_back(int fd, protocol::HandshakeAcceptor& hs) {
  const int from = static_cast<int>(hs.hello().rank);  // a lower rank (the handshake saw to that)
  if (!options_.lazy) {
    hs.refuse(protocol::HandshakeStatus::kRefused, "this rank connects its peers at start-up, not on demand");
  } else if (hs.state() == protocol::HandshakeState::kJudge && hs.dial_back_needs_proof()) {
    // With a secret the request makes us dial only once the dialler has proved it (kDone, back
    // here); a wrong proof is refused and counted where any connection's is (on_pending_readable).
    hs.accept();
  } else {
    // Judged without a secret (answered here), or proved (the Reply went with the proof).
    if (hs.state() == protocol::HandshakeState::kJudge) {
      const auto out = hs.relay_reply(true);
      [[maybe_unused]] ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    drop_pending(fd);  // frees hs
    ::close(fd);
    want_connection(peer(from), false);  // we are the higher rank: we dial
    return;
  }
  if (const auto out = hs.take_output(); !out.empty())
    [[maybe_unused]] ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (hs.state() == protocol::HandshakeState::kRefused) reject_pending(fd, hs.why());
}

}  // namespace geoccl::transport::tcp

// TcpDevice, connections on demand (TcpOptions::lazy): a pair that connect() left out is
// connected when a frame first needs it. The higher rank's connector thread dials it as connect()
// does; the lower rank's asks the higher one to dial back (a Hello with kHelloFlagDialBack,
// directly or through another rank's relay), and the higher rank serves that request here.
#include "transport/tcp/device.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

#include "core/logging.h"

#include "protocol/handshake_machine.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::transport::tcp {

void TcpDevice::want_connection(TcpPeer& p, bool sending) {
  if (!options_.lazy || p.met || !set_up_.load() || closing_.load() || group_.failed() ||
      !serves_[static_cast<size_t>(p.rank)])
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
  *refused = false;
  const std::string ep = endpoint_of(via >= 0 ? via : p.rank);
  const std::string where = "rank " + std::to_string(p.rank) + (via >= 0 ? " through rank " + std::to_string(via) : "");
  if (ep.empty()) {
    *why = "no address for " + where;
    return false;
  }
  std::string host;
  uint16_t port = 0;
  split_host_port(ep, &host, &port);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const int fd = left.count() > 0 ? connect_with_timeout(host, port, left) : -1;
  if (fd < 0) {
    *refused = via < 0 && errno == ECONNREFUSED;
    *why = "cannot connect to " + where + ": " + std::strerror(errno);
    return false;
  }
  // Runs one handshake on the blocking socket; false on an I/O failure.
  auto run = [&](protocol::HandshakeDialler& hs) {
    std::array<uint8_t, 512> buf;
    while (hs.state() == protocol::HandshakeState::kRunning) {
      const auto out = hs.take_output();
      if (!out.empty() && !write_all(fd, out, deadline)) return false;
      const auto in = std::span<uint8_t>(buf.data(), std::min(buf.size(), hs.want()));
      if (!in.empty() && !read_all(fd, in, deadline)) return false;
      hs.feed(in);
    }
    return true;
  };
  const auto setup = tcp_handshake();
  bool ok = true;
  if (via >= 0) {  // first the relay: "connect me to p"
    protocol::HandshakeDialler request(setup, static_cast<uint32_t>(via), kControlStream, {},
                                       protocol::kHelloFlagRelayRequest, static_cast<uint32_t>(p.rank));
    ok = run(request) && request.state() == protocol::HandshakeState::kDone;
    if (!ok) *why = "rank " + std::to_string(via) + " did not relay to rank " + std::to_string(p.rank);
  }
  if (ok) {
    protocol::HandshakeDialler hs(setup, static_cast<uint32_t>(p.rank), kControlStream, {},
                                  protocol::kHelloFlagDialBack | (via >= 0 ? protocol::kHelloFlagRelayed : 0),
                                  via >= 0 ? static_cast<uint32_t>(via) : 0);
    ok = run(hs);
    if (!ok) *why = "asking " + where + " failed: " + std::strerror(errno);
    // The peer said no: it does not connect on demand (another setting), or we are not welcome.
    if (hs.state() == protocol::HandshakeState::kRefused) {
      ::close(fd);
      throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " refused to connect to this rank: " + hs.why());
    }
  }
  ::close(fd);
  return ok;
}

void TcpDevice::ask_dial_back(TcpPeer& p, Clock::time_point deadline) {
  if (endpoint_of(p.rank).empty())
    throw Error(ErrorCode::kProtocol, "rank " + std::to_string(p.rank) + " published a malformed TCP address");
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
  } else {
    const auto out = hs.relay_reply(true);
    [[maybe_unused]] ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    drop_pending(fd);  // frees hs
    ::close(fd);
    want_connection(peer(from), false);  // we are the higher rank: we dial
    return;
  }
  if (const auto out = hs.take_output(); !out.empty())
    [[maybe_unused]] ssize_t w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  reject_pending(fd, hs.why());
}

}  // namespace geoccl::transport::tcp

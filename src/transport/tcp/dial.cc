// TcpDevice, dialling: connect() dials every lower peer's streams (through a relay when the
// direct path gives no answer; on_demand.cc connects the pairs it leaves out), and the threads
// that keep a pair connected later: the re-dialler
// of a broken stream, the prober of a peer whose stream broke, the fail-over to a relay and the
// watch for the direct path's return, the opener of more data streams.
#include "transport/tcp/device.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <thread>

#include "core/logging.h"

#include "protocol/handshake_machine.h"
#include "protocol/liveness.h"
#include "transport/dial_all.h"
#include "transport/tcp/address.h"
#include "transport/tcp/socket_util.h"

namespace geoccl::transport::tcp {

std::string TcpDevice::endpoint_of(int rank) const {
  std::lock_guard lk(endpoints_mu_);
  return rank >= 0 && static_cast<size_t>(rank) < endpoints_.size() ? endpoints_[static_cast<size_t>(rank)] : "";
}

void TcpDevice::adopt_dialled(int fd, int peer_rank, int stream, const security::ConnectionKeys& keys, int via) {
  try {
    set_nonblocking(fd, true);
    group_.loop().run_owned([&] { adopt(fd, peer_rank, stream, keys, via); });
  } catch (...) {
    ::close(fd);
    throw;
  }
}

void TcpDevice::connect_through_relay(TcpPeer& p, const std::vector<int>& peers, const Poll& poll,
                                      Clock::time_point deadline) {
  ThrottledPoll maybe_poll(poll);
  // Ranks this one reaches directly first: they answered us, and likely answer the peer.
  std::vector<int> candidates, later;
  group_.loop().run_owned([&] {
    for (int r : peers) {
      if (r == p.rank) continue;
      const TcpPeer& q = peer(r);
      (q.streams[kControlStream] && q.relay.load() < 0 ? candidates : later).push_back(r);
    }
  });
  candidates.insert(candidates.end(), later.begin(), later.end());
  if (const int known = group_.relay(p.rank); known >= 0) {  // another class's relay first
    candidates.erase(std::remove(candidates.begin(), candidates.end(), known), candidates.end());
    candidates.insert(candidates.begin(), known);
  }
  const auto attempt = relayed_attempt();
  std::string why = "no other rank to relay through";
  int chosen = -1;
  while (chosen < 0) {
    throw_if_stopping();
    for (int c : candidates) {
      throw_if_stopping();
      p.relay.store(c);
      bool rejected = false;
      security::ConnectionKeys keys;
      const int fd = dial(p, p.wan, kControlStream, std::min(deadline, Clock::now() + attempt), &why, &rejected, &keys);
      if (fd >= 0) {
        adopt_dialled(fd, p.rank, kControlStream, keys, c);
        chosen = c;
        break;
      }
      p.relay.store(-1);
      if (rejected) throw Error(ErrorCode::kProtocol, why);  // the peer itself answered: final
      GEOCCL_LOG(kDebug, why);
      maybe_poll();
      if (Clock::now() >= deadline) break;
    }
    if (chosen >= 0) break;
    if (Clock::now() >= deadline)
      throw Error(ErrorCode::kTimeout, "rank " + std::to_string(p.rank) + " at " + p.endpoint +
                                           " did not answer directly within " +
                                           std::to_string(options_.relay_after.count()) +
                                           " ms, and no rank relayed to it in time (last: " + why + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // relays still starting
  }
  GEOCCL_LOG(kInfo, "rank " << p.rank << " reached through rank " << chosen << "'s relay");
  group_.set_relay(p.rank, chosen);
  for (int stream = 1; stream < kSetupStreams; ++stream) {
    std::string swhy;
    bool rejected = false;
    security::ConnectionKeys keys;
    int fd = -1;
    while ((fd = dial(p, p.wan, stream, attempt_until(deadline), &swhy, &rejected, &keys)) < 0) {
      if (rejected) throw Error(ErrorCode::kProtocol, swhy);
      if (Clock::now() >= deadline) throw Error(ErrorCode::kTimeout, swhy);
      throw_if_stopping();
      maybe_poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    adopt_dialled(fd, p.rank, stream, keys, chosen);
  }
}

TcpDevice::SetupDial TcpDevice::dial_setup_streams(TcpPeer& p, Clock::time_point deadline,
                                                   const std::atomic<bool>& stop, bool gone_on_refusal) {
  const int r = p.rank;
  p.endpoint = endpoint_of(r);
  if (p.endpoint.empty())
    throw Error(ErrorCode::kProtocol, "rank " + std::to_string(r) + " published a malformed TCP address");
  // The first stream finds out whether the peer answers directly: a path that gives no answer
  // at all within relay_after (a firewall that drops, a cut link) is left to a relay.
  const bool may_relay = options_.relay_after.count() > 0 && group_.size() > 2;
  if (may_relay && group_.relay(r) >= 0) return SetupDial::kRelay;  // another class found no direct path
  const auto direct_deadline = may_relay ? std::min(deadline, Clock::now() + options_.relay_after) : deadline;
  for (int stream = 0; stream < kSetupStreams; ++stream) {
    std::string why;
    bool rejected = false, refused = false;
    int fd = -1;
    security::ConnectionKeys keys;
    // The peer is listening already (it published its address), but retry briefly on refusal.
    while ((fd = dial(p, p.wan, stream, attempt_until(stream == 0 ? direct_deadline : deadline), &why, &rejected,
                      &keys, &refused)) < 0) {
      if (rejected) throw Error(ErrorCode::kProtocol, why);  // dial_all polls for the peer's reason
      if (refused && gone_on_refusal) throw Error(ErrorCode::kPeerLost, why + ": its process is gone");
      if (stream == 0 && !refused && direct_deadline < deadline && Clock::now() >= direct_deadline) {
        GEOCCL_LOG(kInfo, "rank " << r << " did not answer directly within " << options_.relay_after.count()
                                  << " ms (" << why << "): trying relays");
        return SetupDial::kRelay;
      }
      if (Clock::now() >= deadline) throw Error(ErrorCode::kTimeout, why);
      if (stop.load() || group_.failed()) return SetupDial::kStopped;  // the set-up is over
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    adopt_dialled(fd, r, stream, keys, -1);
  }
  return SetupDial::kDone;
}

void TcpDevice::connect(const std::vector<int>& peers, const AddressOf& address_of, const Poll& poll,
                        Clock::time_point deadline) {
  ThrottledPoll maybe_poll(poll);
  {
    // Every peer's address, decoded once: where this rank dials, and where the relay requests it
    // may serve connect to (relay.h).
    std::lock_guard lk(endpoints_mu_);
    endpoints_.assign(static_cast<size_t>(group_.size()), "");
    for (int r : peers) {
      std::string ep;
      if (decode_address(address_of(r), &ep)) endpoints_[static_cast<size_t>(r)] = ep;
    }
  }
  served_ = peers;
  // The pairs set up now: all of them, or with connections on demand those 1, 2, 4, ... apart
  // round the ring (both ends agree): the ring's neighbours, the peers liveness watches past 32
  // ranks, and those of the start-up's Bruck allgather (about 2 log2 n).
  std::vector<int> now;
  const int n = group_.size(), me = group_.rank();
  for (int r : peers)
    if (!options_.lazy || protocol::power_of_two_apart(me, r, n)) now.push_back(r);
  std::vector<int> lower;
  for (int r : now)
    if (r < me) lower.push_back(r);
  std::mutex unanswered_mu;
  std::vector<int> unanswered;  // lower peers that no direct attempt reached
  // Each lower peer's streams in order, several peers at once (dial_all.h).
  dial_all(lower, poll, [&](int r, const std::atomic<bool>& stop) {
    if (dial_setup_streams(peer(r), deadline, stop) != SetupDial::kRelay) return;
    std::lock_guard lk(unanswered_mu);
    unanswered.push_back(r);
  });
  std::sort(unanswered.begin(), unanswered.end());
  for (int r : unanswered) connect_through_relay(peer(r), peers, poll, deadline);
  // Wait for every higher peer's connections.
  for (;;) {
    std::string missing;
    group_.loop().run_owned([&] {
      for (int r : now) {
        if (r < me) continue;
        const auto& s = peer(r).streams;
        if (std::any_of(s.begin(), s.begin() + kSetupStreams, [](const auto& c) { return !c; }))
          missing += (missing.empty() ? "" : ",") + std::to_string(r);
      }
    });
    if (missing.empty()) break;
    if (Clock::now() > deadline) {
      std::string auth;
      group_.loop().run_owned([&] { auth = last_auth_failure_; });
      throw Error(ErrorCode::kTimeout, "rank(s) " + missing + " did not connect in time" +
                                           (auth.empty() ? "" : " (last refused: " + auth + ")"));
    }
    maybe_poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  // Where the higher peers listen (they published it before dialling us): when a stream to one
  // of them breaks, a connection refused there tells that its process is gone.
  if (options_.resume || options_.wan_resume) {
    std::vector<std::pair<int, std::string>> known;
    for (int r : peers)
      if (r > me)
        if (std::string ep = endpoint_of(r); !ep.empty()) known.emplace_back(r, std::move(ep));
    // One trip to the loop thread for all of them (at 128 ranks on 2 cores a trip each cost ms).
    group_.loop().run_owned([&] {
      for (auto& [r, ep] : known) peer(r).endpoint = std::move(ep);
    });
  }
  set_up_.store(true);
}

Clock::time_point TcpDevice::attempt_until(Clock::time_point deadline) const {
  return set_up_.load() ? std::min(deadline, Clock::now() + relayed_attempt()) : deadline;
}

void TcpDevice::throw_if_stopping() const {
  if (const auto f = group_.failure()) throw Error(f->code, f->message, f->ranks);
  if (closing_.load()) throw Error(ErrorCode::kAborted, "this rank is closing");
}

int TcpDevice::via_for(const TcpPeer& p, int stream) const {
  if (const int r = p.relay.load(); r >= 0) return r;
  return stream >= kFirstTwoHopStream ? p.two_hop.load() : -1;
}

int TcpDevice::dial(const TcpPeer& p, bool wan, int stream, Clock::time_point deadline,
                    std::string* why, bool* rejected, security::ConnectionKeys* keys, bool* refused, int* via_used) {
  const int via = via_for(p, stream);
  if (via_used) *via_used = via;
  return dial_via(p, via, wan, stream, 0, deadline, why, rejected, keys, refused);
}

int TcpDevice::dial_via(const TcpPeer& p, int via, bool wan, int stream, uint32_t flags, Clock::time_point deadline,
                        std::string* why, bool* rejected, security::ConnectionKeys* keys, bool* refused) {
  *rejected = false;
  *keys = {};
  if (refused) *refused = false;
  const std::string dialled = via >= 0 ? endpoint_of(via) : p.endpoint;
  std::string host;
  uint16_t port = 0;
  split_host_port(dialled, &host, &port);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  const std::string where = "rank " + std::to_string(p.rank) + " at " + p.endpoint +
                            (via >= 0 ? " through rank " + std::to_string(via) + "'s relay at " + dialled : "");
  if (left.count() <= 0) {
    *why = "cannot connect to " + where;
    return -1;
  }
  const int fd = connect_with_timeout(host, port, left, [this, wan](int s) {
    const uint64_t b = wan ? options_.wan_buffer_bytes : options_.buffer_bytes;
    if (b > 0) set_buffer_sizes(s, b);
  });
  if (fd < 0) {
    if (refused) *refused = via < 0 && errno == ECONNREFUSED;
    *why = "cannot connect to " + where + ": " + std::strerror(errno);
    return -1;
  }
  set_nodelay(fd);
  const std::string& cc = wan ? options_.wan_congestion_control : options_.congestion_control;
  if (!cc.empty()) set_congestion_control(fd, cc);
  const auto setup = tcp_handshake();
  // Runs one handshake to its end on the blocking socket; false on an I/O failure (*why says).
  auto run = [&](protocol::HandshakeDialler& hs, const char* what) {
    std::array<uint8_t, 512> buf;
    for (;;) {
      const auto out = hs.take_output();
      if (!out.empty() && !write_all(fd, out, deadline)) break;
      if (hs.state() != protocol::HandshakeState::kRunning) return true;
      const auto in = std::span<uint8_t>(buf.data(), std::min(buf.size(), hs.want()));
      if (!read_all(fd, in, deadline)) break;
      hs.feed(in);
    }
    *why = std::string(what) + " with " + where + " failed: " + std::strerror(errno);
    ::close(fd);
    return false;
  };
  if (via >= 0) {
    // First the relay: "connect me to p". It answers once it reaches p (or cannot).
    protocol::HandshakeDialler request(setup, static_cast<uint32_t>(via), static_cast<uint16_t>(stream), {},
                                       protocol::kHelloFlagRelayRequest, static_cast<uint32_t>(p.rank));
    if (!run(request, "relay request")) return -1;
    if (request.state() != protocol::HandshakeState::kDone) {
      // Not final: another relay, or this one later, may reach the peer.
      *why = "rank " + std::to_string(via) + " did not relay to " + where + ": " + request.why();
      ::close(fd);
      return -1;
    }
  }
  protocol::HandshakeDialler hs(setup, static_cast<uint32_t>(p.rank), static_cast<uint16_t>(stream), {},
                                flags | (via >= 0 ? protocol::kHelloFlagRelayed : 0),
                                via >= 0 ? static_cast<uint32_t>(via) : 0);
  if (!run(hs, "handshake")) return -1;
  if (hs.state() == protocol::HandshakeState::kDone) {
    *keys = hs.keys();
    return fd;
  }
  ::close(fd);
  *rejected = true;
  *why = hs.auth_failed() ? "authentication with " + where + " failed: " + hs.why() : where + " rejected us: " + hs.why();
  return -1;
}

bool TcpDevice::can_resume(const TcpPeer& p, int stream) const { return resume_refusal(p, stream) == nullptr; }

void TcpDevice::stream_broken(TcpPeer& p, int stream) {
  if (group_.rank() > p.rank) {  // we connected it: connect it again
    // One attempt sends one SYN: it waits a few round trips (the handshake takes two), so that a
    // path that comes back is found within about that.
    const auto rtt = std::chrono::duration_cast<std::chrono::milliseconds>(p.streams[kControlStream]->srtt());
    auto attempt = std::clamp(3 * rtt + std::chrono::milliseconds(200), std::chrono::milliseconds(300),
                              std::chrono::milliseconds(2000));
    // Through a two-hop path's relay: the relay connects on to the peer first, over another path
    // whose RTT this stream does not know.
    if (p.relay.load() < 0 && via_for(p, stream) >= 0) attempt = std::max(3 * attempt, std::chrono::milliseconds(2000));
    std::thread& t = p.dialers[static_cast<size_t>(stream)];
    if (t.joinable()) t.join();
    t = std::thread([this, &p, stream, wan = p.wan.load(), attempt] { redial(p, wan, stream, attempt); });
    return;
  }
  p.streams[static_cast<size_t>(stream)]->await_resume(options_.resume_timeout);
  // The peer re-establishes it unless its process is gone: then its address refuses connections.
  if (p.endpoint.empty() || p.probing.exchange(true)) return;
  if (p.prober.joinable()) p.prober.join();
  p.prober = std::thread([this, &p] { probe(p); });
}

void TcpDevice::probe(TcpPeer& p) {
  std::string host;
  uint16_t port = 0;
  split_host_port(p.endpoint, &host, &port);
  const int fd = connect_with_timeout(host, port, std::chrono::seconds(2), {});
  const bool refused = fd < 0 && errno == ECONNREFUSED;
  if (fd >= 0) ::close(fd);
  p.probing.store(false);
  if (!refused || closing_.load()) return;
  peer_gone(p, "its address " + p.endpoint + " refuses new ones");
}

void TcpDevice::peer_gone(TcpPeer& p, const std::string& why) {
  group_.loop().post([this, &p, why] {
    if (closing_.load() || group_.failed()) return;
    group_.fail(ErrorCode::kPeerLost,
                "rank " + std::to_string(p.rank) + " closed its connections and " + why +
                    ": its process is gone",
                true, {p.rank});
  });
}

void TcpDevice::redial(TcpPeer& p, bool wan, int stream, std::chrono::milliseconds attempt) {
  const auto deadline = Clock::now() + options_.resume_timeout;
  // A WAN path that gives no answer at all for relay_after (a cut link) is left to a relay, as at
  // start-up: training goes on through a third domain instead of waiting out the cut.
  const bool may_fail_over = wan && options_.relay_after.count() > 0 && group_.size() > 2;
  auto silent_since = Clock::now();
  std::string why;
  while (!closing_.load() && !group_.failed()) {
    bool rejected = false, refused = false;
    const auto started = Clock::now();
    security::ConnectionKeys keys;
    int via = -1;
    int fd = -1;
    if (may_fail_over && p.relay.load() < 0 && started - silent_since >= options_.relay_after) {
      fd = fail_over(p, stream, deadline, &why, &keys, &via);
      silent_since = Clock::now();  // none relayed: the direct path for another relay_after
    } else {
      fd = dial(p, wan, stream, std::min(deadline, started + attempt), &why, &rejected, &keys, &refused, &via);
    }
    // The direct path answers; or the attempt went through a relay (a two-hop path's, a
    // failed-over pair's) and says nothing about the direct path, whose silence counts from now.
    if (rejected || refused || via >= 0) silent_since = Clock::now();
    if (refused) {
      peer_gone(p, why);  // nobody listens where the peer did
      return;
    }
    if (fd >= 0) {
      set_nonblocking(fd, true);
      const bool posted = group_.loop().post([this, &p, stream, fd, keys, via] {
        TcpConnection* c = p.streams[static_cast<size_t>(stream)].get();
        if (closing_.load() || group_.failed() || !c || !c->usable()) {
          ::close(fd);
          return;
        }
        c->resume(fd, keys, via);
      });
      if (!posted) ::close(fd);  // the loop is dead: nobody takes it
      return;
    }
    // A failed-over pair whose relay did not carry us: direct again (and failing over anew
    // after relay_after, through another relay).
    if (!rejected && via >= 0 && p.failed_over.load()) {
      int expected = via;
      if (p.relay.compare_exchange_strong(expected, -1))
        GEOCCL_LOG(kWarn, "the relay of rank " << via << " to rank " << p.rank << " failed (" << why
                                                << "): trying the direct path again");
      continue;
    }
    // A two-hop path whose relay did not carry us (gone, or it lost its path to the peer): the
    // bulk data go direct again, slower but there.
    if (!rejected && via >= 0 && p.relay.load() < 0) {
      int expected = via;
      if (p.two_hop.compare_exchange_strong(expected, -1))
        GEOCCL_LOG(kWarn, "two-hop path to rank " << p.rank << " through rank " << via << " failed (" << why
                                                  << "): its bulk data go direct");
      continue;
    }
    // A failed authentication is final. A refusal is not: the peer takes a data stream back only
    // while its side of the control stream is usable, and that one may be re-established at this
    // very moment (both stalled in the same outage). A peer that is gone refuses the connection
    // (peer_gone above); one that failed tells us so on another path.
    const bool auth_failed = rejected && why.rfind("authentication", 0) == 0;
    if (auth_failed || Clock::now() >= deadline) break;
    // A failure that came at once (no route yet, a refusal) is retried after a short pause; a
    // timed-out attempt has waited already.
    if (rejected) GEOCCL_LOG(kDebug, "stream " << stream << " to rank " << p.rank << ": " << why << "; trying again");
    if (Clock::now() - started < attempt / 2) std::this_thread::sleep_for(std::chrono::milliseconds(rejected ? 200 : 100));
  }
  if (closing_.load() || group_.failed()) return;
  group_.loop().post(
      [this, &p, stream, why, rejected_last = why.find("rejected") != std::string::npos] {
        group_.fail(rejected_last ? ErrorCode::kPeerLost : ErrorCode::kPeerUnreachable,
                    "stream " + std::to_string(stream) + " to rank " + std::to_string(p.rank) +
                        " broke and could not be re-established within " +
                        std::to_string(options_.resume_timeout.count()) + " ms: " + why,
                    true, {p.rank});
      });
}

int TcpDevice::fail_over(TcpPeer& p, int stream, Clock::time_point deadline, std::string* why,
                         security::ConnectionKeys* keys, int* via) {
  *via = -1;
  // Candidates: ranks in other domains than this one whose control stream acknowledged within
  // the last stall bound, so that they answer us (those in the peer's domain, behind the same
  // cut, do not); read on the loop thread, without waiting on it for long.
  auto found = std::make_shared<std::promise<std::vector<int>>>();
  auto fut = found->get_future();
  const auto recent = std::max(options_.stall_timeout, std::chrono::milliseconds(2000));
  group_.loop().post([this, &p, found, recent] {
    std::vector<int> c;
    for (const auto& q : peers_)
      if (q->rank != p.rank && q->rank != group_.rank() && q->wan && q->relay.load() < 0 &&
          host_answers(q->rank, recent))
        c.push_back(q->rank);
    found->set_value(std::move(c));
  });
  if (fut.wait_for(std::chrono::seconds(1)) != std::future_status::ready) {
    *why = "no relay asked: the event loop did not answer";
    return -1;
  }
  const std::vector<int> candidates = fut.get();
  if (candidates.empty()) *why = "rank " + std::to_string(p.rank) + " gives no answer and no other domain answers us";
  for (int c : candidates) {
    if (closing_.load() || group_.failed() || Clock::now() >= deadline) break;
    int expected = -1;
    if (!p.relay.compare_exchange_strong(expected, c)) {
      *via = expected;  // another stream failed over first: through its relay
      bool rejected = false;
      return dial(p, p.wan, stream, std::min(deadline, Clock::now() + relayed_attempt()), why, &rejected, keys);
    }
    p.failed_over.store(true);
    bool rejected = false;
    const int fd = dial(p, p.wan, stream, std::min(deadline, Clock::now() + relayed_attempt()), why, &rejected, keys);
    if (fd >= 0) {
      *via = c;
      GEOCCL_LOG(kWarn, "rank " << p.rank << " gave no answer for " << options_.relay_after.count()
                                << " ms: its streams go through rank " << c << "'s relay until the direct path answers");
      if (!p.watching.exchange(true)) {
        if (p.direct_watch.joinable()) p.direct_watch.join();
        p.direct_watch = std::thread([this, &p] { watch_direct(p); });
      }
      return fd;
    }
    p.failed_over.store(false);
    p.relay.store(-1);
    GEOCCL_LOG(kDebug, "no relay through rank " << c << " to rank " << p.rank << ": " << *why);
  }
  return -1;
}

void TcpDevice::watch_direct(TcpPeer& p) {
  std::string host;
  uint16_t port = 0;
  split_host_port(p.endpoint, &host, &port);
  while (!closing_.load() && !group_.failed() && p.failed_over.load()) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const int fd = connect_with_timeout(host, port, std::chrono::seconds(1), {});
    if (fd < 0) continue;
    ::close(fd);
    group_.loop().post([this, &p] {
      if (closing_.load() || group_.failed() || !p.failed_over.exchange(false)) return;
      const int via = p.relay.exchange(-1);
      GEOCCL_LOG(kInfo, "the direct path to rank " << p.rank << " answers again: its streams leave rank " << via
                                                   << "'s relay");
      for (auto& c : p.streams)
        if (c && c->open()) c->replace("the direct path is back");
    });
    break;
  }
  p.watching.store(false);
}

void TcpDevice::open_streams(TcpPeer& p, int from, int upto) {
  for (int s = from; s <= upto && !closing_.load() && !group_.failed(); ++s) {
    std::string why;
    bool rejected = false;
    security::ConnectionKeys keys;
    int via = -1;
    const int fd = dial(p, true, s, Clock::now() + std::chrono::seconds(5), &why, &rejected, &keys, nullptr, &via);
    if (fd < 0) {
      GEOCCL_LOG(kInfo, "data stream " << s << " to rank " << p.rank << " not opened: " << why);
      break;
    }
    set_nonblocking(fd, true);
    const bool posted = group_.loop().post([this, &p, s, fd, keys, via] {
      if (closing_.load() || group_.failed() || p.streams[static_cast<size_t>(s)]) {
        ::close(fd);
        return;
      }
      adopt(fd, p.rank, s, keys, via);
    });
    if (!posted) {
      ::close(fd);
      break;
    }
  }
  p.opening.store(false);
}

}  // namespace geoccl::transport::tcp

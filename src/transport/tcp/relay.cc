#include "transport/tcp/relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "core/logging.h"
#include "geoccl/error.h"
#include "transport/tcp/socket_util.h"
#include "transport/tcp/stall_probe.h"

namespace geoccl::transport::tcp {

struct Relay::Tunnel {
  int from = -1, to = -1;  // the ranks at its two ends
  int a = -1;              // the requester's socket
  std::atomic<bool> open{true};
  bool refused = false;  // the target was not reached (written before `open` turns false)
  bool stalled = false;  // ended because a socket stalled (likewise)
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint16_t> onward_port{0};  // the local port of the socket to `to`, once connected
  std::thread thread;
};

namespace {

// One direction of a tunnel: src -> pipe -> dst.
struct Direction {
  int src = -1, dst = -1;
  int pipe_r = -1, pipe_w = -1;
  size_t fill = 0, cap = 0;  // bytes in the pipe, its capacity
  bool eof = false;          // src said FIN
  bool done = false;         // ... and everything before it reached dst, which got our FIN
};

bool make_pipe(Direction* d) {
  int p[2];
  if (::pipe2(p, O_NONBLOCK | O_CLOEXEC) != 0) return false;
  d->pipe_r = p[0];
  d->pipe_w = p[1];
  // A larger pipe moves more per splice on a fast path (best effort: capped by pipe-max-size).
  (void)::fcntl(d->pipe_w, F_SETPIPE_SZ, 1 << 20);
  const int cap = ::fcntl(d->pipe_w, F_GETPIPE_SZ);
  d->cap = cap > 0 ? static_cast<size_t>(cap) : 65536;
  return true;
}

// Moves what can move now. False on an error of either socket (the tunnel ends).
bool pump(Direction& d, std::atomic<uint64_t>& bytes) {
  constexpr unsigned kFlags = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;
  if (!d.eof && d.fill < d.cap) {
    const ssize_t n = ::splice(d.src, nullptr, d.pipe_w, nullptr, d.cap - d.fill, kFlags);
    if (n > 0) d.fill += static_cast<size_t>(n);
    else if (n == 0) d.eof = true;
    else if (errno != EAGAIN && errno != EINTR) return false;
  }
  while (d.fill > 0) {
    const ssize_t n = ::splice(d.pipe_r, nullptr, d.dst, nullptr, d.fill, kFlags);
    if (n > 0) {
      d.fill -= static_cast<size_t>(n);
      bytes.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    return false;
  }
  if (d.eof && d.fill == 0 && !d.done) {
    ::shutdown(d.dst, SHUT_WR);  // the FIN goes on: a clean close at one end is one at the other
    d.done = true;
  }
  return true;
}

// Forwards between a and b until both directions are done, either socket fails, stop_fd is
// readable, or `stalled` (asked every `tick`, when positive) says to end.
void forward(int a, int b, int stop_fd, std::atomic<uint64_t>& bytes, std::chrono::milliseconds tick,
             const std::function<bool()>& stalled) {
  Direction ab, ba;
  ab.src = ba.dst = a;
  ab.dst = ba.src = b;
  bool ok = make_pipe(&ab) && make_pipe(&ba);
  try {
    set_nonblocking(a, true);
    set_nonblocking(b, true);
  } catch (const Error&) {
    ok = false;
  }
  using Clock = std::chrono::steady_clock;
  auto next_check = Clock::now() + tick;
  while (ok && !(ab.done && ba.done)) {
    ok = pump(ab, bytes) && pump(ba, bytes);
    if (!ok || (ab.done && ba.done)) break;
    if (tick.count() > 0 && Clock::now() >= next_check) {
      next_check = Clock::now() + tick;
      if (stalled()) {
        ok = false;
        break;
      }
    }
    // Read a socket while its pipe has room; wait to write one while the other direction's pipe
    // holds bytes for it.
    const auto events = [](const Direction& in, const Direction& out) {
      short e = 0;
      if (!in.eof && in.fill < in.cap) e |= POLLIN;
      if (out.fill > 0) e |= POLLOUT;
      return e;
    };
    pollfd fds[3] = {{a, events(ab, ba), 0}, {b, events(ba, ab), 0}, {stop_fd, POLLIN, 0}};
    for (int i = 0; i < 2; ++i)
      if (fds[i].events == 0) fds[i].fd = -1;  // nothing to do with it now: no HUP wake-ups
    int wait_ms = -1;
    if (tick.count() > 0)
      wait_ms = static_cast<int>(std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(next_check - Clock::now()).count() + 1));
    if (::poll(fds, 3, wait_ms) < 0 && errno != EINTR) break;
    if (fds[2].revents) break;
    if ((fds[0].revents | fds[1].revents) & POLLERR) ok = false;
  }
  if (!ok) {
    // A broken end breaks the other at once (RST), rather than after its keepalive.
    const linger l{1, 0};
    ::setsockopt(a, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::setsockopt(b, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  }
  for (int fd : {ab.pipe_r, ab.pipe_w, ba.pipe_r, ba.pipe_w})
    if (fd >= 0) ::close(fd);
}

}  // namespace

Relay::Relay(std::function<void(int)> tune) : tune_(std::move(tune)) {
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd_ < 0) throw Error(ErrorCode::kIo, std::string("relay: eventfd: ") + std::strerror(errno));
}

Relay::~Relay() {
  const auto until = Clock::now() + linger_;
  for (;;) {
    bool open = false;
    {
      std::lock_guard lk(mu_);
      for (auto& t : tunnels_) open = open || t.open.load();
    }
    if (!open || Clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(stop_fd_, &one, sizeof one);
  std::list<Tunnel> done;
  {
    std::lock_guard lk(mu_);
    done.swap(tunnels_);
  }
  for (auto& t : done)
    if (t.thread.joinable()) t.thread.join();
  ::close(stop_fd_);
}

void Relay::serve(int fd, int from, int to, const std::string& target, std::chrono::milliseconds connect_timeout,
                  const std::array<uint8_t, protocol::kReplySize>& accepted,
                  const std::array<uint8_t, protocol::kReplySize>& unreachable) {
  std::lock_guard lk(mu_);
  // Finished tunnels keep only their counters.
  for (auto& t : tunnels_)
    if (!t.open.load() && t.thread.joinable()) t.thread.join();
  Tunnel& t = tunnels_.emplace_back();
  t.from = from;
  t.to = to;
  t.a = fd;
  t.thread = std::thread(
      [this, &t, target, connect_timeout, accepted, unreachable] { run(t, target, connect_timeout, accepted, unreachable); });
}

void Relay::run(Tunnel& t, std::string target, std::chrono::milliseconds connect_timeout,
                std::array<uint8_t, protocol::kReplySize> accepted,
                std::array<uint8_t, protocol::kReplySize> unreachable) {
  const std::string what = "relay " + std::to_string(t.from) + "->" + std::to_string(t.to);
  int b = -1;
  std::string why = "its address is unknown here";
  if (!target.empty()) {
    try {
      std::string host;
      uint16_t port = 0;
      split_host_port(target, &host, &port);
      b = connect_with_timeout(host, port, connect_timeout, tune_);
      if (b < 0) why = target + ": " + std::strerror(errno);
    } catch (const Error& e) {
      why = e.what();
    }
  }
  const auto reply_by = Clock::now() + std::chrono::seconds(5);
  if (b < 0) {
    GEOCCL_LOG(kInfo, what << ": cannot reach rank " << t.to << " (" << why << ")");
    write_all(t.a, unreachable, reply_by);
    ::close(t.a);
    t.refused = true;
    t.open.store(false);
    return;
  }
  try {
    set_nodelay(b);
    set_nodelay(t.a);
    t.onward_port.store(local_port(b));
  } catch (const Error&) {
  }
  if (write_all(t.a, accepted, reply_by)) {
    GEOCCL_LOG(kDebug, what << ": forwarding to " << target);
    // The sockets are sampled a few times per stall timeout.
    const auto tick = stall_timeout_ / 4;
    Clock::time_point idle_a = Clock::now(), idle_b = idle_a;
    forward(t.a, b, stop_fd_, t.bytes, tick, [&] {
      const auto now = Clock::now();
      const bool a_stalled = stalled(t.from, t.a, now, idle_a), b_stalled = stalled(t.to, b, now, idle_b);
      if (a_stalled || b_stalled) {
        GEOCCL_LOG(kWarn, what << ": the path to rank " << (b_stalled ? t.to : t.from)
                               << " stalled (data unacknowledged past " << stall_timeout_.count()
                               << " ms while no relayed stream to it was acknowledged, or past the busy bound): "
                                  "the tunnel ends and its two ends re-establish the stream");
        t.stalled = true;
        return true;
      }
      const int down = path_down(t.from, t.to);
      if (down < 0) return false;
      GEOCCL_LOG(kWarn, what << ": the path to rank " << down
                             << " is down (this rank's own streams to it are unacknowledged): the tunnel ends and "
                                "its two ends re-establish the stream");
      t.stalled = true;
      return true;
    });
    GEOCCL_LOG(kDebug, what << ": closed after " << t.bytes.load() << " bytes");
  }
  ::close(t.a);
  ::close(b);
  t.open.store(false);
}

bool Relay::stalled(int rank, int fd, Clock::time_point now, Clock::time_point& idle_seen) {
  const StallSample own = stall_sample(fd, now, idle_seen);
  if (!own.open) return false;
  // The relay's other sockets to `rank` stand for the path: one acknowledged within the timeout
  // shows it alive (stall.h).
  StallSample path;
  path.open = true;
  {
    std::lock_guard lk(life_mu_);
    auto [it, fresh] = acked_.try_emplace(rank, now - own.since_ack);
    if (!fresh) it->second = std::max(it->second, now - own.since_ack);
    path.since_ack = std::chrono::duration_cast<std::chrono::milliseconds>(now - it->second);
  }
  const StallSample both[2] = {own, path};
  for (const StallDecision& d : stalled_streams(both, stall_timeout_))
    if (d.stream == 0) return true;
  return false;
}

void Relay::set_paths_down(std::vector<int> ranks) {
  std::lock_guard lk(life_mu_);
  down_ = std::move(ranks);
}

int Relay::path_down(int a, int b) const {
  std::lock_guard lk(life_mu_);
  for (int r : down_)
    if (r == a || r == b) return r;
  return -1;
}

std::vector<uint16_t> Relay::onward_ports(int to) const {
  std::vector<uint16_t> out;
  std::lock_guard lk(mu_);
  for (const auto& t : tunnels_)
    if (t.to == to && t.open.load() && t.onward_port.load() != 0) out.push_back(t.onward_port.load());
  return out;
}

Relay::Counters Relay::counters(int rank) const {
  Counters c;
  std::lock_guard lk(mu_);
  for (const auto& t : tunnels_) {
    if (rank >= 0 && t.from != rank && t.to != rank) continue;
    const bool open = t.open.load();
    ++c.tunnels;
    if (open) ++c.open;
    else if (t.refused) ++c.refused;
    if (!open && t.stalled) ++c.stalled;
    c.bytes += t.bytes.load(std::memory_order_relaxed);
  }
  return c;
}

}  // namespace geoccl::transport::tcp

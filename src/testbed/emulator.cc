#include "emulator.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include "units.h"
#include "sys_error.h"

namespace geoccl::testbed {
namespace {

enum Tag : std::uint64_t { kTun = 1, kTimer, kControl, kClient, kStop };
std::uint64_t tag(Tag kind, std::uint32_t index) { return (static_cast<std::uint64_t>(kind) << 32) | index; }

constexpr std::size_t kMaxClients = 8;
constexpr std::size_t kMaxCommand = 4096;


// splitmix64: decorrelates the per-link seeds derived from one scenario seed.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Enough slots for every link to hold a full queue plus a bandwidth-delay
// product of packets in flight (data one way, ACKs the other), assuming
// 10 Gbit/s where a link is unlimited.
std::uint32_t auto_pool_slots(const Scenario& s, const std::vector<EmulatorPort>& ports) {
  double packets = 0;
  for (const auto& a : ports) {
    for (const auto& b : ports) {
      if (a.domain == b.domain) continue;
      const LinkParams p = s.link(a.domain, b.domain);
      const double rate = p.rate_bps ? static_cast<double>(p.rate_bps) : 10e9;
      const double bytes = rate * static_cast<double>(p.delay_ns + p.jitter_ns) / 8e9 +
                           static_cast<double>(p.queue.bytes_at(static_cast<std::uint64_t>(rate)));
      packets += 2 * bytes / p.mtu;
    }
  }
  return static_cast<std::uint32_t>(std::clamp(packets + 8192, 16384.0, 1048576.0));
}

}  // namespace

std::int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct Emulator::Client {
  int fd = -1;
  std::string input;
};

Emulator::Emulator(const Scenario& scenario, std::vector<EmulatorPort> ports,
                   EmulatorOptions options)
    : scenario_(scenario), ports_(std::move(ports)), options_(options) {
  const std::size_t n = ports_.size();
  if (n == 0 || n > 250) throw std::runtime_error("the emulator needs 1 to 250 domains");
  subnet_ = ports_[0].addr & 0xFFFFFF00u;
  for (std::size_t i = 0; i < n; ++i) {
    if (ports_[i].addr != subnet_ + i + 1) {
      throw std::runtime_error("domain addresses must be .1, .2, ... of one /24");
    }
  }
  links_.resize(n * n);
  adversaries_.resize(n * n);
  uplinks_.resize(n);
  for (std::size_t a = 0; a < n; ++a) {
    const DomainSpec* d = scenario_.find_domain(ports_[a].domain);
    if (d == nullptr) throw std::runtime_error("domain '" + ports_[a].domain + "' is not in the scenario");
    if (d->uplink_bps > 0) {
      uplinks_[a] = std::make_unique<Bottleneck>(d->uplink_bps, scenario_.queue.bytes_at(d->uplink_bps));
    }
    for (std::size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      links_[a * n + b] = std::make_unique<LinkModel>(
          scenario_.link(ports_[a].domain, ports_[b].domain), mix(scenario_.seed * 65537 + a * 256 + b));
    }
  }
  std::uint32_t mtu = scenario_.mtu;
  for (const auto& l : links_) {
    if (l) mtu = std::max(mtu, l->params().mtu);
  }
  // Room for the largest IP packet the interfaces can carry, cache-line aligned.
  const std::uint32_t slot_size = (std::max<std::uint32_t>(mtu, 1500) + 63) / 64 * 64;
  pool_ = std::make_unique<BufferPool>(
      slot_size, options_.pool_slots ? options_.pool_slots : auto_pool_slots(scenario_, ports_));

  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) throw_errno("epoll_create1");
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (timer_fd_ < 0) throw_errno("timerfd_create");
  auto add = [this](int fd, std::uint64_t data) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = data;
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) throw_errno("epoll_ctl");
  };
  for (std::size_t i = 0; i < n; ++i) add(ports_[i].tun_fd, tag(kTun, static_cast<std::uint32_t>(i)));
  add(timer_fd_, tag(kTimer, 0));
  if (options_.control_fd >= 0) add(options_.control_fd, tag(kControl, 0));
  if (options_.stop_fd >= 0) add(options_.stop_fd, tag(kStop, 0));
}

Emulator::~Emulator() {
  for (const auto& c : clients_) ::close(c->fd);
  if (timer_fd_ >= 0) ::close(timer_fd_);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

void Emulator::run() {
  start_ns_ = monotonic_ns();
  epoll_event events[64];
  for (;;) {
    const std::int64_t now = monotonic_ns();
    fire_events(now);
    deliver_due(now);
    const std::int64_t deadline = next_deadline();
    int timeout_ms = -1;
    if (deadline <= monotonic_ns() + options_.early_ns) {
      timeout_ms = 0;  // more is due already: poll without sleeping
    } else if (deadline != LinkModel::kForever) {
      arm_timer(deadline);
    }
    const int n = epoll_wait(epoll_fd_, events, 64, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("epoll_wait");
    }
    for (int i = 0; i < n; ++i) {
      const std::uint64_t data = events[i].data.u64;
      const auto kind = static_cast<Tag>(data >> 32);
      const auto index = static_cast<std::uint32_t>(data);
      switch (kind) {
        case kTun:
          read_port(index);
          break;
        case kTimer: {
          std::uint64_t expirations;
          [[maybe_unused]] const ssize_t r = ::read(timer_fd_, &expirations, sizeof expirations);
          armed_at_ = -1;
          break;
        }
        case kControl:
          accept_clients();
          break;
        case kClient:
          for (auto& c : clients_) {
            if (c->fd == static_cast<int>(index)) {
              serve_client(*c);
              break;
            }
          }
          break;
        case kStop:
          return;
      }
    }
  }
}

void Emulator::read_port(std::size_t src) {
  const std::size_t n = ports_.size();
  const int fd = ports_[src].tun_fd;
  Bottleneck* uplink = uplinks_[src].get();
  for (std::uint32_t i = 0; i < options_.read_batch; ++i) {
    std::uint32_t slot = pool_->acquire();
    if (slot == BufferPool::kNone) {
      // Out of buffers: still drain the device so it does not stall, but the
      // packet is lost outside the model and counted as such.
      std::uint8_t scratch[65536];
      if (::read(fd, scratch, sizeof scratch) <= 0) return;
      ++pool_exhausted_;
      continue;
    }
    std::uint8_t* buf = pool_->data(slot);
    const ssize_t len = ::read(fd, buf, pool_->slot_size());
    if (len <= 0) {
      pool_->release(slot);
      return;  // EAGAIN: drained
    }
    // IPv4 only: the namespaces have IPv6 disabled on their TUN devices.
    std::size_t dst = n;
    if (len >= 20 && (buf[0] >> 4) == 4) {
      const std::uint32_t addr = (std::uint32_t{buf[16]} << 24) | (std::uint32_t{buf[17]} << 16) |
                                 (std::uint32_t{buf[18]} << 8) | buf[19];
      if ((addr & 0xFFFFFF00u) == subnet_) dst = (addr & 0xFF) - 1;
    }
    if (dst >= n || dst == src) {
      ++unroutable_;
      pool_->release(slot);
      continue;
    }
    const Fate fate = link(src, dst)->submit(monotonic_ns(), slot, static_cast<std::uint32_t>(len), uplink,
                                             flow_key(buf, static_cast<std::size_t>(len)));
    if (fate != Fate::kQueued) {
      pool_->release(slot);
      continue;
    }
    // The adversary acts on what crosses the link; the packet waits in its buffer until delivery.
    if (LinkAdversary& adv = adversaries_[src * n + dst]; adv.armed()) {
      adv.process(std::span<std::uint8_t>(buf, static_cast<std::size_t>(len)));
    }
  }
}

void Emulator::deliver_due(std::int64_t now) {
  const std::int64_t horizon = now + options_.early_ns;
  const std::size_t n = ports_.size();
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      LinkModel* l = link(a, b);
      if (l == nullptr) continue;
      const int fd = ports_[b].tun_fd;
      while (l->has_packets() && l->front().deliver_at <= horizon) {
        const InFlight& p = l->front();
        if (::write(fd, pool_->data(p.slot), p.len) != static_cast<ssize_t>(p.len)) {
          ++l->counters().other_drops;
        }
        pool_->release(p.slot);
        l->pop_delivered();
      }
    }
  }
}

void Emulator::fire_events(std::int64_t now) {
  const auto& events = scenario_.events;
  while (next_event_ < events.size() && start_ns_ + events[next_event_].at_ns <= now) {
    const ScheduledEvent& e = events[next_event_++];
    try {
      execute(e.command, now);
      std::fprintf(stderr, "wanem: t=%s %s\n", format_duration(e.at_ns).c_str(), e.text.c_str());
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "wanem: t=%s %s: %s\n", format_duration(e.at_ns).c_str(), e.text.c_str(),
                   ex.what());
    }
  }
}

std::int64_t Emulator::next_deadline() const {
  std::int64_t deadline = LinkModel::kForever;
  for (const auto& l : links_) {
    if (l) deadline = std::min(deadline, l->next_deadline());
  }
  if (next_event_ < scenario_.events.size()) {
    deadline = std::min(deadline, start_ns_ + scenario_.events[next_event_].at_ns);
  }
  return deadline;
}

void Emulator::arm_timer(std::int64_t deadline) {
  // Wake half the early window ahead: timer wake-up latency is of that order,
  // and everything due within early_ns goes out in the same batch anyway.
  const std::int64_t wake = deadline - options_.early_ns / 2;
  if (armed_at_ >= 0 && armed_at_ <= wake) return;  // an earlier wake-up is pending
  itimerspec spec{};
  spec.it_value.tv_sec = wake / 1'000'000'000;
  spec.it_value.tv_nsec = wake % 1'000'000'000;
  if (timerfd_settime(timer_fd_, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) throw_errno("timerfd_settime");
  armed_at_ = wake;
}

void Emulator::accept_clients() {
  for (;;) {
    const int fd = accept4(options_.control_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    if (clients_.size() >= kMaxClients) {
      ::close(fd);
      continue;
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(kClient, static_cast<std::uint32_t>(fd));
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    auto c = std::make_unique<Client>();
    c->fd = fd;
    clients_.push_back(std::move(c));
  }
}

void Emulator::serve_client(Client& client) {
  char buf[1024];
  for (;;) {
    const ssize_t n = ::read(client.fd, buf, sizeof buf);
    if (n > 0) {
      client.input.append(buf, static_cast<std::size_t>(n));
      if (client.input.size() > kMaxCommand) return close_client(client.fd);
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      if (client.input.find('\n') == std::string::npos) return;  // wait for the rest
    }
    break;  // EOF, error, or a complete line
  }
  const auto eol = client.input.find('\n');
  const std::string line = client.input.substr(0, eol);
  std::string reply;
  try {
    reply = "ok\n" + execute(parse_control_command(line), monotonic_ns());
  } catch (const std::exception& e) {
    reply = std::string("error: ") + e.what() + "\n";
  }
  // Replies are a few KiB at most; a short blocking send with a timeout keeps
  // a client that never reads from stalling the forwarder for long.
  fcntl(client.fd, F_SETFL, fcntl(client.fd, F_GETFL) & ~O_NONBLOCK);
  timeval tv{0, 200'000};
  setsockopt(client.fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::size_t off = 0;
  while (off < reply.size()) {
    const ssize_t w = ::send(client.fd, reply.data() + off, reply.size() - off, MSG_NOSIGNAL);
    if (w > 0) off += static_cast<std::size_t>(w);
    else if (w < 0 && errno == EINTR) continue;
    else break;
  }
  close_client(client.fd);
}

void Emulator::close_client(int fd) {
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  clients_.erase(std::remove_if(clients_.begin(), clients_.end(),
                                [fd](const auto& c) { return c->fd == fd; }),
                 clients_.end());
}

std::string Emulator::execute(const ControlCommand& command, std::int64_t now) {
  using Verb = ControlCommand::Verb;
  switch (command.verb) {
    case Verb::kStats:
      return stats_text();
    case Verb::kLinks:
      return links_text();
    case Verb::kHelp:
      return control_help();
    default:
      break;
  }
  const std::size_t n = ports_.size();
  std::string reply;
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      LinkModel* l = link(a, b);
      if (l == nullptr || !command.link.matches(ports_[a].domain, ports_[b].domain)) continue;
      const std::string name = ports_[a].domain + ">" + ports_[b].domain;
      if (command.verb == Verb::kCut) {
        const std::int64_t until = command.duration_ns > 0 ? now + command.duration_ns : LinkModel::kForever;
        l->cut(now, until, [this](std::uint32_t slot) { pool_->release(slot); });
        reply += name + " cut" +
                 (command.duration_ns > 0 ? " for " + format_duration(command.duration_ns) : "") + "\n";
      } else if (command.verb == Verb::kRestore) {
        l->restore();
        reply += name + " restored\n";
      } else if (command.verb == Verb::kTamper) {
        adversaries_[a * n + b].tamper(command.segments);
        reply += name + " tamper the next " + std::to_string(command.segments) + " segment(s) with payload\n";
      } else if (command.verb == Verb::kReplay) {
        adversaries_[a * n + b].replay(command.segments);
        reply += name + " replay into the next " + std::to_string(command.segments) + " segment(s) with payload\n";
      } else if (command.verb == Verb::kSniff) {
        adversaries_[a * n + b].sniff(command.pattern);
        reply += name + (command.pattern.empty() ? " sniff off\n" : " sniff " + to_hex(command.pattern) + "\n");
      } else {
        l->apply(command.change);
        reply += name + " " + to_string(l->params()) + "\n";
      }
    }
  }
  if (reply.empty()) throw std::runtime_error("no link matches '" + command.link.to_string() + "'");
  return reply;
}

std::string Emulator::stats_text() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-12s %12s %14s %12s %14s %11s %12s %12s %9s %11s %10s\n", "link",
                "packets_in", "bytes_in", "packets_out", "bytes_out", "queue_drops", "random_drops",
                "outage_drops", "mtu_drops", "other_drops", "flow_drops");
  out += line;
  const std::size_t n = ports_.size();
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      const LinkModel* l = links_[a * n + b].get();
      if (l == nullptr) continue;
      const LinkCounters& c = l->counters();
      const std::string name = ports_[a].domain + ">" + ports_[b].domain;
      std::snprintf(line, sizeof line, "%-12s %12llu %14llu %12llu %14llu %11llu %12llu %12llu %9llu %11llu %10llu\n",
                    name.c_str(), static_cast<unsigned long long>(c.packets_in),
                    static_cast<unsigned long long>(c.bytes_in),
                    static_cast<unsigned long long>(c.packets_out),
                    static_cast<unsigned long long>(c.bytes_out),
                    static_cast<unsigned long long>(c.queue_drops),
                    static_cast<unsigned long long>(c.random_drops),
                    static_cast<unsigned long long>(c.outage_drops),
                    static_cast<unsigned long long>(c.mtu_drops),
                    static_cast<unsigned long long>(c.other_drops),
                    static_cast<unsigned long long>(c.flow_drops));
      out += line;
    }
  }
  // The adversary of every link it was armed on: what it did, and what it still has to do.
  for (std::size_t a = 0; a < n; ++a) {
    for (std::size_t b = 0; b < n; ++b) {
      const LinkAdversary& adv = adversaries_[a * n + b];
      if (!adv.used()) continue;
      const AdversaryCounters& c = adv.counters();
      const std::string name = ports_[a].domain + ">" + ports_[b].domain;
      out += "adversary " + name + " tampered " + std::to_string(c.tampered) + " (pending " +
             std::to_string(adv.tamper_pending()) + ") replayed " + std::to_string(c.replayed) + " (pending " +
             std::to_string(adv.replay_pending()) + ") sniff_matches " + std::to_string(c.sniff_matches) +
             " of " + std::to_string(c.sniff_packets) + " payload segments" +
             (adv.pattern().empty() ? "" : " pattern " + to_hex(adv.pattern())) + "\n";
    }
  }
  std::snprintf(line, sizeof line, "unroutable %llu, no-buffer drops %llu\n",
                static_cast<unsigned long long>(unroutable_),
                static_cast<unsigned long long>(pool_exhausted_));
  out += line;
  return out;
}

std::string Emulator::links_text() const {
  std::string out;
  const std::size_t n = ports_.size();
  const std::int64_t now = monotonic_ns();
  for (std::size_t a = 0; a < n; ++a) {
    if (uplinks_[a]) out += ports_[a].domain + " uplink rate=" + format_rate(uplinks_[a]->rate_bps()) + "\n";
    for (std::size_t b = 0; b < n; ++b) {
      const LinkModel* l = links_[a * n + b].get();
      if (l == nullptr) continue;
      out += ports_[a].domain + ">" + ports_[b].domain + " " + to_string(l->params());
      if (l->is_down(now)) {
        out += l->down_until() == LinkModel::kForever
                   ? " DOWN"
                   : " DOWN for " + format_duration(l->down_until() - now);
      }
      out += "\n";
    }
  }
  return out;
}

}  // namespace geoccl::testbed

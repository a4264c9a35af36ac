// The embedded rendezvous store server: one event-loop thread, one map. A GET for a missing key
// is parked until the key is set or the request's own timeout passes.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <list>
#include <map>
#include <unordered_map>

#include "core/logging.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "protocol/store_codec.h"
#include "protocol/wire.h"
#include "runtime/event_loop.h"
#include "transport/tcp/socket_util.h"

namespace geoccl {

using protocol::StoreCommand;
using protocol::StoreRequest;
using protocol::StoreResponse;
using protocol::StoreStatus;

class StoreServerImpl {
 public:
  StoreServerImpl(const std::string& bind_addr, uint16_t port) {
    listen_fd_ = transport::tcp::listen_on(bind_addr, port);
    port_ = transport::tcp::local_port(listen_fd_);
    loop_.run_sync([this] { loop_.add_fd(listen_fd_, EPOLLIN, [this](uint32_t) { on_accept(); }); });
  }
  ~StoreServerImpl() {
    loop_.run_sync([this] {
      for (auto& [fd, c] : clients_) {
        loop_.remove_fd(fd);
        ::close(fd);
      }
      clients_.clear();
      loop_.remove_fd(listen_fd_);
      ::close(listen_fd_);
    });
  }
  uint16_t port() const { return port_; }

 private:
  struct Client {
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    size_t out_off = 0;
  };
  struct Waiter {
    int fd;
    std::string key;
    runtime::EventLoop::TimerId timer;
  };

  void on_accept() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      transport::tcp::set_nodelay(fd);
      clients_[fd] = Client{};
      loop_.add_fd(fd, EPOLLIN, [this, fd](uint32_t ev) { on_client(fd, ev); });
    }
  }

  void drop(int fd) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->fd == fd) {
        loop_.cancel_timer(it->timer);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    loop_.remove_fd(fd);
    ::close(fd);
    clients_.erase(fd);
  }

  void on_client(int fd, uint32_t ev) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    if (ev & EPOLLOUT) flush(fd);
    if (!(ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
    uint8_t buf[64 * 1024];
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return drop(fd);
    Client& c = it->second;
    c.in.insert(c.in.end(), buf, buf + n);
    // Handle every complete message in the buffer.
    for (;;) {
      protocol::Reader r(c.in);
      uint32_t len = 0;
      if (!r.u32(&len)) return;
      if (len > protocol::kMaxStoreMessage) {
        GEOCCL_LOG(kWarn, "store: dropping client with oversized message (" << len << " bytes)");
        return drop(fd);
      }
      if (c.in.size() < 4 + size_t{len}) return;
      auto req = protocol::decode_store_request(std::span<const uint8_t>(c.in).subspan(4, len));
      c.in.erase(c.in.begin(), c.in.begin() + 4 + len);
      if (!req) {
        respond(fd, {StoreStatus::kBadRequest, {}, 0});
        continue;
      }
      handle(fd, std::move(*req));
      if (!clients_.count(fd)) return;
    }
  }

  void handle(int fd, StoreRequest req) {
    switch (req.command) {
      case StoreCommand::kSet:
        data_[req.key] = std::move(req.value);
        respond(fd, {StoreStatus::kOk, {}, 0});
        wake(req.key);
        return;
      case StoreCommand::kGet: {
        auto it = data_.find(req.key);
        if (it != data_.end()) return respond(fd, {StoreStatus::kOk, it->second, 0});
        if (req.timeout_ms == 0) return respond(fd, {StoreStatus::kNotFound, {}, 0});
        const auto when = runtime::EventLoop::Clock::now() + std::chrono::milliseconds(req.timeout_ms);
        auto w = waiters_.insert(waiters_.end(), Waiter{fd, req.key, 0});
        w->timer = loop_.add_timer(when, [this, w] {
          const int wfd = w->fd;
          waiters_.erase(w);
          respond(wfd, {StoreStatus::kTimeout, {}, 0});
        });
        return;
      }
      case StoreCommand::kAdd: {
        auto& v = data_[req.key];
        int64_t cur = 0;
        if (!v.empty()) {
          protocol::Reader r(v);
          r.i64(&cur);
        }
        cur += req.delta;
        v.clear();
        protocol::Writer(&v).i64(cur);
        respond(fd, {StoreStatus::kOk, {}, cur});
        wake(req.key);
        return;
      }
      case StoreCommand::kDelete: {
        const bool existed = data_.erase(req.key) > 0;
        return respond(fd, {existed ? StoreStatus::kOk : StoreStatus::kNotFound, {}, 0});
      }
      case StoreCommand::kCheck:
        return respond(fd, {data_.count(req.key) ? StoreStatus::kOk : StoreStatus::kNotFound, {}, 0});
    }
  }

  void wake(const std::string& key) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->key != key) {
        ++it;
        continue;
      }
      loop_.cancel_timer(it->timer);
      const int fd = it->fd;
      it = waiters_.erase(it);
      respond(fd, {StoreStatus::kOk, data_[key], 0});
    }
  }

  void respond(int fd, const StoreResponse& resp) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    auto bytes = protocol::encode_store_response(resp);
    it->second.out.insert(it->second.out.end(), bytes.begin(), bytes.end());
    flush(fd);
  }

  void flush(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = it->second;
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        return drop(fd);
      }
      c.out_off += static_cast<size_t>(n);
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
      loop_.modify_fd(fd, EPOLLIN);
    } else {
      loop_.modify_fd(fd, EPOLLIN | EPOLLOUT);
    }
  }

  runtime::EventLoop loop_{"geoccl-store"};
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::unordered_map<int, Client> clients_;
  std::map<std::string, std::vector<uint8_t>> data_;
  std::list<Waiter> waiters_;
};

StoreServer::StoreServer(const std::string& bind_addr, uint16_t port)
    : impl_(std::make_unique<StoreServerImpl>(bind_addr, port)) {}
StoreServer::~StoreServer() = default;
uint16_t StoreServer::port() const { return impl_->port(); }

}  // namespace geoccl

// The embedded rendezvous store server: one event-loop thread, one map. A GET for a missing key
// is parked until the key is set or the request's own timeout passes.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <list>
#include <map>
#include <memory>
#include <unordered_map>

#include "core/logging.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "protocol/store_codec.h"
#include "protocol/wire.h"
#include "runtime/event_loop.h"
#include "security/store_seal.h"
#include "runtime/socket.h"

namespace geoccl {

using protocol::StoreCommand;
using protocol::StoreRequest;
using protocol::StoreResponse;
using protocol::StoreStatus;

class StoreServerImpl {
 public:
  StoreServerImpl(const std::string& bind_addr, uint16_t port, const std::vector<uint8_t>& owner,
                  const std::optional<security::Key>& secret) {
    if (secret) request_key_ = security::store_request_key(*secret);
    // Before the first client can connect: nobody sees an owned store without its owner.
    if (!owner.empty()) data_[std::string(protocol::kOwnerKey)] = owner;
    listen_fd_ = runtime::listen_on(bind_addr, port);
    port_ = runtime::local_port(listen_fd_);
    try {
      loop_.run_sync([this] { loop_.add_fd(listen_fd_, EPOLLIN, [this](uint32_t) { on_accept(); }); });
    } catch (...) {
      ::close(listen_fd_);
      throw;
    }
  }
  ~StoreServerImpl() {
    auto close_all = [this] {
      while (!clients_.empty()) drop(*clients_.begin()->second);
      loop_.remove_fd(listen_fd_);
      ::close(listen_fd_);
    };
    try {
      loop_.run_sync(close_all);
    } catch (const Error&) {
      close_all();  // the loop is dead: nothing runs on its thread any more
    }
  }
  uint16_t port() const { return port_; }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  // One connection. It owns its fd and closes it once, when the last reference goes: the map
  // below, the loop's handler for the fd, or a handler that is running. drop() takes it out of
  // both and marks it dead; code that may have dropped it checks `dead` before touching it again.
  struct Client {
    explicit Client(int f) : fd(f) {}
    ~Client() { ::close(fd); }
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;
    const int fd;
    bool dead = false;
    std::vector<uint8_t> in;
    std::vector<uint8_t> out;
    size_t out_off = 0;
  };
  using ClientPtr = std::shared_ptr<Client>;
  struct Waiter {
    ClientPtr client;
    std::string key;
    runtime::EventLoop::TimerId timer;
  };

  void on_accept() {
    for (;;) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      auto c = std::make_shared<Client>(fd);
      try {
        runtime::set_nodelay(fd);
        loop_.add_fd(fd, EPOLLIN, [this, c](uint32_t ev) { on_client(c, ev); });
      } catch (const Error& e) {
        GEOCCL_LOG(kWarn, "store: refusing a client: " << e.what());
        continue;  // `c` closes the fd
      }
      clients_[fd] = std::move(c);
    }
  }

  // Idempotent. The fd closes when the last reference to the client goes (after the running
  // handler returns, if it is the client's own).
  void drop(Client& c) {
    if (c.dead) return;
    c.dead = true;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->client.get() == &c) {
        loop_.cancel_timer(it->timer);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    const int fd = c.fd;  // `c` may be gone after the erase
    loop_.remove_fd(fd);
    clients_.erase(fd);
  }

  void on_client(const ClientPtr& cp, uint32_t ev) {
    Client& c = *cp;
    if (c.dead) return;
    if (ev & EPOLLOUT) flush(c);
    if (c.dead || !(ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) return;
    uint8_t buf[64 * 1024];
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    if (n <= 0) return drop(c);
    c.in.insert(c.in.end(), buf, buf + n);
    // Handle every complete message in the buffer.
    for (;;) {
      protocol::Reader r(c.in);
      uint32_t len = 0;
      if (!r.u32(&len)) return;
      if (len > protocol::kMaxStoreMessage) {
        GEOCCL_LOG(kWarn, "store: dropping client with oversized message (" << len << " bytes)");
        return drop(c);
      }
      if (c.in.size() < 4 + size_t{len}) return;
      std::vector<uint8_t> body(c.in.begin() + 4, c.in.begin() + 4 + len);
      c.in.erase(c.in.begin(), c.in.begin() + 4 + len);
      std::optional<StoreRequest> req;
      if (!open_request(c, body, &req)) {
        if (c.dead) return;
        continue;
      }
      if (!req) {
        respond(c, {StoreStatus::kBadRequest, {}, 0});
      } else {
        handle(cp, std::move(*req));
      }
      if (c.dead) return;
    }
  }

  // The request in `body`: unwrapped from its authenticated envelope (checked when this store has
  // a secret; a store without one serves a client that authenticates all the same) into *req
  // (nullopt: malformed). False when it was refused (answered kUnauthenticated, logged).
  bool open_request(Client& c, std::span<const uint8_t> body, std::optional<StoreRequest>* req) {
    if (!protocol::is_authenticated_store_request(body)) {
      *req = protocol::decode_store_request(body);
      if (request_key_ && !(*req && protocol::is_public_read(**req))) return refuse(c, "it carries no MAC", *req);
      return true;
    }
    const auto env = protocol::decode_authenticated_store_request(body);
    if (!env) return true;  // malformed: kBadRequest
    if (request_key_) {
      if (!security::store_request_mac_ok(*request_key_, env->client, env->counter, env->body, env->mac))
        return refuse(c, "its MAC is wrong", protocol::decode_store_request(env->body));
      if (!replays_.fresh(env->client, env->counter))
        return refuse(c, "its counter " + std::to_string(env->counter) + " was used already (a replay)", std::nullopt);
    }
    *req = protocol::decode_store_request(env->body);
    return true;
  }

  // Answers kUnauthenticated and logs it. `lacks_secret`: the request (decoded, unauthenticated)
  // lacks the group secret, not a replay: noted once per session under refused_key(session), where
  // the ranks of that session setting up find it.
  bool refuse(Client& c, const std::string& why, const std::optional<StoreRequest>& lacks_secret) {
    const uint64_t n = refused_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n <= 20 || n % 1000 == 0)
      GEOCCL_LOG(kWarn, "store: refused request " << n << " of a client: " << why
                                                  << " (not authenticated with the group secret)");
    const std::string_view session = lacks_secret ? protocol::key_session(lacks_secret->key) : std::string_view{};
    if (!session.empty()) {
      const std::string key = protocol::refused_key(session);
      if (!data_.count(key)) {
        const std::string note = "the store refused a request of session '" + std::string(session) +
                                 "' that is not authenticated with the group secret (" + why +
                                 "): a rank has another group secret (GEOCCL_SECRET) or none";
        data_[key] = std::vector<uint8_t>(note.begin(), note.end());
        wake(key);
      }
    }
    respond(c, {StoreStatus::kUnauthenticated, {}, 0});
    return false;
  }

  void handle(const ClientPtr& cp, StoreRequest req) {
    Client& c = *cp;
    const bool reads = req.command == StoreCommand::kGet || req.command == StoreCommand::kCheck;
    if (!reads && req.key.starts_with(protocol::kServerKeyPrefix)) return respond(c, {StoreStatus::kBadRequest, {}, 0});
    switch (req.command) {
      case StoreCommand::kSet:
        data_[req.key] = std::move(req.value);
        respond(c, {StoreStatus::kOk, {}, 0});
        wake(req.key);
        return;
      case StoreCommand::kGet: {
        auto it = data_.find(req.key);
        if (it != data_.end()) return respond(c, {StoreStatus::kOk, it->second, 0});
        if (req.timeout_ms == 0) return respond(c, {StoreStatus::kNotFound, {}, 0});
        const auto when = runtime::EventLoop::Clock::now() + std::chrono::milliseconds(req.timeout_ms);
        auto w = waiters_.insert(waiters_.end(), Waiter{cp, req.key, 0});
        w->timer = loop_.add_timer(when, [this, w] {
          const ClientPtr waiting = std::move(w->client);
          waiters_.erase(w);
          respond(*waiting, {StoreStatus::kTimeout, {}, 0});
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
        respond(c, {StoreStatus::kOk, {}, cur});
        wake(req.key);
        return;
      }
      case StoreCommand::kDelete: {
        const bool existed = data_.erase(req.key) > 0;
        return respond(c, {existed ? StoreStatus::kOk : StoreStatus::kNotFound, {}, 0});
      }
      case StoreCommand::kCheck:
        return respond(c, {data_.count(req.key) ? StoreStatus::kOk : StoreStatus::kNotFound, {}, 0});
    }
  }

  void wake(const std::string& key) {
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->key != key) {
        ++it;
        continue;
      }
      loop_.cancel_timer(it->timer);
      const ClientPtr waiting = std::move(it->client);
      it = waiters_.erase(it);
      respond(*waiting, {StoreStatus::kOk, data_[key], 0});
    }
  }

  void respond(Client& c, const StoreResponse& resp) {
    if (c.dead) return;
    auto bytes = protocol::encode_store_response(resp);
    c.out.insert(c.out.end(), bytes.begin(), bytes.end());
    flush(c);
  }

  // May drop the client (check c.dead afterwards).
  void flush(Client& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) break;
        return drop(c);
      }
      c.out_off += static_cast<size_t>(n);
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
      loop_.modify_fd(c.fd, EPOLLIN);
    } else {
      loop_.modify_fd(c.fd, EPOLLIN | EPOLLOUT);
    }
  }

  runtime::EventLoop loop_{"geoccl-store"};
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::unordered_map<int, ClientPtr> clients_;
  std::map<std::string, std::vector<uint8_t>> data_;
  std::list<Waiter> waiters_;
  std::optional<security::Key> request_key_;  // a store with a group secret
  security::StoreReplayGuard replays_;
  std::atomic<uint64_t> refused_{0};
};

StoreServer::StoreServer(const std::string& bind_addr, uint16_t port)
    : impl_(std::make_unique<StoreServerImpl>(bind_addr, port, std::vector<uint8_t>{}, std::nullopt)) {}
StoreServer::StoreServer(const std::string& bind_addr, uint16_t port, const std::vector<uint8_t>& owner)
    : impl_(std::make_unique<StoreServerImpl>(bind_addr, port, owner, std::nullopt)) {}
StoreServer::StoreServer(const std::string& bind_addr, uint16_t port, const std::vector<uint8_t>& owner,
                         const std::optional<std::array<uint8_t, 32>>& secret)
    : impl_(std::make_unique<StoreServerImpl>(bind_addr, port, owner, secret)) {}
uint64_t StoreServer::refused_requests() const { return impl_->refused(); }
StoreServer::~StoreServer() = default;
uint16_t StoreServer::port() const { return impl_->port(); }

}  // namespace geoccl

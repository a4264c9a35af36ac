// The etcd store against a real etcd (tests/support/etcd_server.h): the Store contract, blocking
// reads, atomic counters across clients, prefixes that keep jobs apart, keys that live as long
// as their writer's lease, and typed errors within the timeout when etcd is gone or is not etcd.
#include "membership/etcd_store.h"

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "etcd_server.h"
#include "geoccl/error.h"
#include "geoccl/store.h"
#include "membership/etcd_codec.h"
#include "runtime/socket.h"

using namespace geoccl;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

class EtcdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { etcd_ = std::make_unique<test::EtcdServer>(); }
  std::unique_ptr<Store> open(const std::string& prefix = "job",
                              std::chrono::milliseconds timeout = 5s) {
    return open_store(etcd_->url(prefix), timeout);
  }
  // A store whose lease has `ttl` (etcd's minimum is 2 s), keys under /job/.
  std::unique_ptr<membership::EtcdStore> open_leased(std::chrono::seconds ttl,
                                                     std::chrono::milliseconds timeout = 5s) {
    return std::make_unique<membership::EtcdStore>("127.0.0.1", etcd_->port(), "/job/", timeout,
                                                   ttl);
  }
  // The answer of the gateway at `path` to `body`, as any other etcd client gets it.
  nlohmann::json gateway(const std::string& path, const nlohmann::json& body) {
    httplib::Client http("127.0.0.1", etcd_->port());
    http.set_read_timeout(5s);
    const auto r = http.Post(path, body.dump(), "application/json");
    if (!r || r->status != 200) {
      ADD_FAILURE() << path << " failed: " << (r ? r->body : httplib::to_string(r.error()));
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(r->body);
  }
  // The lease `key` (under /job/) is attached to, 0 for none; nullopt when it does not exist.
  std::optional<int64_t> lease_of(const std::string& key) {
    const std::string full = "/job/" + key;
    const auto kv = membership::etcd::decode_range_response(
        gateway("/v3/kv/range", {{"key", b64(full)}}).dump(), full);
    if (!kv) ADD_FAILURE() << "the range answer for " << full << " does not decode";
    if (!kv || !*kv) return std::nullopt;
    return (*kv)->lease;
  }
  // Polls until `key` is gone, for at most `limit`: whether it went.
  bool gone_within(const std::string& key, std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (lease_of(key)) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(100ms);
    }
    return true;
  }
  static std::string b64(const std::string& s) {
    return membership::etcd::base64_encode(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  std::unique_ptr<test::EtcdServer> etcd_;
};

// The typed error `f` throws, after at most `within`.
template <class F>
Error error_of(F&& f, std::chrono::milliseconds within) {
  const auto t0 = Clock::now();
  try {
    f();
  } catch (const Error& e) {
    EXPECT_LT(Clock::now() - t0, within) << "the error took too long: " << e.what();
    std::cerr << "error: " << e.what() << "\n";
    return e;
  }
  ADD_FAILURE() << "no error";
  return Error(ErrorCode::kOk, "none");
}


TEST_F(EtcdStoreTest, SetGetCheckRemove) {
  auto s = open();
  std::vector<uint8_t> every_byte(256);
  for (size_t i = 0; i < every_byte.size(); ++i) every_byte[i] = static_cast<uint8_t>(i);
  s->set("a", every_byte);
  EXPECT_EQ(s->get("a", 1s), every_byte);
  EXPECT_TRUE(s->check("a"));
  s->set("a", {9});  // overwrite
  EXPECT_EQ(s->get("a", 1s), std::vector<uint8_t>{9});
  s->set("empty", {});
  EXPECT_TRUE(s->check("empty"));
  EXPECT_TRUE(s->get("empty", 1s).empty());
  EXPECT_TRUE(s->remove("a"));
  EXPECT_FALSE(s->remove("a"));
  EXPECT_FALSE(s->check("a"));
  EXPECT_FALSE(s->check("never-set"));
}

TEST_F(EtcdStoreTest, GetPresentReadsManyKeysPerRoundTripInTheOrderAsked) {
  auto s = open();
  // More keys than one transaction takes; every third one absent.
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) {
    keys.push_back("many/" + std::to_string(i));
    if (i % 3 != 0) s->set(keys.back(), {static_cast<uint8_t>(i)});
  }
  const auto got = s->get_present(keys);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i % 3 == 0) {
      EXPECT_FALSE(got[i].has_value()) << i;
    } else {
      ASSERT_TRUE(got[i].has_value()) << i;
      EXPECT_EQ(*got[i], std::vector<uint8_t>{static_cast<uint8_t>(i)});
    }
  }
  EXPECT_TRUE(s->get_present({}).empty());
}

TEST_F(EtcdStoreTest, GetBlocksUntilAnotherClientSetsTheKey) {
  auto reader = open();
  auto writer = open();
  const auto t0 = Clock::now();
  std::thread w([&] {
    std::this_thread::sleep_for(300ms);
    writer->set("late", {7, 8});
  });
  EXPECT_EQ(reader->get("late", 10s), (std::vector<uint8_t>{7, 8}));
  const auto took = Clock::now() - t0;
  w.join();
  EXPECT_GE(took, 300ms);
  EXPECT_LT(took, 1500ms) << "the key was seen long after it was set";
}

TEST_F(EtcdStoreTest, WaitReturnsOnceEveryKeyExists) {
  auto s = open();
  auto writer = open();
  std::thread w([&] {
    for (const char* k : {"w3", "w1", "w2"}) {
      std::this_thread::sleep_for(100ms);
      writer->set(k, {1});
    }
  });
  const auto t0 = Clock::now();
  s->wait({"w1", "w2", "w3"}, 10s);
  EXPECT_GE(Clock::now() - t0, 300ms);
  w.join();
  const Error e = error_of([&] { s->wait({"w1", "w4", "w2"}, 300ms); }, 1500ms);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("w4"), std::string::npos) << e.what();
}

TEST_F(EtcdStoreTest, GetTimesOutPromptlyWithTheAddress) {
  auto s = open();
  const auto t0 = Clock::now();
  const Error e = error_of([&] { s->get("never", 400ms); }, 1500ms);
  EXPECT_GE(Clock::now() - t0, 400ms);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(etcd_->port())),
            std::string::npos)
      << e.what();
  s->set("k", {1});  // still usable
  EXPECT_TRUE(s->check("k"));
}

TEST_F(EtcdStoreTest, ConcurrentAddsFromManyClientsSumExactly) {
  // Six threads: four with a client each, two sharing one (the etcd store is thread-safe). Each
  // add must return a value no other add returned: together they are exactly 1..total.
  constexpr int kThreads = 6, kAdds = 40;
  std::vector<std::unique_ptr<Store>> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(open());
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Store& s = *clients[static_cast<size_t>(std::min(t, 4))];
      for (int i = 0; i < kAdds; ++i) seen[static_cast<size_t>(t)].push_back(s.add("counter", 1));
    });
  for (auto& th : threads) th.join();
  std::set<int64_t> all;
  for (const auto& v : seen) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), size_t{kThreads * kAdds});
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kThreads * kAdds);
  EXPECT_EQ(clients[0]->add("counter", -5), kThreads * kAdds - 5);
  // The counter reads as the TCP store's does: 8 bytes, i64 little-endian.
  const auto raw = clients[1]->get("counter", 1s);
  ASSERT_EQ(raw.size(), 8u);
  int64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | raw[static_cast<size_t>(i)];
  EXPECT_EQ(v, kThreads * kAdds - 5);
  // add() on a key that holds something else is refused, not reinterpreted.
  clients[0]->set("text", {'h', 'i'});
  const Error e = error_of([&] { clients[0]->add("text", 1); }, 2s);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
}

TEST_F(EtcdStoreTest, AddingZeroReadsWithoutWriting) {
  // add(key, 0) is how a decider polls a counter: it must not move the key's revision, or an
  // adder one WAN round trip away loses its compare-and-set to every poll.
  auto s = open();
  EXPECT_EQ(s->add("polled", 0), 0);  // absent: 0, and still absent
  EXPECT_FALSE(s->check("polled"));
  EXPECT_EQ(s->add("polled", 3), 3);
  auto revision = [&] {
    const auto j = gateway("/v3/kv/range", {{"key", b64("/job/polled")}});
    return std::stoll(j["kvs"][0]["mod_revision"].get<std::string>());
  };
  const int64_t before = revision();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s->add("polled", 0), 3);
  EXPECT_EQ(revision(), before);
  s->set("text", {'h', 'i'});
  EXPECT_EQ(error_of([&] { s->add("text", 0); }, 2s).code(), ErrorCode::kInvalidArgument);
}

// A gateway in front of etcd that passes every request on, except the transactions that
// `on_txn` answers itself (it returns true): it may pass those on, before or after answering, or
// never. One client passes requests on, one at a time.
class FaultyGateway {
 public:
  using OnTxn = std::function<bool(const httplib::Request&, httplib::Response&)>;
  struct Answer {
    int status = 502;  // 502: etcd did not answer
    std::string body;
  };

  FaultyGateway(uint16_t etcd_port, OnTxn on_txn)
      : upstream_("127.0.0.1", etcd_port), on_txn_(std::move(on_txn)) {
    upstream_.set_read_timeout(5s);
    proxy_.Post(R"(/v3/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/v3/kv/txn" && on_txn_(req, res)) return;
      reply(res, pass_on(req.path, req.body));
    });
    port_ = proxy_.bind_to_any_port("127.0.0.1");
    if (port_ <= 0) return;
    serve_ = std::thread([this] { proxy_.listen_after_bind(); });
    // stop() does nothing to a server that is not listening yet.
    for (const auto until = Clock::now() + 5s; !proxy_.is_running() && Clock::now() < until;)
      std::this_thread::yield();
  }
  ~FaultyGateway() {
    proxy_.stop();
    if (serve_.joinable()) serve_.join();
  }

  int port() const { return port_; }
  std::string url(const std::string& prefix) const {
    return "etcd://127.0.0.1:" + std::to_string(port_) + "/" + prefix;
  }
  // etcd's answer to `body` at `path`, passed on now.
  Answer pass_on(const std::string& path, const std::string& body) {
    std::lock_guard lk(upstream_mu_);
    const auto r = upstream_.Post(path, body, "application/json");
    return r ? Answer{r->status, r->body} : Answer{};
  }
  static void reply(httplib::Response& res, const Answer& a) {
    res.status = a.status;
    if (!a.body.empty()) res.set_content(a.body, "application/json");
  }
  // What etcd answers when a proposal did not commit in time (it may still commit).
  static void timed_out(httplib::Response& res) {
    res.status = 503;
    res.set_content(R"({"error":"etcdserver: request timed out","code":14})", "application/json");
  }
  // Whether an answer passed on is that of a transaction etcd applied.
  static bool applied(const Answer& a) {
    return a.status == 200 && nlohmann::json::parse(a.body).value("succeeded", false);
  }

 private:
  httplib::Server proxy_;
  httplib::Client upstream_;
  std::mutex upstream_mu_;
  OnTxn on_txn_;
  int port_ = -1;
  std::thread serve_;
};

TEST_F(EtcdStoreTest, AnAddWhoseAnswerIsLostIsAppliedExactlyOnce) {
  // The first transaction of each round the gateway either applies and then answers 503 (the
  // answer lost: etcd went away after committing it), or answers 503 without passing it on (lost
  // on the way in). Each time the client cannot tell from the answer; the marker its
  // transactions compare and write tells it.
  enum class Fault { kNone, kAppliedThenLost, kLostBefore };
  std::atomic<Fault> fault{Fault::kNone};
  std::atomic<bool> always_lost{false};  // every transaction answered 503, none applied
  std::atomic<int> faults_done{0};
  FaultyGateway* gw = nullptr;
  FaultyGateway gateway(etcd_->port(), [&](const httplib::Request& req, httplib::Response& res) {
    const Fault f = always_lost ? Fault::kLostBefore : fault.exchange(Fault::kNone);
    if (f == Fault::kNone) return false;
    if (f == Fault::kAppliedThenLost) gw->pass_on(req.path, req.body);
    FaultyGateway::timed_out(res);
    ++faults_done;
    return true;
  });
  gw = &gateway;
  ASSERT_GT(gateway.port(), 0);
  auto s = open_store(gateway.url("job"), 2s);
  auto direct = open();
  fault = Fault::kAppliedThenLost;
  EXPECT_EQ(s->add("n", 1), 1);
  fault = Fault::kLostBefore;
  EXPECT_EQ(s->add("n", 1), 2);
  fault = Fault::kAppliedThenLost;
  EXPECT_EQ(s->add("n", 5), 7);
  EXPECT_EQ(faults_done.load(), 3);
  EXPECT_EQ(direct->add("n", 0), 7);  // each add counted once
  // An etcd that never applies one: a timeout within the store's bound, not a loop.
  always_lost = true;
  EXPECT_EQ(error_of([&] { s->add("n", 1); }, 4s).code(), ErrorCode::kTimeout);
  EXPECT_EQ(direct->add("n", 0), 7);
}

TEST_F(EtcdStoreTest, AnAddEtcdCommitsAfterAnswering5xxIsAppliedOnce) {
  // etcd answers 5xx ("request timed out") when a proposal has not committed in time, and may
  // commit it later. The gateway answers an add's first transaction 503 without passing it on,
  // holds it, and passes it on (etcd commits it) only when the client's next transaction has
  // arrived: before that one, or after etcd applied that one. Either way the counter moves once,
  // and the add returns the value it gave the counter. Each round uses a fresh key, so that the
  // held transaction (a first try starts from "absent") is one etcd would apply.
  enum class Release { kBeforeNextTry, kAfterNextTry };
  std::mutex mu;
  bool hold_next = false;  // hold the next transaction (answered 503)
  bool lose_rest = false;  // answer every other transaction 503 without passing it on
  Release release = Release::kBeforeNextTry;
  std::optional<std::string> held;
  std::vector<bool> held_applied;  // per release: whether etcd applied the held transaction
  FaultyGateway* gw = nullptr;
  FaultyGateway gateway(etcd_->port(), [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard lk(mu);
    if (hold_next) {
      hold_next = false;
      held = req.body;
      FaultyGateway::timed_out(res);
      return true;
    }
    if (lose_rest) {
      FaultyGateway::timed_out(res);
      return true;
    }
    if (!held) return false;
    const std::string late = *std::exchange(held, std::nullopt);
    FaultyGateway::Answer now;
    if (release == Release::kBeforeNextTry) {
      held_applied.push_back(FaultyGateway::applied(gw->pass_on(req.path, late)));
      now = gw->pass_on(req.path, req.body);
    } else {
      now = gw->pass_on(req.path, req.body);
      held_applied.push_back(FaultyGateway::applied(gw->pass_on(req.path, late)));
    }
    FaultyGateway::reply(res, now);
    return true;
  });
  gw = &gateway;
  ASSERT_GT(gateway.port(), 0);
  auto s = open_store(gateway.url("job"), 2s);
  auto direct = open();
  auto arm = [&](Release r) {
    std::lock_guard lk(mu);
    hold_next = true;
    release = r;
  };

  // The held try commits before the next try reaches etcd: that one fails, and its answer shows
  // the marker with this add's number and value.
  arm(Release::kBeforeNextTry);
  EXPECT_EQ(s->add("a", 3), 3);
  EXPECT_EQ(direct->add("a", 0), 3);
  // The next try commits first: the held one, passed on after it, does not apply.
  arm(Release::kAfterNextTry);
  EXPECT_EQ(s->add("b", 4), 4);
  EXPECT_EQ(direct->add("b", 0), 4);
  {
    std::lock_guard lk(mu);
    EXPECT_EQ(held_applied, (std::vector<bool>{true, false}));
    EXPECT_FALSE(held);
  }
  // The store's later adds are not disturbed by either.
  EXPECT_EQ(s->add("a", 1), 4);
  EXPECT_EQ(s->add("b", 1), 5);

  // An add whose every answer is lost ends in a timeout; its held try commits during the next
  // add, which then fails a try (the marker moved under it), sees another add's number there,
  // and adds on top: each add is counted once.
  {
    std::lock_guard lk(mu);
    hold_next = lose_rest = true;
    release = Release::kBeforeNextTry;
  }
  EXPECT_EQ(error_of([&] { s->add("c", 10); }, 4s).code(), ErrorCode::kTimeout);
  EXPECT_EQ(direct->add("c", 0), 0);  // not applied yet: held
  {
    std::lock_guard lk(mu);
    lose_rest = false;
  }
  EXPECT_EQ(s->add("c", 1), 11);
  EXPECT_EQ(direct->add("c", 0), 11);
  std::lock_guard lk(mu);
  EXPECT_EQ(held_applied, (std::vector<bool>{true, false, true}));
}

TEST_F(EtcdStoreTest, PrefixesKeepJobsApart) {
  auto a = open("a");
  auto ab = open("ab");
  auto a2 = open("a/");  // the same prefix, written with a trailing slash
  a->set("k", {1});
  EXPECT_TRUE(a2->check("k"));
  EXPECT_FALSE(ab->check("k"));
  EXPECT_EQ(ab->add("k", 5), 5);
  EXPECT_EQ(a->get("k", 1s), std::vector<uint8_t>{1});
  EXPECT_TRUE(ab->remove("k"));
  EXPECT_TRUE(a->check("k"));
  const Error e = error_of([&] { ab->get("k", 200ms); }, 1500ms);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout);
}

TEST_F(EtcdStoreTest, StoppedEtcdGivesATypedErrorWithinTheTimeout) {
  auto s = open("job", 1s);
  s->set("k", {1});
  etcd_->kill();
  for (auto op : {+[](Store& st) { st.set("k", {2}); }, +[](Store& st) { st.check("k"); },
                  +[](Store& st) { st.add("n", 1); },
                  +[](Store& st) { st.get("k", std::chrono::milliseconds(100)); }}) {
    const Error e = error_of([&] { op(*s); }, 3s);
    EXPECT_TRUE(e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kIo) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(etcd_->port())), std::string::npos)
        << e.what();
  }
}

TEST_F(EtcdStoreTest, KeysCarryALeaseKeptAliveWhileTheStoreLives) {
  auto s = open_leased(2s);
  const int64_t id = s->lease_id();
  ASSERT_GT(id, 0);
  s->set("k", {1});
  EXPECT_EQ(s->add("n", 1), 1);
  EXPECT_EQ(lease_of("k"), id);
  EXPECT_EQ(lease_of("n"), id);  // a counter too: add() puts in a transaction
  const auto ttl = gateway("/v3/kv/lease/timetolive", {{"ID", std::to_string(id)}, {"keys", true}});
  EXPECT_EQ(ttl.value("grantedTTL", ""), "2") << ttl;
  // k, n, and the marker of this store's adds (etcd_store.h).
  EXPECT_EQ(ttl.value("keys", nlohmann::json::array()).size(), 3u) << ttl;
  // Twice the TTL and more: without renewals the lease and its keys would be gone by now.
  std::this_thread::sleep_for(5s);
  EXPECT_EQ(lease_of("k"), id);
  EXPECT_EQ(s->get("n", 1s).size(), 8u);
  const auto later = gateway("/v3/kv/lease/timetolive", {{"ID", std::to_string(id)}});
  EXPECT_GT(std::stoll(later.value("TTL", "-1")), 0) << later;
  // A second store of this process on the same etcd joins the lease.
  auto t = open_leased(2s);
  EXPECT_EQ(t->lease_id(), id);
}

TEST_F(EtcdStoreTest, KeysOutliveTheirStoreByOneTtlThenExpire) {
  auto s = open_leased(2s);
  s->set("k", {1});
  s.reset();
  // Not revoked: the others still read what a closed store wrote, until the TTL runs out.
  EXPECT_TRUE(lease_of("k"));
  EXPECT_TRUE(gone_within("k", 2s + 5s)) << "the key outlived its lease";
}

TEST_F(EtcdStoreTest, KeysOfAKilledProcessExpire) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the writer: sets a key, says its lease, waits to be killed
    ::close(fds[0]);
    try {
      auto s = open_leased(2s);
      s->set("k", {1});
      const int64_t id = s->lease_id();
      if (::write(fds[1], &id, sizeof id) != sizeof id) _exit(1);
      for (;;) ::pause();
    } catch (...) {
    }
    _exit(1);
  }
  ::close(fds[1]);
  int64_t id = 0;
  const bool said = ::read(fds[0], &id, sizeof id) == sizeof id;
  ::close(fds[0]);
  if (said) {
    EXPECT_EQ(lease_of("k"), id);
    std::this_thread::sleep_for(3s);  // past its TTL: the writer's renewals keep it
    EXPECT_EQ(lease_of("k"), id);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(said) << "the writer process failed";
  EXPECT_TRUE(gone_within("k", 2s + 5s)) << "the dead process's key outlived its lease";
}

TEST_F(EtcdStoreTest, ALostLeaseIsAnIoErrorOnTheNextOperation) {
  auto s = open_leased(2s);
  s->set("k", {1});
  const int64_t id = s->lease_id();
  // Revoked behind the store's back: etcd deletes its keys, and the next renewal (within a third
  // of the TTL) learns that the lease is gone.
  gateway("/v3/kv/lease/revoke", {{"ID", std::to_string(id)}});
  EXPECT_FALSE(lease_of("k"));
  std::optional<Error> lost;
  for (const auto deadline = Clock::now() + 5s; !lost && Clock::now() < deadline;) {
    try {
      s->check("k");
      std::this_thread::sleep_for(50ms);
    } catch (const Error& e) {
      lost = e;
    }
  }
  ASSERT_TRUE(lost) << "the store never noticed that its lease was gone";
  EXPECT_EQ(lost->code(), ErrorCode::kIo) << lost->what();
  EXPECT_NE(std::string(lost->what()).find("lease"), std::string::npos) << lost->what();
  EXPECT_NE(std::string(lost->what()).find(std::to_string(etcd_->port())), std::string::npos)
      << lost->what();
  for (auto op : {+[](Store& st) { st.set("k", {2}); }, +[](Store& st) { st.check("k"); },
                  +[](Store& st) { st.add("n", 1); }, +[](Store& st) { st.remove("k"); },
                  +[](Store& st) { st.get("k", std::chrono::milliseconds(100)); }}) {
    const Error e = error_of([&] { op(*s); }, 1s);
    EXPECT_EQ(e.code(), ErrorCode::kIo) << e.what();
  }
  // A store opened now gets a lease of its own.
  auto t = open_leased(2s);
  EXPECT_NE(t->lease_id(), id);
  t->set("k", {3});
  EXPECT_EQ(lease_of("k"), t->lease_id());
}

TEST_F(EtcdStoreTest, ARenewalThatCannotReachEtcdNeitherHangsNorCrashes) {
  auto s = open_leased(2s, 1s);
  s->set("k", {1});
  etcd_->kill();
  // Until the renewals have failed for a TTL, an operation fails for want of etcd; after, it says
  // that the lease is gone.
  std::optional<Error> lost;
  for (const auto deadline = Clock::now() + 8s; !lost && Clock::now() < deadline;) {
    const Error e = error_of([&] { s->check("k"); }, 3s);
    EXPECT_TRUE(e.code() == ErrorCode::kTimeout || e.code() == ErrorCode::kIo) << e.what();
    if (std::string(e.what()).find("lease") != std::string::npos) lost = e;
  }
  ASSERT_TRUE(lost) << "no operation reported the lost lease";
  EXPECT_EQ(lost->code(), ErrorCode::kIo) << lost->what();
  const auto t0 = Clock::now();
  s.reset();
  EXPECT_LT(Clock::now() - t0, 2s) << "closing the store waited for etcd";
}

TEST(EtcdStore, UnreachableEtcdGivesTimeoutWithinTheTimeout) {
  const uint16_t port = runtime::pick_free_port();  // nothing listens there
  const Error e =
      error_of([&] { open_store("etcd://127.0.0.1:" + std::to_string(port) + "/x", 700ms); }, 2s);
  EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
  EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << e.what();
}

TEST(EtcdStore, AnHttpServerThatIsNotEtcdIsAProtocolError) {
  // A 404 (no gateway there) and a 200 whose body is not the gateway's JSON.
  httplib::Server http;
  std::atomic<bool> not_found{false};
  http.Post("/v3/kv/range", [&](const httplib::Request&, httplib::Response& res) {
    if (not_found)
      res.status = 404;
    else
      res.set_content("<html>not etcd</html>", "text/html");
  });
  const int port = http.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serve(
      [&] { http.listen_after_bind(); });  // connections wait in the backlog until then
  const std::string url = "etcd://127.0.0.1:" + std::to_string(port) + "/x";
  Error e = error_of([&] { open_store(url, 2s); }, 3s);
  EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  EXPECT_NE(std::string(e.what()).find("does not decode"), std::string::npos) << e.what();
  not_found = true;
  e = error_of([&] { open_store(url, 2s); }, 3s);
  EXPECT_EQ(e.code(), ErrorCode::kProtocol) << e.what();
  EXPECT_NE(std::string(e.what()).find("404"), std::string::npos) << e.what();
  http.stop();
  serve.join();
}

}  // namespace

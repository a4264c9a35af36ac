#include "gloo_rendezvous.h"

#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <cctype>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <random>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "bench_env.h"

namespace geoccl_bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::int64_t UnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

GlooEnv ReadGlooEnv() {
  const int world_size = RequireIntEnv("WORLD_SIZE", 1);
  const int rank = RequireIntEnv("RANK", 0);
  if (rank >= world_size) {
    throw UsageError("RANK " + std::to_string(rank) + " >= WORLD_SIZE " +
                     std::to_string(world_size));
  }
  return ReadGlooEnv(rank, world_size);
}

GlooEnv ReadGlooEnv(int rank, int world_size) {
  GlooEnv env;
  env.rank = rank;
  env.world_size = world_size;
  // GEOCCL_RUN_ID is unique per launch; MASTER_PORT is a fallback for plain torchrun-style
  // launchers (a free port, so unique among concurrent runs, but it can repeat across runs —
  // the generation handshake in FileRendezvous handles that).
  if (auto id = GetEnv("GEOCCL_RUN_ID")) {
    env.run_id = "run-" + *id;
    env.run_id_unique = true;
  } else if (auto port = GetEnv("MASTER_PORT")) {
    env.run_id = "port-" + *port;
  } else {
    throw UsageError("neither GEOCCL_RUN_ID nor MASTER_PORT is set");
  }
  for (char& c : env.run_id) {  // the id becomes a path component
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
  }
  env.bind_addr = GetEnv("GEOCCL_BIND_ADDR").value_or("127.0.0.1");
  return env;
}

FileRendezvous::FileRendezvous(const GlooEnv& env, std::string_view dir_prefix,
                               std::chrono::milliseconds timeout)
    : rank_(env.rank), check_freshness_(!env.run_id_unique) {
  // A fixed root (not $TMPDIR) so that ranks launched with different environments, e.g. in
  // different network namespaces, still meet in the same place.
  const fs::path root = fs::path("/tmp") / (std::string(dir_prefix) + "-" +
                                            std::to_string(static_cast<long>(::getuid())));
  dir_ = root / env.run_id;
  fs::create_directories(dir_);  // every rank: whoever comes first creates it
  if (rank_ == 0) {
    CollectGarbage(root);
    generation_ = PublishGeneration();
  } else {
    generation_ = AwaitGeneration(timeout);
  }
  file_store_ = std::make_unique<gloo::rendezvous::FileStore>(dir_.string());
  store_ = std::make_unique<gloo::rendezvous::PrefixStore>(generation_, *file_store_);
}

FileRendezvous::~FileRendezvous() {
  if (rank_ != 0) return;
  std::error_code ec;  // best effort: a destructor must not throw
  fs::remove_all(dir_, ec);
}

std::string FileRendezvous::PublishGeneration() {
  std::random_device rd;
  const std::uint64_t nonce = (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^
                              static_cast<std::uint64_t>(::getpid());
  char name[32];
  std::snprintf(name, sizeof name, "g%016" PRIx64, nonce);
  const fs::path tmp = dir_ / (".generation." + std::to_string(::getpid()));
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << name << ' ' << UnixMillis() << '\n';
    if (!out.flush()) throw std::runtime_error("cannot write " + tmp.string());
  }
  fs::rename(tmp, GenerationFile());  // atomic: peers never see a partial file
  return name;
}

std::string FileRendezvous::AwaitGeneration(std::chrono::milliseconds timeout) const {
  const std::int64_t not_before =
      UnixMillis() - std::chrono::duration_cast<std::chrono::milliseconds>(kLaunchSkew).count();
  const auto deadline = Clock::now() + timeout;
  while (true) {
    std::ifstream in(GenerationFile());
    std::string name;
    std::int64_t written_ms = 0;
    if (in >> name >> written_ms && (!check_freshness_ || written_ms >= not_before)) {
      return name;
    }
    if (Clock::now() >= deadline) {
      throw std::runtime_error("rendezvous: rank 0 did not publish " + GenerationFile().string() +
                               " within the timeout (is rank 0 running with the same "
                               "GEOCCL_RUN_ID/MASTER_PORT?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void FileRendezvous::CollectGarbage(const fs::path& root) const {
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path() == dir_) continue;
    std::error_code ec2;
    const auto mtime = fs::last_write_time(entry.path(), ec2);
    if (!ec2 && now - mtime > kStaleAge) fs::remove_all(entry.path(), ec2);
  }
}

GlooSession::GlooSession(const GlooEnv& env, std::string_view dir_prefix,
                         std::chrono::milliseconds timeout)
    : rendezvous_(env, dir_prefix, timeout) {
  gloo::transport::tcp::attr attr;
  attr.hostname = env.bind_addr;  // resolved with getaddrinfo; the device binds to it
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.world_size);
  ctx->setTimeout(timeout);
  try {
    ctx->connectFullMesh(rendezvous_.store(), device);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("rendezvous failed (are all ") +
                             std::to_string(env.world_size) +
                             " ranks running with the same GEOCCL_RUN_ID/MASTER_PORT?): " +
                             e.what());
  }
  context_ = std::move(ctx);
}

}  // namespace geoccl_bench

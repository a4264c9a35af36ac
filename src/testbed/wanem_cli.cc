#include "wanem_cli.h"

#include <signal.h>
#include <time.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "control_client.h"
#include "scenario.h"
#include "units.h"
#include "wan_session.h"

namespace geoccl::testbed {
namespace {

const char* const kUsage =
    "usage: geoccl wanem run SCENARIO [options]   bring up the WAN test bed until Ctrl-C\n"
    "       geoccl wanem ctl SOCKET COMMAND...    change links while traffic flows\n"
    "       geoccl wanem check SCENARIO           validate and describe a scenario\n"
    "       geoccl wanem sweep                    remove namespaces left by dead runs\n"
    "\n"
    "run options:\n"
    "  --domains SPEC     ranks per domain, e.g. a:2,b:2 (default: the scenario's)\n"
    "  --ranks N          total ranks, spread over the scenario's domains\n"
    "  --cc ALGO          host TCP congestion control: cubic, bbr or reno\n"
    "  --duration TIME    stop after TIME (e.g. 60s) instead of waiting for a signal\n"
    "  --env-file PATH    once up, write WANEM_* shell variables (namespaces,\n"
    "                     addresses, control socket, emulator pid) to PATH\n"
    "  --no-pin           do not pin the emulator to a CPU\n"
    "  --no-rps           do not steer TUN receive processing to other CPUs\n"
    "  --batch N          packets per TUN read burst (default 64)\n"
    "  --early TIME       deliver packets up to TIME early, batched (default 50us)\n"
    "\n"
    "In the namespaces: ip netns exec NETNS COMMAND (names are printed on start).\n";

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "geoccl wanem: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

int run(int argc, char** argv) {
  if (argc < 3) return usage_error("run needs a scenario file");
  const std::string path = argv[2];
  std::string domains, cc, env_file;
  int ranks = 0;
  std::int64_t duration_ns = 0;
  WanSessionOptions options;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--domains") domains = value();
    else if (arg == "--ranks") ranks = std::stoi(value());
    else if (arg == "--cc") cc = value();
    else if (arg == "--duration") duration_ns = parse_duration_ns(value());
    else if (arg == "--env-file") env_file = value();
    else if (arg == "--no-pin") options.pin_emulator = false;
    else if (arg == "--no-rps") options.rps = false;
    else if (arg == "--batch") options.read_batch = static_cast<unsigned>(std::stoul(value()));
    else if (arg == "--early") options.early_ns = parse_duration_ns(value());
    else return usage_error("unknown option " + arg);
  }
  const Scenario scenario = load_scenario(path);

  // Signals are taken synchronously with sigtimedwait below, so they are
  // blocked before the session exists: no window where Ctrl-C kills the
  // process with namespaces left behind.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  sigset_t old;
  sigprocmask(SIG_BLOCK, &stop, &old);
  struct RestoreMask {
    sigset_t mask;
    ~RestoreMask() { sigprocmask(SIG_SETMASK, &mask, nullptr); }
  } restore{old};

  WanSession session(scenario, ranks, domains, cc, options);
  std::printf("%s", scenario.describe().c_str());
  std::string env = "WANEM_CONTROL=" + session.control_socket() + "\nWANEM_PID=" +
                    std::to_string(session.emulator_pid()) + "\n";
  for (const auto& d : session.domains()) {
    std::printf("domain %-8s netns %-24s addr %-15s ranks %d-%d\n", d.name.c_str(), d.netns.c_str(),
                d.addr.c_str(), d.first_rank, d.first_rank + d.ranks - 1);
    env += "WANEM_NETNS_" + d.name + "=" + d.netns + "\nWANEM_ADDR_" + d.name + "=" + d.addr + "\n";
  }
  std::printf("host_cc %s, control %s, emulator pid %d\n", session.host_cc().c_str(),
              session.control_socket().c_str(), static_cast<int>(session.emulator_pid()));
  std::fflush(stdout);
  if (!env_file.empty()) {
    const std::string tmp = env_file + ".tmp";
    std::ofstream(tmp) << env;
    std::rename(tmp.c_str(), env_file.c_str());  // atomic: pollers never see half a file
  }

  int sig = 0;
  if (duration_ns > 0) {
    const timespec ts{static_cast<time_t>(duration_ns / 1'000'000'000), static_cast<long>(duration_ns % 1'000'000'000)};
    sig = sigtimedwait(&stop, nullptr, &ts);
  } else {
    sigwait(&stop, &sig);
  }
  std::printf("%s", session.stats().c_str());
  std::fflush(stdout);
  if (!env_file.empty()) std::remove(env_file.c_str());
  return 0;
}

int ctl(int argc, char** argv) {
  if (argc < 4) return usage_error("ctl needs a socket path and a command");
  std::string command;
  for (int i = 3; i < argc; ++i) {
    if (i > 3) command += ' ';
    command += argv[i];
  }
  std::printf("%s", control_request(argv[2], command).c_str());
  return 0;
}

}  // namespace

int wanem_main(int argc, char** argv) {
  try {
    if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0) {
      std::printf("%s", kUsage);
      return argc < 2 ? 2 : 0;
    }
    const std::string verb = argv[1];
    if (verb == "run") return run(argc, argv);
    if (verb == "ctl") return ctl(argc, argv);
    if (verb == "check") {
      if (argc != 3) return usage_error("check needs a scenario file");
      std::printf("%s", load_scenario(argv[2]).describe().c_str());
      return 0;
    }
    if (verb == "sweep") {
      for (const auto& name : WanSession::sweep_stale_namespaces()) std::printf("removed %s\n", name.c_str());
      return 0;
    }
    return usage_error("unknown command '" + verb + "'");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "geoccl wanem: %s\n", e.what());
    return 1;
  }
}

}  // namespace geoccl::testbed

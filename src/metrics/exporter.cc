#include "metrics/exporter.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "geoccl/error.h"
#include "metrics/registry.h"

namespace geoccl::metrics {

HttpExporter::HttpExporter(Registry& registry, const std::string& bind, int port)
    : server_(std::make_unique<httplib::Server>()) {
  if (port < 0 || port > 65535)
    throw Error(ErrorCode::kInvalidArgument,
                "metrics port " + std::to_string(port) + " out of range 0..65535");
  server_->Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("geoccl: metrics at /metrics\n", "text/plain");
  });
  // SO_REUSEADDR (a restarted rank rebinds at once) but not httplib's default SO_REUSEPORT, with
  // which a second rank given the same port would bind it too and share the scrapes.
  server_->set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // Few, short requests (a scraper, `geoccl top`): two threads suffice.
  server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  errno = 0;
  port_ =
      port == 0 ? server_->bind_to_any_port(bind) : (server_->bind_to_port(bind, port) ? port : -1);
  if (port_ <= 0) {
    const int e = errno;
    throw Error(ErrorCode::kIo, "metrics: cannot listen on " + bind + ":" + std::to_string(port) +
                                    (e ? std::string(": ") + std::strerror(e) : std::string()));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

HttpExporter::~HttpExporter() {
  // stop() before the listening loop has started is lost (httplib 0.11): wait until it runs
  // (it starts within microseconds; the bound keeps a failed start from hanging here).
  for (int i = 0; i < 2000 && !server_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace geoccl::metrics

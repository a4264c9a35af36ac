// Serves a Registry at GET /metrics in the Prometheus text format (cpp-httplib, one thread of
// its own; a scrape renders the registry on that thread).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

namespace geoccl::metrics {

class Registry;

class HttpExporter {
 public:
  // Listens on bind:port (port 0: a free one, see port()). Throws Error(kInvalidArgument) for a
  // port outside 0..65535 and Error(kIo) when the address cannot be bound (in use, not local).
  HttpExporter(Registry& registry, const std::string& bind, int port);
  // Stops serving and joins the thread; a scrape in progress finishes first.
  ~HttpExporter();
  HttpExporter(const HttpExporter&) = delete;
  HttpExporter& operator=(const HttpExporter&) = delete;

  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace geoccl::metrics

#include "link_params.h"

#include <cstdio>

#include "units.h"

namespace geoccl::testbed {

std::string QueueLimit::to_string() const {
  return ns > 0 ? format_duration(ns) : std::to_string(bytes) + "B";
}

namespace {
std::string ratio(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}
std::string ge_string(const GilbertElliott& ge) {
  if (!ge.enabled) return "off";
  return "p=" + ratio(ge.p) + ",r=" + ratio(ge.r) + ",good=" + ratio(ge.loss_good) +
         ",bad=" + ratio(ge.loss_bad);
}
}  // namespace

std::string to_string(const LinkParams& p) {
  std::string s = "delay=" + format_duration(p.delay_ns);
  if (p.jitter_ns > 0) s += " jitter=" + format_duration(p.jitter_ns);
  s += " rate=" + format_rate(p.rate_bps) + " queue=" + p.queue.to_string() +
       " loss=" + ratio(p.loss) + " mtu=" + std::to_string(p.mtu);
  if (p.ge.enabled) s += " ge=" + ge_string(p.ge);
  if (p.flow_rate_bps > 0) s += " flow_rate=" + format_rate(p.flow_rate_bps);
  return s;
}

std::string LinkChange::to_string() const {
  std::string s;
  auto add = [&s](const std::string& kv) { s += (s.empty() ? "" : " ") + kv; };
  if (delay_ns) add("delay=" + format_duration(*delay_ns));
  if (jitter_ns) add("jitter=" + format_duration(*jitter_ns));
  if (rate_bps) add("rate=" + format_rate(*rate_bps));
  if (queue) add("queue=" + queue->to_string());
  if (loss) add("loss=" + ratio(*loss));
  if (ge) add("ge=" + ge_string(*ge));
  if (mtu) add("mtu=" + std::to_string(*mtu));
  if (flow_rate_bps) add("flow_rate=" + format_rate(*flow_rate_bps));
  return s;
}

}  // namespace geoccl::testbed

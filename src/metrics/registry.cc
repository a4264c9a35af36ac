#include "metrics/registry.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "geoccl/error.h"

namespace geoccl::metrics {

Histogram::Histogram(const std::vector<double>* bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds->size() + 1]) {
  for (size_t i = 0; i <= bounds->size(); ++i) buckets_[i].store(0, std::memory_order_relaxed);
}

void Histogram::observe(double v) {
  const auto& b = *bounds_;
  // Prometheus buckets are upper-inclusive: v lands in the first bound >= v.
  const size_t i = static_cast<size_t>(std::lower_bound(b.begin(), b.end(), v) - b.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

namespace {

template <class T>
std::unique_ptr<T> make_series(const std::vector<double>*) {
  return std::make_unique<T>();
}
template <>
std::unique_ptr<Histogram> make_series<Histogram>(const std::vector<double>* bounds) {
  return std::make_unique<Histogram>(bounds);
}

}  // namespace

template <class T>
T& Family<T>::with(const std::vector<std::string>& values) {
  if (values.size() != labels_.size())
    throw Error(ErrorCode::kInvalidArgument, "metric " + name_ + " has " +
                                                 std::to_string(labels_.size()) + " labels, got " +
                                                 std::to_string(values.size()) + " values");
  std::lock_guard lk(mu_);
  auto& slot = series_[values];
  if (!slot) slot = make_series<T>(&bounds_);
  return *slot;
}

template <class T>
void Family<T>::clear() {
  std::lock_guard lk(mu_);
  series_.clear();
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

bool valid_metric_name(std::string_view n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool valid_label_name(std::string_view n) {
  return valid_metric_name(n) && n.find(':') == std::string_view::npos && n.substr(0, 2) != "__";
}

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

Registry::Entry& Registry::entry(const std::string& name, Type type,
                                 const std::vector<std::string>& labels) {
  if (!valid_metric_name(name))
    throw Error(ErrorCode::kInvalidArgument, "invalid metric name '" + name + "'");
  for (const auto& l : labels)
    if (!valid_label_name(l) || (type == Type::kHistogram && l == "le"))
      throw Error(ErrorCode::kInvalidArgument,
                  "metric " + name + ": invalid label name '" + l + "'");
  auto [it, fresh] = families_.try_emplace(name);
  Entry& e = it->second;
  if (fresh) {
    e.type = type;
    e.labels = labels;
  } else if (e.type != type || e.labels != labels) {
    throw Error(ErrorCode::kInvalidArgument,
                "metric " + name + " registered before with another type or labels");
  }
  return e;
}

Family<Counter>& Registry::counter(const std::string& name, const std::string& help,
                                   const std::vector<std::string>& labels) {
  std::lock_guard lk(mu_);
  Entry& e = entry(name, Type::kCounter, labels);
  if (!e.counter) e.counter = std::make_unique<Family<Counter>>(name, help, labels);
  return *e.counter;
}

Family<Gauge>& Registry::gauge(const std::string& name, const std::string& help,
                               const std::vector<std::string>& labels) {
  std::lock_guard lk(mu_);
  Entry& e = entry(name, Type::kGauge, labels);
  if (!e.gauge) e.gauge = std::make_unique<Family<Gauge>>(name, help, labels);
  return *e.gauge;
}

Family<Histogram>& Registry::histogram(const std::string& name, const std::string& help,
                                       const std::vector<std::string>& labels,
                                       std::vector<double> bounds) {
  if (bounds.empty() || !std::is_sorted(bounds.begin(), bounds.end()) ||
      std::adjacent_find(bounds.begin(), bounds.end()) != bounds.end() ||
      std::any_of(bounds.begin(), bounds.end(), [](double b) { return !std::isfinite(b); }))
    throw Error(ErrorCode::kInvalidArgument,
                "histogram " + name + ": bounds must be finite and strictly ascending");
  std::lock_guard lk(mu_);
  Entry& e = entry(name, Type::kHistogram, labels);
  if (!e.histogram)
    e.histogram = std::make_unique<Family<Histogram>>(name, help, labels, std::move(bounds));
  return *e.histogram;
}

void Registry::add_collector(std::function<void()> collect) {
  std::lock_guard lk(mu_);
  collectors_.push_back(std::move(collect));
}

std::vector<std::string> Registry::names() const {
  std::lock_guard lk(mu_);
  std::vector<std::string> out;
  for (const auto& [n, e] : families_) out.push_back(n);
  return out;
}

namespace {

// {a="x",b="y"} with an optional extra label (le) last; "" when there are none.
std::string label_set(const std::vector<std::string>& names, const std::vector<std::string>& values,
                      const char* extra_name = nullptr, const std::string& extra_value = {}) {
  if (names.empty() && !extra_name) return {};
  std::string s = "{";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i) s += ',';
    s += names[i] + "=\"" + escape_label_value(values[i]) + '"';
  }
  if (extra_name) {
    if (!names.empty()) s += ',';
    s += std::string(extra_name) + "=\"" + extra_value + '"';
  }
  return s + '}';
}

void header(std::string& out, const std::string& name, const std::string& help, const char* type) {
  out += "# HELP " + name + ' ';
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  out += "\n# TYPE " + name + ' ' + type + '\n';
}

}  // namespace

std::string Registry::render() {
  std::lock_guard render_lk(render_mu_);
  std::vector<std::function<void()>> collectors;
  {
    std::lock_guard lk(mu_);
    collectors = collectors_;
  }
  for (auto& c : collectors) c();
  std::lock_guard lk(mu_);
  std::string out;
  for (const auto& family : families_) {
    // Named, not structured bindings: the lambdas below capture them (clang 14 cannot).
    const std::string& name = family.first;
    const Entry& e = family.second;
    if (e.counter) {
      header(out, name, e.counter->help(), "counter");
      e.counter->each([&](const std::vector<std::string>& v, const Counter& c) {
        out += name + label_set(e.labels, v) + ' ' + std::to_string(c.value()) + '\n';
      });
    } else if (e.gauge) {
      header(out, name, e.gauge->help(), "gauge");
      e.gauge->each([&](const std::vector<std::string>& v, const Gauge& g) {
        out += name + label_set(e.labels, v) + ' ' + format_value(g.value()) + '\n';
      });
    } else if (e.histogram) {
      header(out, name, e.histogram->help(), "histogram");
      e.histogram->each([&](const std::vector<std::string>& v, const Histogram& h) {
        // Read the buckets first and derive the count from them, so that a scrape during an
        // observation never shows a +Inf bucket different from _count.
        uint64_t cum = 0;
        const auto& b = h.bounds();
        for (size_t i = 0; i <= b.size(); ++i) {
          cum += h.bucket(i);
          out += name + "_bucket" +
                 label_set(e.labels, v, "le",
                           i < b.size() ? format_value(b[i]) : std::string("+Inf")) +
                 ' ' + std::to_string(cum) + '\n';
        }
        out += name + "_sum" + label_set(e.labels, v) + ' ' + format_value(h.sum()) + '\n';
        out += name + "_count" + label_set(e.labels, v) + ' ' + std::to_string(cum) + '\n';
      });
    }
  }
  return out;
}

}  // namespace geoccl::metrics

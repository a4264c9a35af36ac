// A small metrics registry: counters, gauges and histograms in labelled families, rendered in the
// Prometheus text exposition format (version 0.0.4). Updating a series is lock-free (atomics);
// looking one up by its label values takes the family's lock, so callers on a hot path look up
// once and keep the reference (series live as long as the registry). Collectors registered with
// add_collector() run at the start of every render(), to set series mirrored from elsewhere
// (transport counters, process memory) at scrape time instead of on every change.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace geoccl::metrics {

// A monotonically increasing count. set() mirrors a counter kept elsewhere (it should not go
// down, but Prometheus tolerates resets).
class Counter {
 public:
  void inc(uint64_t n = 1) { v_.fetch_add(n, std::memory_order_relaxed); }
  void set(uint64_t v) { v_.store(v, std::memory_order_relaxed); }
  uint64_t value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

class Gauge {
 public:
  void set(double v) { v_.store(v, std::memory_order_relaxed); }
  void add(double d) { v_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

// Fixed upper bounds (ascending; +Inf is implicit). observe() is a search over the bounds and
// three relaxed atomic adds.
class Histogram {
 public:
  explicit Histogram(const std::vector<double>* bounds);
  void observe(double v);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Observations in bucket i alone (not cumulative); i == bounds().size() is the +Inf bucket.
  uint64_t bucket(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }
  const std::vector<double>& bounds() const { return *bounds_; }

 private:
  const std::vector<double>* bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

enum class Type { kCounter, kGauge, kHistogram };

// The series of one metric name, one per combination of label values.
template <class T>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> labels,
         std::vector<double> bounds = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(labels)),
        bounds_(std::move(bounds)) {}
  // The series with these label values (as many as the family has label names; throws
  // Error(kInvalidArgument) otherwise), created at first use. The reference stays valid.
  T& with(const std::vector<std::string>& values);
  // Drops every series (a collector that rebuilds a family whose label sets change).
  void clear();

  const std::string& name() const { return name_; }
  const std::string& help() const { return help_; }
  const std::vector<std::string>& label_names() const { return labels_; }
  // Calls f(label values, series) for each series, in label order, under the family's lock.
  template <class F>
  void each(F&& f) const {
    std::lock_guard lk(mu_);
    for (const auto& [k, v] : series_) f(k, *v);
  }

 private:
  std::string name_, help_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;  // histograms
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::unique_ptr<T>> series_;
};

class Registry {
 public:
  // A family by name: created at the first call, the same one afterwards. Throws
  // Error(kInvalidArgument) for a name or label name Prometheus would reject, or a name
  // registered before with another type or other labels.
  Family<Counter>& counter(const std::string& name, const std::string& help,
                           const std::vector<std::string>& labels = {});
  Family<Gauge>& gauge(const std::string& name, const std::string& help,
                       const std::vector<std::string>& labels = {});
  Family<Histogram>& histogram(const std::string& name, const std::string& help,
                               const std::vector<std::string>& labels, std::vector<double> bounds);

  void add_collector(std::function<void()> collect);
  // Runs the collectors, then writes every family in the text format (families in name order,
  // series in label order). Serialized: two scrapes at once run one after the other.
  std::string render();
  // The names of the families registered so far.
  std::vector<std::string> names() const;

 private:
  struct Entry {
    Type type;
    std::vector<std::string> labels;
    std::unique_ptr<Family<Counter>> counter;
    std::unique_ptr<Family<Gauge>> gauge;
    std::unique_ptr<Family<Histogram>> histogram;
  };
  Entry& entry(const std::string& name, Type type, const std::vector<std::string>& labels);

  mutable std::mutex mu_;
  std::map<std::string, Entry> families_;
  std::vector<std::function<void()>> collectors_;
  std::mutex render_mu_;
};

// The label value escaped for the text format (backslash, double quote, newline).
std::string escape_label_value(std::string_view v);
// A sample value as the text format writes it: shortest round-trip decimal, NaN, +Inf, -Inf.
std::string format_value(double v);
// True when `name` matches [a-zA-Z_:][a-zA-Z0-9_:]* (labels: no colon).
bool valid_metric_name(std::string_view name);
bool valid_label_name(std::string_view name);

}  // namespace geoccl::metrics

#include "scenario.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <toml++/toml.h>

#include "units.h"

namespace geoccl::testbed {
namespace {

// Already carries file:line:column; never wrapped a second time.
struct ScenarioError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& source, const toml::node& node, const std::string& msg) {
  const auto& where = node.source().begin;
  throw ScenarioError(source + ":" + std::to_string(where.line) + ":" +
                           std::to_string(where.column) + ": " + msg);
}

// Unknown keys are errors: a typo such as "los = 0.01" must not silently
// produce a loss-free scenario.
void check_keys(const std::string& source, const toml::table& table, const std::string& where,
                const std::set<std::string>& allowed) {
  for (const auto& [key, node] : table) {
    if (!allowed.count(std::string(key.str()))) {
      fail(source, node, "unknown key '" + std::string(key.str()) + "' in " + where);
    }
  }
}

std::string get_string(const std::string& source, const toml::node& node, const std::string& key) {
  if (const auto* s = node.as_string()) return s->get();
  fail(source, node, "'" + key + "' must be a string");
}

// Quantities may be strings with units ("20ms") or, where a bare number is
// unambiguous (loss ratios, byte counts), numbers.
double get_loss(const std::string& source, const toml::node& node, const std::string& key) {
  try {
    double value = -1;
    if (const auto* f = node.as_floating_point()) value = f->get();
    else if (const auto* i = node.as_integer()) value = static_cast<double>(i->get());
    else return parse_loss(get_string(source, node, key));
    if (!(value >= 0 && value <= 1)) throw std::runtime_error("must be a ratio in [0, 1]");
    return value;
  } catch (const ScenarioError&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(source, node, key + ": " + e.what());
  }
}

std::int64_t get_duration(const std::string& source, const toml::node& node,
                          const std::string& key) {
  try {
    return parse_duration_ns(get_string(source, node, key));
  } catch (const ScenarioError&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(source, node, key + ": " + e.what());
  }
}

std::uint64_t get_rate(const std::string& source, const toml::node& node, const std::string& key) {
  try {
    if (const auto* i = node.as_integer(); i && i->get() == 0) return 0;
    return parse_rate_bps(get_string(source, node, key));
  } catch (const ScenarioError&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(source, node, key + ": " + e.what());
  }
}

std::int64_t get_int(const std::string& source, const toml::node& node, const std::string& key,
                     std::int64_t min, std::int64_t max) {
  const auto* i = node.as_integer();
  if (i == nullptr) fail(source, node, "'" + key + "' must be an integer");
  if (i->get() < min || i->get() > max) {
    fail(source, node,
         "'" + key + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return i->get();
}

QueueLimit get_queue(const std::string& source, const toml::node& node) {
  if (const auto* i = node.as_integer()) {
    if (i->get() <= 0) fail(source, node, "'queue' must be positive");
    return QueueLimit{static_cast<std::uint64_t>(i->get()), 0};
  }
  const std::string text = get_string(source, node, "queue");
  try {
    const ControlCommand c = parse_control_command("set * queue " + text);
    return *c.change.queue;
  } catch (const ScenarioError&) {
    throw;
  } catch (const std::runtime_error& e) {
    fail(source, node, std::string("queue: ") + e.what());
  }
}

GilbertElliott get_ge(const std::string& source, const toml::node& node) {
  const auto* t = node.as_table();
  if (t == nullptr) fail(source, node, "'gilbert_elliott' must be a table {p, r, loss_good, loss_bad}");
  check_keys(source, *t, "gilbert_elliott", {"p", "r", "loss_good", "loss_bad"});
  GilbertElliott ge;
  ge.enabled = true;
  if (const auto* n = t->get("p")) ge.p = get_loss(source, *n, "p");
  else fail(source, node, "gilbert_elliott needs 'p'");
  if (const auto* n = t->get("r")) ge.r = get_loss(source, *n, "r");
  else fail(source, node, "gilbert_elliott needs 'r'");
  if (const auto* n = t->get("loss_good")) ge.loss_good = get_loss(source, *n, "loss_good");
  if (const auto* n = t->get("loss_bad")) ge.loss_bad = get_loss(source, *n, "loss_bad");
  return ge;
}

LinkChange parse_link_table(const std::string& source, const toml::table& t, const std::string& where) {
  check_keys(source, t, where, {"rtt", "delay", "jitter", "rate", "queue", "loss", "gilbert_elliott", "flow_rate"});
  if (t.contains("rtt") && t.contains("delay")) {
    fail(source, *t.get("delay"), "give either 'rtt' or 'delay' in " + where + ", not both");
  }
  LinkChange c;
  if (const auto* n = t.get("rtt")) c.delay_ns = get_duration(source, *n, "rtt") / 2;
  if (const auto* n = t.get("delay")) c.delay_ns = get_duration(source, *n, "delay");
  if (const auto* n = t.get("jitter")) c.jitter_ns = get_duration(source, *n, "jitter");
  if (const auto* n = t.get("rate")) c.rate_bps = get_rate(source, *n, "rate");
  if (const auto* n = t.get("flow_rate")) c.flow_rate_bps = get_rate(source, *n, "flow_rate");
  if (const auto* n = t.get("queue")) c.queue = get_queue(source, *n);
  if (const auto* n = t.get("loss")) c.loss = get_loss(source, *n, "loss");
  if (const auto* n = t.get("gilbert_elliott")) c.ge = get_ge(source, *n);
  return c;
}

void check_link_names(const std::string& source, const toml::node& node, const Scenario& s,
                      const LinkSelector& sel) {
  for (const auto& name : {sel.from, sel.to}) {
    if (name != "*" && s.find_domain(name) == nullptr) {
      fail(source, node, "link '" + sel.to_string() + "' names unknown domain '" + name + "'");
    }
  }
}

Scenario build(const toml::table& root, const std::string& source) {
  Scenario s;
  s.source = source;
  check_keys(source, root, "the top level",
             {"name", "description", "seed", "mtu", "queue", "host_cc", "ranks_per_domain",
              "uplink", "domains", "links", "events"});
  if (const auto* n = root.get("name")) s.name = get_string(source, *n, "name");
  if (const auto* n = root.get("description")) s.description = get_string(source, *n, "description");
  if (const auto* n = root.get("seed")) s.seed = static_cast<std::uint64_t>(get_int(source, *n, "seed", 0, INT64_MAX));
  if (const auto* n = root.get("mtu")) s.mtu = static_cast<std::uint32_t>(get_int(source, *n, "mtu", 576, 65535));
  if (const auto* n = root.get("queue")) s.queue = get_queue(source, *n);
  if (const auto* n = root.get("host_cc")) {
    s.host_cc = get_string(source, *n, "host_cc");
    if (s.host_cc != "cubic" && s.host_cc != "bbr" && s.host_cc != "reno") {
      fail(source, *n, "host_cc must be \"cubic\", \"bbr\" or \"reno\"");
    }
  }
  if (const auto* n = root.get("ranks_per_domain")) {
    s.ranks_per_domain = static_cast<int>(get_int(source, *n, "ranks_per_domain", 1, 1024));
  }
  std::uint64_t default_uplink = 0;
  if (const auto* n = root.get("uplink")) default_uplink = get_rate(source, *n, "uplink");

  // Domains, in file order (toml++ tables are ordered by key, so we keep the
  // order of first appearance via source positions).
  const auto* domains = root.get_as<toml::table>("domains");
  if (domains == nullptr || domains->empty()) {
    throw std::runtime_error(source + ": a scenario needs a [domains] table with at least one domain");
  }
  std::vector<std::pair<toml::source_position, DomainSpec>> ordered;
  for (const auto& [key, node] : *domains) {
    DomainSpec d;
    d.name = std::string(key.str());
    if (!is_valid_domain_name(d.name)) {
      fail(source, node, "domain name '" + d.name + "' must match [a-z][a-z0-9_]{0,11}");
    }
    d.ranks = s.ranks_per_domain;
    d.uplink_bps = default_uplink;
    const auto* t = node.as_table();
    if (t == nullptr) fail(source, node, "domains." + d.name + " must be a table");
    check_keys(source, *t, "domains." + d.name, {"ranks", "uplink"});
    if (const auto* n = t->get("ranks")) d.ranks = static_cast<int>(get_int(source, *n, "ranks", 0, 1024));
    if (const auto* n = t->get("uplink")) d.uplink_bps = get_rate(source, *n, "uplink");
    ordered.emplace_back(node.source().begin, d);
  }
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto& a, const auto& b) {
    return a.first.line != b.first.line ? a.first.line < b.first.line : a.first.column < b.first.column;
  });
  for (auto& [pos, d] : ordered) s.domains.push_back(std::move(d));
  if (s.domains.size() > 250) throw std::runtime_error(source + ": at most 250 domains");

  // Links: [links.default], [links.a-b], [links."a>b"].
  s.default_link.mtu = s.mtu;
  s.default_link.queue = s.queue;
  std::vector<LinkOverride> one_way;
  if (const auto* links = root.get("links")) {
    const auto* lt = links->as_table();
    if (lt == nullptr) fail(source, *links, "'links' must be a table");
    for (const auto& [key, node] : *lt) {
      const std::string name(key.str());
      const auto* t = node.as_table();
      if (t == nullptr) fail(source, node, "links." + name + " must be a table");
      const LinkChange change = parse_link_table(source, *t, "links." + name);
      if (name == "default") {
        change.apply_to(s.default_link);
        continue;
      }
      LinkOverride o;
      try {
        o.link = parse_control_command("restore " + name).link;
      } catch (const ScenarioError&) {
    throw;
  } catch (const std::runtime_error& e) {
        fail(source, node, e.what());
      }
      if (o.link.all()) fail(source, node, "use [links.default] for every link");
      check_link_names(source, node, s, o.link);
      o.change = change;
      (o.link.both_directions ? s.overrides : one_way).push_back(o);
    }
  }
  s.overrides.insert(s.overrides.end(), one_way.begin(), one_way.end());

  if (const auto* events = root.get("events")) {
    const auto* arr = events->as_array();
    if (arr == nullptr) fail(source, *events, "'events' must be an array of tables ([[events]])");
    for (const auto& node : *arr) {
      const auto* t = node.as_table();
      if (t == nullptr) fail(source, node, "each event must be a table with 'at' and 'command'");
      check_keys(source, *t, "an event", {"at", "command"});
      const auto* at = t->get("at");
      const auto* command = t->get("command");
      if (at == nullptr || command == nullptr) fail(source, node, "an event needs 'at' and 'command'");
      ScheduledEvent e;
      e.at_ns = get_duration(source, *at, "at");
      e.text = get_string(source, *command, "command");
      try {
        e.command = parse_control_command(e.text);
      } catch (const ScenarioError&) {
        throw;
      } catch (const std::runtime_error& ex) {
        fail(source, *command, ex.what());
      }
      if (!e.command.changes_links()) {
        fail(source, *command, "events may only cut, restore, set, tamper, replay or sniff links");
      }
      check_link_names(source, *command, s, e.command.link);
      s.events.push_back(std::move(e));
    }
    std::stable_sort(s.events.begin(), s.events.end(),
                     [](const auto& a, const auto& b) { return a.at_ns < b.at_ns; });
  }
  return s;
}

}  // namespace

LinkParams Scenario::link(const std::string& from, const std::string& to) const {
  LinkParams p = default_link;
  for (const auto& o : overrides) {
    if (o.link.matches(from, to)) o.change.apply_to(p);
  }
  return p;
}

const DomainSpec* Scenario::find_domain(const std::string& name) const {
  for (const auto& d : domains) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

int Scenario::default_total_ranks() const {
  int n = 0;
  for (const auto& d : domains) n += d.ranks;
  return n;
}

std::string Scenario::describe() const {
  std::ostringstream out;
  out << "scenario " << (name.empty() ? source : name);
  if (!description.empty()) out << ": " << description;
  out << "\n  mtu " << mtu << ", host_cc " << host_cc << ", seed " << seed << "\n";
  for (const auto& d : domains) {
    out << "  domain " << d.name << ": " << d.ranks << " rank(s), uplink " << format_rate(d.uplink_bps)
        << "\n";
  }
  for (const auto& a : domains) {
    for (const auto& b : domains) {
      if (a.name != b.name) out << "  link " << a.name << ">" << b.name << ": " << to_string(link(a.name, b.name)) << "\n";
    }
  }
  for (const auto& e : events) out << "  at " << format_duration(e.at_ns) << ": " << e.text << "\n";
  return out.str();
}

Scenario parse_scenario(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw std::runtime_error(source + ":" + std::to_string(where.line) + ":" +
                             std::to_string(where.column) + ": " + std::string(e.description()));
  }
  return build(root, source);
}

Scenario load_scenario(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open scenario file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::runtime_error("cannot read scenario file '" + path + "'");
  return parse_scenario(text.str(), path);
}

}  // namespace geoccl::testbed

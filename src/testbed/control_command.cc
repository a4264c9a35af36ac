#include "control_command.h"

#include <stdexcept>
#include <vector>

#include "units.h"

namespace geoccl::testbed {
namespace {

std::vector<std::string> split_words(std::string_view line) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) ++i;
    std::size_t j = i;
    while (j < line.size() && !(line[j] == ' ' || line[j] == '\t' || line[j] == '\r' || line[j] == '\n')) ++j;
    if (j > i) words.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return words;
}

LinkSelector parse_link(const std::string& text) {
  LinkSelector sel;
  if (text == "*") {
    sel.from = sel.to = std::string(1, '*');  // not = "*": a false -Wrestrict of g++ 12 at -O3
    sel.both_directions = true;
    return sel;
  }
  const auto dash = text.find('-');
  const auto arrow = text.find('>');
  const auto pos = dash != std::string::npos ? dash : arrow;
  if (pos == std::string::npos || (dash != std::string::npos && arrow != std::string::npos)) {
    throw std::runtime_error("invalid link '" + text + "': expected A-B, A>B or *");
  }
  sel.from = text.substr(0, pos);
  sel.to = text.substr(pos + 1);
  sel.both_directions = dash != std::string::npos;
  if (!is_valid_domain_name(sel.from) || !is_valid_domain_name(sel.to) || sel.from == sel.to) {
    throw std::runtime_error("invalid link '" + text + "': expected two different domain names");
  }
  return sel;
}

GilbertElliott parse_ge(const std::string& text) {
  GilbertElliott ge;
  if (text == "off") return ge;
  std::vector<double> v;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    const auto end = comma == std::string::npos ? text.size() : comma;
    v.push_back(parse_loss(std::string_view(text).substr(start, end - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (v.size() != 4) {
    throw std::runtime_error("invalid ge '" + text + "': expected off or P,R,LOSS_GOOD,LOSS_BAD");
  }
  ge = GilbertElliott{v[0], v[1], v[2], v[3], true};
  return ge;
}

QueueLimit parse_queue(const std::string& text) {
  // "20ms" is a time at the link rate; anything else is a byte size.
  const bool is_time = !text.empty() && (text.back() == 's' || text.back() == 'S');
  if (is_time) return QueueLimit{0, parse_duration_ns(text)};
  return QueueLimit{parse_size_bytes(text), 0};
}

void set_key(LinkChange& c, const std::string& key, const std::string& value) {
  if (key == "rtt") c.delay_ns = parse_duration_ns(value) / 2;
  else if (key == "delay") c.delay_ns = parse_duration_ns(value);
  else if (key == "jitter") c.jitter_ns = parse_duration_ns(value);
  else if (key == "rate") c.rate_bps = parse_rate_bps(value);
  else if (key == "flow_rate") c.flow_rate_bps = parse_rate_bps(value);
  else if (key == "queue") c.queue = parse_queue(value);
  else if (key == "loss") c.loss = parse_loss(value);
  else if (key == "ge") c.ge = parse_ge(value);
  else if (key == "mtu") {
    const auto mtu = parse_size_bytes(value);
    if (mtu < 68 || mtu > 65535) throw std::runtime_error("invalid mtu '" + value + "'");
    c.mtu = static_cast<std::uint32_t>(mtu);
  } else {
    throw std::runtime_error("unknown link parameter '" + key +
                             "' (rtt, delay, jitter, rate, flow_rate, queue, loss, mtu, ge)");
  }
}

// A segment count for tamper and replay: a positive integer.
std::uint32_t parse_segments(const std::string& verb, const std::string& text) {
  constexpr std::uint64_t kMax = 1'000'000'000;
  std::uint64_t v = 0;
  bool ok = !text.empty() && text.size() <= 10;
  for (char c : text) {
    if (c < '0' || c > '9') ok = false;
    else v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!ok || v == 0 || v > kMax) {
    throw std::runtime_error("invalid " + verb + " count '" + text + "': expected a number of segments, 1 to " +
                             std::to_string(kMax));
  }
  return static_cast<std::uint32_t>(v);
}

// A sniff pattern: 1 to 64 bytes in hex, or "off".
std::vector<std::uint8_t> parse_pattern(const std::string& text) {
  constexpr std::size_t kMaxBytes = 64;
  if (text == "off") return {};
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<std::uint8_t> bytes;
  bool ok = !text.empty() && text.size() % 2 == 0 && text.size() <= 2 * kMaxBytes;
  for (std::size_t i = 0; ok && i + 1 < text.size(); i += 2) {
    const int hi = digit(text[i]), lo = digit(text[i + 1]);
    ok = hi >= 0 && lo >= 0;
    bytes.push_back(static_cast<std::uint8_t>(hi * 16 + lo));
  }
  if (!ok) {
    throw std::runtime_error("invalid sniff pattern '" + text + "': expected off or 1 to " +
                             std::to_string(kMaxBytes) + " bytes in hex (an even number of digits 0-9a-f)");
  }
  return bytes;
}

}  // namespace

std::string LinkSelector::to_string() const {
  if (all()) return "*";
  return from + (both_directions ? "-" : ">") + to;
}

bool is_valid_domain_name(std::string_view name) {
  if (name.empty() || name.size() > 12 || name[0] < 'a' || name[0] > 'z') return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

ControlCommand parse_control_command(std::string_view line) {
  const auto w = split_words(line);
  if (w.empty()) throw std::runtime_error("empty command; try 'help'");
  ControlCommand cmd;
  const std::string& verb = w[0];
  auto need = [&](std::size_t min, std::size_t max, const char* usage) {
    if (w.size() < min || w.size() > max) throw std::runtime_error(std::string("usage: ") + usage);
  };
  if (verb == "cut") {
    need(2, 3, "cut LINK [DURATION]");
    cmd.verb = ControlCommand::Verb::kCut;
    cmd.link = parse_link(w[1]);
    if (w.size() == 3) {
      cmd.duration_ns = parse_duration_ns(w[2]);
      if (cmd.duration_ns <= 0) throw std::runtime_error("cut duration must be positive");
    }
  } else if (verb == "restore") {
    need(2, 2, "restore LINK");
    cmd.verb = ControlCommand::Verb::kRestore;
    cmd.link = parse_link(w[1]);
  } else if (verb == "set") {
    if (w.size() < 4 || w.size() % 2 != 0) {
      throw std::runtime_error("usage: set LINK KEY VALUE [KEY VALUE ...]");
    }
    cmd.verb = ControlCommand::Verb::kSet;
    cmd.link = parse_link(w[1]);
    for (std::size_t i = 2; i + 1 < w.size(); i += 2) set_key(cmd.change, w[i], w[i + 1]);
  } else if (verb == "tamper" || verb == "replay") {
    need(3, 3, verb == "tamper" ? "tamper LINK N" : "replay LINK N");
    cmd.verb = verb == "tamper" ? ControlCommand::Verb::kTamper : ControlCommand::Verb::kReplay;
    cmd.link = parse_link(w[1]);
    cmd.segments = parse_segments(verb, w[2]);
  } else if (verb == "sniff") {
    need(3, 3, "sniff LINK HEX|off");
    cmd.verb = ControlCommand::Verb::kSniff;
    cmd.link = parse_link(w[1]);
    cmd.pattern = parse_pattern(w[2]);
  } else if (verb == "stats") {
    need(1, 1, "stats");
    cmd.verb = ControlCommand::Verb::kStats;
  } else if (verb == "links") {
    need(1, 1, "links");
    cmd.verb = ControlCommand::Verb::kLinks;
  } else if (verb == "help") {
    cmd.verb = ControlCommand::Verb::kHelp;
  } else {
    throw std::runtime_error("unknown command '" + verb + "'; try 'help'");
  }
  return cmd;
}

std::string control_help() {
  return "commands:\n"
         "  cut LINK [DURATION]        cut the link (for DURATION, else until restore)\n"
         "  restore LINK               end a cut\n"
         "  set LINK KEY VALUE [...]   KEY: rtt delay jitter rate flow_rate queue loss mtu ge\n"
         "                             e.g. set a-b loss 0.01 rate 100mbit\n"
         "  tamper LINK N              flip a payload byte in each of the next N TCP segments with payload\n"
         "  replay LINK N              give the next N of them their flow's previous segment's payload\n"
         "  sniff LINK HEX|off         count TCP segments whose payload contains the bytes HEX\n"
         "  stats                      per-link counters\n"
         "  links                      current link parameters\n"
         "LINK: a-b (both directions), a>b (one direction), * (all links)\n";
}

}  // namespace geoccl::testbed

#include "metrics/exposition.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "geoccl/error.h"

namespace geoccl::metrics {

std::string Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return v;
  return {};
}

namespace {

[[noreturn]] void bad_line(size_t line, const std::string& why) {
  throw Error(ErrorCode::kProtocol, "metrics text line " + std::to_string(line) + ": " + why);
}

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

// Reads a name at s[i..]; advances i.
std::string read_name(std::string_view s, size_t& i, size_t line, const char* what) {
  const size_t b = i;
  while (i < s.size() && name_char(s[i], i == b)) ++i;
  if (i == b) bad_line(line, std::string("expected a ") + what);
  return std::string(s.substr(b, i - b));
}

void skip_blanks(std::string_view s, size_t& i) {
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
}

double parse_value(std::string_view v, size_t line) {
  if (v == "NaN") return std::nan("");
  if (v == "+Inf" || v == "Inf") return HUGE_VAL;
  if (v == "-Inf") return -HUGE_VAL;
  if (v.empty() || v.size() > 64) bad_line(line, "bad value");
  const std::string z(v);
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(z.c_str(), &end);
  // strtod accepts "nan(...)", "infinity", hex floats: the format has none of those.
  for (char c : z)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      bad_line(line, "bad value '" + z + "'");
  if (end != z.c_str() + z.size()) bad_line(line, "bad value '" + z + "'");
  return d;
}

Sample parse_line(std::string_view s, size_t line) {
  Sample out;
  size_t i = 0;
  out.name = read_name(s, i, line, "metric name");
  skip_blanks(s, i);
  if (i < s.size() && s[i] == '{') {
    ++i;
    for (;;) {
      skip_blanks(s, i);
      if (i < s.size() && s[i] == '}') {
        ++i;
        break;
      }
      std::string key = read_name(s, i, line, "label name");
      skip_blanks(s, i);
      if (i >= s.size() || s[i] != '=') bad_line(line, "expected '=' after label " + key);
      ++i;
      skip_blanks(s, i);
      if (i >= s.size() || s[i] != '"') bad_line(line, "expected '\"' for label " + key);
      ++i;
      std::string val;
      for (;;) {
        if (i >= s.size()) bad_line(line, "unterminated label value");
        const char c = s[i++];
        if (c == '"') break;
        if (c != '\\') {
          val += c;
          continue;
        }
        if (i >= s.size()) bad_line(line, "unterminated escape");
        const char e = s[i++];
        if (e == '\\')
          val += '\\';
        else if (e == '"')
          val += '"';
        else if (e == 'n')
          val += '\n';
        else
          bad_line(line, std::string("bad escape \\") + e);
      }
      out.labels.emplace_back(std::move(key), std::move(val));
      skip_blanks(s, i);
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == '}') {
        ++i;
        break;
      }
      bad_line(line, "expected ',' or '}' in the label set");
    }
  }
  skip_blanks(s, i);
  const size_t b = i;
  while (i < s.size() && s[i] != ' ' && s[i] != '\t') ++i;
  out.value = parse_value(s.substr(b, i - b), line);
  skip_blanks(s, i);
  if (i < s.size()) {  // a timestamp: an integer
    const size_t t = i;
    if (s[i] == '-') ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == t || (s[t] == '-' && i == t + 1)) bad_line(line, "bad timestamp");
    skip_blanks(s, i);
    if (i < s.size()) bad_line(line, "trailing characters");
  }
  return out;
}

}  // namespace

std::vector<Sample> parse_exposition(std::string_view text) {
  std::vector<Sample> out;
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    size_t i = 0;
    skip_blanks(l, i);
    if (i == l.size() || l[i] == '#') continue;
    out.push_back(parse_line(l.substr(i), line));
  }
  return out;
}

std::optional<double> find_sample(const std::vector<Sample>& samples, std::string_view name,
                                  const std::vector<std::pair<std::string, std::string>>& match) {
  for (const auto& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) ok = ok && s.label(k) == v;
    if (ok) return s.value;
  }
  return std::nullopt;
}

}  // namespace geoccl::metrics

// Command-line, environment and main() helpers shared by the bench programs (gloo_bench,
// train_step). Header-only; no dependency on geoccl or Gloo.

#pragma once

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

namespace geoccl_bench {

// Error in the command line or environment: reported with the usage text, exit 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// -h or --help on the command line: RunMain prints the usage text to stdout, exit 0.
struct HelpRequested {};

// The variable's value, or nullopt when it is unset or empty.
inline std::optional<std::string> GetEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

inline int ParseInt(std::string_view name, std::string_view text, int min_value) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min_value) {
    throw UsageError(std::string(name) + ": expected an integer >= " +
                     std::to_string(min_value) + ", got '" + std::string(text) + "'");
  }
  return value;
}

inline int RequireIntEnv(const char* name, int min_value) {
  const auto v = GetEnv(name);
  if (!v) throw UsageError(std::string("environment variable ") + name + " is not set");
  return ParseInt(name, *v, min_value);
}

// Walks argv, accepting both "--flag value" and "--flag=value":
//   ArgReader args(argc, argv);
//   while (args.Next()) { if (args.name() == "--iters") iters = args.IntValue(1); ... }
class ArgReader {
 public:
  ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}

  // Advances to the next argument; false when there are none left. Throws HelpRequested at
  // -h / --help.
  bool Next() {
    if (++i_ >= argc_) return false;
    arg_ = argv_[i_];
    if (arg_ == "-h" || arg_ == "--help") throw HelpRequested{};
    name_ = arg_;
    value_.reset();
    if (const auto eq = arg_.find('='); arg_.starts_with("--") && eq != std::string_view::npos) {
      name_ = arg_.substr(0, eq);
      value_ = arg_.substr(eq + 1);
    }
    return true;
  }

  std::string_view arg() const { return arg_; }
  std::string_view name() const { return name_; }

  // The flag's value: after '=' or the next argument.
  std::string_view Value() {
    if (value_) return *value_;
    if (i_ + 1 >= argc_) throw UsageError(std::string(name_) + " needs a value");
    return argv_[++i_];
  }
  int IntValue(int min_value) { return ParseInt(name_, Value(), min_value); }

  UsageError Unknown() const { return UsageError("unknown argument '" + std::string(arg_) + "'"); }

 private:
  int argc_;
  char** argv_;
  int i_ = 0;
  std::string_view arg_;
  std::string_view name_;
  std::optional<std::string_view> value_;
};

// Exit status of a run whose results were checked: 0, or 1 after "<prog>[rank R]: <what>".
inline int CheckedExit(bool correct, const char* prog, int rank, const char* what) {
  if (correct) return 0;
  std::fprintf(stderr, "%s[rank %d]: %s\n", prog, rank, what);
  return 1;
}

// Runs `run` and maps the outcome to an exit code: HelpRequested prints the usage text to
// stdout (exit 0); UsageError prints the message and the usage text (exit 2); any other
// exception prints "<prog>[rank R]: error: ..." (exit 1).
template <typename Run>
int RunMain(const char* prog, std::string_view usage, Run&& run) {
  try {
    return run();
  } catch (const HelpRequested&) {
    std::cout << usage;
    return 0;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n%.*s", prog, e.what(), static_cast<int>(usage.size()),
                 usage.data());
    return 2;
  } catch (const std::exception& e) {
    const char* rank = std::getenv("RANK");
    std::fprintf(stderr, "%s[rank %s]: error: %s\n", prog, rank ? rank : "?", e.what());
    return 1;
  }
}

}  // namespace geoccl_bench

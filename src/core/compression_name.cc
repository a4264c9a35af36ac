// Compression::parse and name(): the spelling of a WAN codec in GEOCCL_WAN_COMPRESSION, the
// Python API and the command line.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "geoccl/compression.h"
#include "geoccl/error.h"

namespace geoccl {
namespace {

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument, "compression '" + std::string(text) + "': " + why +
                                               " (none|fp16|bf16|int8|int4|int2|int2-sr|topk:RATIO|"
                                               "topk-int8:RATIO|topk-int4:RATIO|topk-int2:RATIO, "
                                               "optionally @allgather or @ring)");
}

}  // namespace

Compression Compression::parse(std::string_view text) {
  Compression c;
  std::string_view codec = text, algo;
  if (auto at = text.find('@'); at != std::string_view::npos) {
    codec = text.substr(0, at);
    algo = text.substr(at + 1);
    if (algo == "allgather") c.algo = CompressedAlgo::kAllgather;
    else if (algo == "ring") c.algo = CompressedAlgo::kRing;
    else if (algo == "auto") c.algo = CompressedAlgo::kAuto;
    else bad(text, "unknown algorithm '" + std::string(algo) + "'");
  }
  if (codec == "none" || codec == "off" || codec.empty()) {
    if (!algo.empty()) bad(text, "no codec to run an algorithm for");
    return c;
  }
  if (codec == "fp16") c.codec = Codec::kFp16;
  else if (codec == "bf16") c.codec = Codec::kBf16;
  else if (codec == "int8") c.codec = Codec::kInt8;
  else if (codec == "int4") c.codec = Codec::kInt4;
  else if (codec == "int2") c.codec = Codec::kInt2;
  else if (codec == "int2-sr") c.codec = Codec::kInt2Sr;
  else if (codec.starts_with("topk")) {
    const size_t colon = codec.find(':');
    const std::string_view form = codec.substr(0, colon);
    if (form == "topk") c.codec = Codec::kTopK;
    else if (form == "topk-int8") c.codec = Codec::kTopKInt8;
    else if (form == "topk-int4") c.codec = Codec::kTopKInt4;
    else if (form == "topk-int2") c.codec = Codec::kTopKInt2;
    else bad(text, "unknown codec '" + std::string(form) + "'");
    if (colon == std::string_view::npos)
      bad(text, "top-k needs a ratio, e.g. " + std::string(form) + ":0.01");
    const std::string r(codec.substr(colon + 1));
    char* end = nullptr;
    const double v = std::strtod(r.c_str(), &end);
    if (r.empty() || end != r.c_str() + r.size() || !std::isfinite(v) || v <= 0 || v > 1)
      bad(text, "top-k ratio must be a number in (0, 1]");
    c.topk_ratio = v;
  } else {
    bad(text, "unknown codec '" + std::string(codec) + "'");
  }
  return c;
}

std::string Compression::name() const {
  std::string s;
  switch (codec) {
    case Codec::kNone: return "none";
    case Codec::kFp16: s = "fp16"; break;
    case Codec::kBf16: s = "bf16"; break;
    case Codec::kInt8: s = "int8"; break;
    case Codec::kInt4: s = "int4"; break;
    case Codec::kInt2: s = "int2"; break;
    case Codec::kInt2Sr: s = "int2-sr"; break;
    case Codec::kTopK: s = "topk"; break;
    case Codec::kTopKInt8: s = "topk-int8"; break;
    case Codec::kTopKInt4: s = "topk-int4"; break;
    case Codec::kTopKInt2: s = "topk-int2"; break;
  }
  if (is_topk()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, ":%.17g", topk_ratio);
    s += buf;
  }
  if (algo == CompressedAlgo::kAllgather) s += "@allgather";
  if (algo == CompressedAlgo::kRing) s += "@ring";
  return s;
}

}  // namespace geoccl

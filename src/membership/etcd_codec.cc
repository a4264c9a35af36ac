#include "membership/etcd_codec.h"

#include <charconv>
#include <nlohmann/json.hpp>

namespace geoccl::membership::etcd {
namespace {

using nlohmann::json;

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int8_t sextet(char c) {
  if (c >= 'A' && c <= 'Z') return static_cast<int8_t>(c - 'A');
  if (c >= 'a' && c <= 'z') return static_cast<int8_t>(c - 'a' + 26);
  if (c >= '0' && c <= '9') return static_cast<int8_t>(c - '0' + 52);
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::string b64(const std::string& s) {
  return base64_encode(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}

// Nesting depth outside strings, counted before the parser (which builds a tree of any depth)
// sees the body.
bool shallow(std::string_view body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > kMaxDepth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

// The body as a JSON object, or a discarded value.
json parse_object(std::string_view body) {
  if (body.size() > kMaxResponse || !shallow(body)) return json(json::value_t::discarded);
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return json(json::value_t::discarded);
  return j;
}

// A member of an object, or null when absent.
const json* member(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() ? nullptr : &*it;
}

// An int64 field: absent = 0, a JSON integer, or a decimal string (the gateway's form).
std::optional<int64_t> int64_field(const json& obj, const char* name) {
  const json* f = member(obj, name);
  if (!f) return 0;
  if (f->is_number_integer()) return f->get<int64_t>();
  if (f->is_number_unsigned()) {
    const auto u = f->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (!f->is_string()) return std::nullopt;
  const auto& s = f->get_ref<const std::string&>();
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// A bytes field (base64): absent = empty.
std::optional<std::vector<uint8_t>> bytes_field(const json& obj, const char* name) {
  const json* f = member(obj, name);
  if (!f) return std::vector<uint8_t>{};
  if (!f->is_string()) return std::nullopt;
  return base64_decode(f->get_ref<const std::string&>());
}

bool bool_field(const json& obj, const char* name, bool* out) {
  const json* f = member(obj, name);
  if (!f) return (*out = false), true;
  if (!f->is_boolean()) return false;
  *out = f->get<bool>();
  return true;
}

// Every answer carries a header; its revision is the store's revision at that point.
std::optional<int64_t> header_revision(const json& obj) {
  const json* h = member(obj, "header");
  if (!h || !h->is_object()) return std::nullopt;
  return int64_field(*h, "revision");
}

// A RangeResponse (top level, or inside a txn's responses) for a range of exactly `key`.
std::optional<std::optional<KeyValue>> range_result(const json& r, const std::string& key) {
  if (!r.is_object()) return std::nullopt;
  const auto count = int64_field(r, "count");
  if (!count || *count < 0) return std::nullopt;
  const json* kvs = member(r, "kvs");
  if (!kvs) return std::optional<KeyValue>{};
  if (!kvs->is_array() || kvs->size() > 1) return std::nullopt;
  if (kvs->empty()) return std::optional<KeyValue>{};
  const json& kv = kvs->front();
  if (!kv.is_object()) return std::nullopt;
  const auto k = bytes_field(kv, "key");
  if (!k || std::string(k->begin(), k->end()) != key) return std::nullopt;
  auto value = bytes_field(kv, "value");
  const auto mod = int64_field(kv, "mod_revision");
  const auto lease = int64_field(kv, "lease");
  if (!value || !mod || *mod <= 0 || !lease || *lease < 0) return std::nullopt;
  return std::optional<KeyValue>(KeyValue{std::move(*value), *mod, *lease});
}

// A put (top level, or a txn's request_put): the key, the value, and the lease when there is one.
json put_object(const std::string& key, std::span<const uint8_t> value, int64_t lease) {
  json put = {{"key", b64(key)}, {"value", base64_encode(value)}};
  // int64 as a string, as the gateway writes it (a JSON number loses precision above 2^53 in
  // many readers; lease IDs are that large).
  if (lease != 0) put["lease"] = std::to_string(lease);
  return put;
}

}  // namespace

std::string base64_encode(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = uint32_t{bytes[i]} << 16 | uint32_t{bytes[i + 1]} << 8 | bytes[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  const size_t left = bytes.size() - i;
  if (left > 0) {
    uint32_t v = uint32_t{bytes[i]} << 16;
    if (left == 2) v |= uint32_t{bytes[i + 1]} << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += left == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::optional<std::vector<uint8_t>> base64_decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=') : 0;
    uint32_t v = 0;
    for (int k = 0; k < 4; ++k) {
      if (k >= 4 - pad) {
        v <<= 6;
        continue;
      }
      const int8_t s = sextet(text[i + static_cast<size_t>(k)]);
      if (s < 0) return std::nullopt;
      v = v << 6 | static_cast<uint32_t>(s);
    }
    // Canonical: the bits that padding drops are zero.
    if ((pad == 1 && (v & 0xff) != 0) || (pad == 2 && (v & 0xffff) != 0)) return std::nullopt;
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (pad < 2) out.push_back(static_cast<uint8_t>(v >> 8));
    if (pad < 1) out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

std::string put_request(const std::string& key, std::span<const uint8_t> value, int64_t lease) {
  return put_object(key, value, lease).dump();
}

std::string range_request(const std::string& key) { return json{{"key", b64(key)}}.dump(); }

std::string ranges_request(const std::vector<std::string>& keys) {
  json success = json::array();
  for (const auto& k : keys) success.push_back(json{{"request_range", {{"key", b64(k)}}}});
  return json{{"success", std::move(success)}}.dump();
}

std::string delete_request(const std::string& key) { return json{{"key", b64(key)}}.dump(); }

std::string cas_request(const std::string& key, int64_t mod_revision,
                        std::span<const uint8_t> value, int64_t lease, const Marker* marker) {
  const std::string k = b64(key);
  // A key that does not exist compares as mod_revision 0.
  auto mod_is = [](const std::string& encoded_key, int64_t revision) {
    return json{{"key", encoded_key},
                {"target", "MOD"},
                {"result", "EQUAL"},
                {"mod_revision", std::to_string(revision)}};
  };
  json compare = json::array({mod_is(k, mod_revision)});
  json success = json::array({json{{"request_put", put_object(key, value, lease)}}});
  json failure = json::array({json{{"request_range", {{"key", k}}}}});
  if (marker) {
    const std::string m = b64(marker->key);
    compare.push_back(mod_is(m, marker->mod_revision));
    success.push_back(json{{"request_put", put_object(marker->key, marker->value, lease)}});
    failure.push_back(json{{"request_range", {{"key", m}}}});
  }
  return json{{"compare", std::move(compare)},
              {"success", std::move(success)},
              {"failure", std::move(failure)}}
      .dump();
}

std::string lease_grant_request(int64_t ttl_seconds) {
  return json{{"TTL", std::to_string(ttl_seconds)}}.dump();
}

std::string lease_keepalive_request(int64_t id) { return json{{"ID", std::to_string(id)}}.dump(); }

std::optional<std::optional<KeyValue>> decode_range_response(std::string_view body,
                                                             const std::string& key) {
  const json j = parse_object(body);
  if (j.is_discarded() || !header_revision(j)) return std::nullopt;
  return range_result(j, key);
}

std::optional<int64_t> decode_put_response(std::string_view body) {
  const json j = parse_object(body);
  if (j.is_discarded()) return std::nullopt;
  return header_revision(j);
}

std::optional<int64_t> decode_delete_response(std::string_view body) {
  const json j = parse_object(body);
  if (j.is_discarded() || !header_revision(j)) return std::nullopt;
  const auto deleted = int64_field(j, "deleted");
  if (!deleted || *deleted < 0) return std::nullopt;
  return deleted;
}

std::optional<TxnResult> decode_txn_response(std::string_view body, const std::string& key,
                                             const std::string& marker) {
  const json j = parse_object(body);
  if (j.is_discarded()) return std::nullopt;
  const auto revision = header_revision(j);
  if (!revision) return std::nullopt;
  TxnResult out;
  out.revision = *revision;
  if (!bool_field(j, "succeeded", &out.succeeded)) return std::nullopt;
  // A success put something: the header's revision is that put's, which is positive.
  if (out.succeeded && out.revision <= 0) return std::nullopt;
  // One response per request of the branch taken: a put each (the key's, the marker's), or a
  // range each.
  const size_t expected = marker.empty() ? 1 : 2;
  const json* responses = member(j, "responses");
  if (!responses || !responses->is_array() || responses->size() != expected) return std::nullopt;
  for (const json& r : *responses)
    if (!r.is_object()) return std::nullopt;
  if (out.succeeded) {
    for (const json& r : *responses) {
      const json* put = member(r, "response_put");
      if (!put || !put->is_object()) return std::nullopt;
    }
    return out;
  }
  auto read = [&](size_t i, const std::string& k) -> std::optional<std::optional<KeyValue>> {
    const json* range = member((*responses)[i], "response_range");
    if (!range) return std::nullopt;
    return range_result(*range, k);
  };
  auto current = read(0, key);
  if (!current) return std::nullopt;
  out.current = std::move(*current);
  if (!marker.empty()) {
    auto m = read(1, marker);
    if (!m) return std::nullopt;
    out.marker = std::move(*m);
  }
  return out;
}

std::optional<std::vector<std::optional<KeyValue>>> decode_ranges_response(std::string_view body,
                                                                          const std::vector<std::string>& keys) {
  const json j = parse_object(body);
  if (j.is_discarded() || !header_revision(j)) return std::nullopt;
  bool succeeded = false;
  if (!bool_field(j, "succeeded", &succeeded) || !succeeded) return std::nullopt;
  const json* responses = member(j, "responses");
  if (!responses || !responses->is_array() || responses->size() != keys.size()) return std::nullopt;
  std::vector<std::optional<KeyValue>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const json& r = (*responses)[i];
    if (!r.is_object()) return std::nullopt;
    const json* range = member(r, "response_range");
    if (!range) return std::nullopt;
    auto kv = range_result(*range, keys[i]);
    if (!kv) return std::nullopt;
    out.push_back(std::move(*kv));
  }
  return out;
}

std::optional<Lease> decode_lease_grant_response(std::string_view body) {
  const json j = parse_object(body);
  if (j.is_discarded() || !header_revision(j)) return std::nullopt;
  // LeaseGrantResponse has an error string of its own beside the gateway's error body.
  if (const json* err = member(j, "error");
      err && (!err->is_string() || !err->get_ref<const std::string&>().empty()))
    return std::nullopt;
  const auto id = int64_field(j, "ID");
  const auto ttl = int64_field(j, "TTL");
  if (!id || *id <= 0 || !ttl || *ttl <= 0 || *ttl > kMaxLeaseTtl) return std::nullopt;
  return Lease{*id, *ttl};
}

std::optional<int64_t> decode_lease_keepalive_response(std::string_view body, int64_t id) {
  const json j = parse_object(body);
  if (j.is_discarded() || j.size() != 1) return std::nullopt;
  const json* r = member(j, "result");
  if (!r || !r->is_object() || !header_revision(*r)) return std::nullopt;
  // etcd answers a renewal of a lease it does not have with that ID and no TTL (zero).
  const auto answered = int64_field(*r, "ID");
  const auto ttl = int64_field(*r, "TTL");
  if (!answered || *answered != id || !ttl || *ttl < 0) return std::nullopt;
  return ttl;
}

std::optional<std::string> decode_error_response(std::string_view body) {
  const json j = parse_object(body);
  if (j.is_discarded()) return std::nullopt;
  for (const char* name : {"message", "error"}) {
    const json* f = member(j, name);
    if (f && f->is_string() && !f->get_ref<const std::string&>().empty())
      return f->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace geoccl::membership::etcd

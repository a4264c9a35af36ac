// The etcd gateway's JSON, without a server: request bodies, the answers as etcd 3.4 writes them
// (int64 as strings, zero fields omitted), and answers that must not decode.
#include "membership/etcd_codec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using namespace geoccl::membership::etcd;

namespace {
std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string b64(const std::string& s) { return base64_encode(bytes(s)); }
}  // namespace

TEST(EtcdCodec, Base64MatchesRfc4648AndRefusesNonCanonicalText) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, text] : vectors) {
    EXPECT_EQ(b64(plain), text);
    EXPECT_EQ(base64_decode(text), bytes(plain)) << text;
  }
  std::vector<uint8_t> all(256);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(base64_decode(base64_encode(all)), all);
  for (const char* bad :
       {"Zg", "Zg=", "Zh==", "Zm9=", "Z===", "Zm9v\n", "Zm 9v", "Zg==Zg==", "Zm9-", "=Zm9"})
    EXPECT_FALSE(base64_decode(bad)) << bad;
}

TEST(EtcdCodec, RequestsCarryBase64KeysAndValues) {
  const auto put = nlohmann::json::parse(put_request("/p/k", bytes("v\x01"), 0));
  EXPECT_EQ(put["key"], b64("/p/k"));
  EXPECT_EQ(put["value"], b64("v\x01"));
  EXPECT_FALSE(put.contains("lease"));
  EXPECT_EQ(nlohmann::json::parse(range_request("/p/k"))["key"], b64("/p/k"));
  const auto txn = nlohmann::json::parse(cas_request("/p/n", 7, bytes("12345678"), 0));
  EXPECT_EQ(txn["compare"][0]["target"], "MOD");
  EXPECT_EQ(txn["compare"][0]["mod_revision"], "7");
  EXPECT_EQ(txn["success"][0]["request_put"]["value"], b64("12345678"));
  EXPECT_FALSE(txn["success"][0]["request_put"].contains("lease"));
  EXPECT_EQ(txn["failure"][0]["request_range"]["key"], b64("/p/n"));
  EXPECT_EQ(txn["success"].size(), 1u);
  EXPECT_EQ(txn["compare"].size(), 1u);
  EXPECT_EQ(txn["failure"].size(), 1u);
  // With a marker: its revision joins the compare, its put the counter's (on the same lease),
  // its range the failure branch's.
  const std::vector<uint8_t> seq = bytes("seq");
  const Marker marker{"/p/.adds/ab", 5, seq};
  const auto marked = nlohmann::json::parse(cas_request("/p/n", 7, bytes("12345678"), 9, &marker));
  ASSERT_EQ(marked["compare"].size(), 2u);
  EXPECT_EQ(marked["compare"][0]["key"], b64("/p/n"));
  EXPECT_EQ(marked["compare"][1]["key"], b64("/p/.adds/ab"));
  EXPECT_EQ(marked["compare"][1]["target"], "MOD");
  EXPECT_EQ(marked["compare"][1]["result"], "EQUAL");
  EXPECT_EQ(marked["compare"][1]["mod_revision"], "5");
  ASSERT_EQ(marked["success"].size(), 2u);
  EXPECT_EQ(marked["success"][1]["request_put"]["key"], b64("/p/.adds/ab"));
  EXPECT_EQ(marked["success"][1]["request_put"]["value"], b64("seq"));
  EXPECT_EQ(marked["success"][1]["request_put"]["lease"], "9");
  ASSERT_EQ(marked["failure"].size(), 2u);
  EXPECT_EQ(marked["failure"][0]["request_range"]["key"], b64("/p/n"));
  EXPECT_EQ(marked["failure"][1]["request_range"]["key"], b64("/p/.adds/ab"));
}

TEST(EtcdCodec, PutsCarryTheirLeaseAsTheGatewayWritesInt64) {
  // Lease IDs exceed 2^53: a string keeps every digit.
  const int64_t id = 4111120435805065221;
  EXPECT_EQ(nlohmann::json::parse(put_request("/p/k", bytes("v"), id))["lease"],
            "4111120435805065221");
  EXPECT_EQ(nlohmann::json::parse(cas_request("/p/n", 0, bytes("12345678"),
                                              id))["success"][0]["request_put"]["lease"],
            "4111120435805065221");
  EXPECT_EQ(nlohmann::json::parse(lease_grant_request(60))["TTL"], "60");
  EXPECT_EQ(nlohmann::json::parse(lease_keepalive_request(id))["ID"], "4111120435805065221");
  // A key's lease, as a range answer shows it.
  const auto found = decode_range_response(
      R"({"header":{"revision":"2"},"kvs":[{"key":")" + b64("/p/k") +
          R"(","create_revision":"2","mod_revision":"2","version":"1","value":")" + b64("v") +
          R"(","lease":"4111120435805065221"}],"count":"1"})",
      "/p/k");
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->lease, id);
  const auto no_lease = decode_range_response(
      R"({"header":{"revision":"2"},"kvs":[{"key":")" + b64("/p/k") + R"(","mod_revision":"2"}]})",
      "/p/k");
  ASSERT_TRUE(no_lease && *no_lease);
  EXPECT_EQ((*no_lease)->lease, 0);
}

TEST(EtcdCodec, LeaseAnswersDecodeAsEtcdWritesThem) {
  const std::string header =
      R"("header":{"cluster_id":"15118495548433857066","member_id":"13668033151171901709","revision":"1","raft_term":"2"})";
  const auto granted =
      decode_lease_grant_response("{" + header + R"(,"ID":"4111120435805065221","TTL":"60"})");
  ASSERT_TRUE(granted);
  EXPECT_EQ(granted->id, 4111120435805065221);
  EXPECT_EQ(granted->ttl, 60);
  // A renewal is a stream of one answer, wrapped in "result" and ended by a newline.
  EXPECT_EQ(decode_lease_keepalive_response(
                R"({"result":{)" + header + R"(,"ID":"4111120435805065221","TTL":"60"}})" + "\n",
                4111120435805065221),
            60);
  // A lease etcd no longer has: its ID and no TTL.
  EXPECT_EQ(
      decode_lease_keepalive_response(
          R"({"result":{)" + header + R"(,"ID":"4111120435805065221"}})", 4111120435805065221),
      0);
}

TEST(EtcdCodec, LeaseAnswersThatAreNotTheGatewaysDoNotDecode) {
  const std::string h = R"("header":{"revision":"3"})";
  for (const std::string& bad : {
           std::string("{}"),
           std::string(R"({"ID":"5","TTL":"60"})"),                  // no header
           "{" + h + R"(,"TTL":"60"})",                              // no ID
           "{" + h + R"(,"ID":"-5","TTL":"60"})",                    // negative ID
           "{" + h + R"(,"ID":"5"})",                                // no TTL
           "{" + h + R"(,"ID":"5","TTL":"0"})",                      // zero TTL
           "{" + h + R"(,"ID":"5","TTL":"9000000001"})",             // beyond etcd's maximum
           "{" + h + R"(,"ID":"5","TTL":"60","error":"too many"})",  // etcd names an error
           "{" + h + R"(,"ID":"5","TTL":"60","error":7})",
           "{" + h + R"(,"ID":5.5,"TTL":"60"})",
       })
    EXPECT_FALSE(decode_lease_grant_response(bad)) << bad;
  for (
      const std::string& bad : {
          std::string("{}"),
          "{" + h + R"(,"ID":"5","TTL":"60"})",                // not wrapped in "result"
          std::string(R"({"result":{"ID":"5","TTL":"60"}})"),  // no header
          R"({"result":{)" + h + R"(,"ID":"6","TTL":"60"}})",  // another lease
          R"({"result":{)" + h + R"(,"TTL":"60"}})",           // no ID
          R"({"result":{)" + h + R"(,"ID":"5","TTL":"-1"}})",
          R"({"result":{)" + h + R"(,"ID":"5","TTL":"60"},"x":1})", std::string(R"({"result":[]})"),
          std::string(
              R"({"error":{"grpc_code":14,"http_code":503,"message":"unavailable","http_status":"Service Unavailable"}})"),
          R"({"result":{)" + h + R"(,"ID":"5","TTL":"60"}})" + "\n" + R"({"result":{)" + h +
              R"(,"ID":"5","TTL":"60"}})",  // two answers
      })
    EXPECT_FALSE(decode_lease_keepalive_response(bad, 5)) << bad;
  EXPECT_FALSE(decode_range_response(
      "{" + h + R"(,"kvs":[{"key":")" + b64("/k") + R"(","mod_revision":"2","lease":"-1"}]})",
      "/k"));
}

TEST(EtcdCodec, RangeAnswersDecodeAsEtcdWritesThem) {
  const std::string header =
      R"("header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"9","raft_term":"2"})";
  const auto found = decode_range_response(
      "{" + header + R"(,"kvs":[{"key":")" + b64("/p/k") +
          R"(","create_revision":"5","mod_revision":"8","version":"2","value":")" + b64("hello") +
          R"("}],"count":"1"})",
      "/p/k");
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->value, bytes("hello"));
  EXPECT_EQ((*found)->mod_revision, 8);
  // A key with an empty value has no "value" field; a missing key no "kvs" and no "count".
  const auto empty = decode_range_response(
      "{" + header + R"(,"kvs":[{"key":")" + b64("/p/k") + R"(","mod_revision":8}],"count":1})",
      "/p/k");
  ASSERT_TRUE(empty && *empty);
  EXPECT_TRUE((*empty)->value.empty());
  const auto missing = decode_range_response("{" + header + "}", "/p/k");
  ASSERT_TRUE(missing);
  EXPECT_FALSE(*missing);
}

TEST(EtcdCodec, BatchedReadsAreOneTransactionAndDecodeInTheOrderAsked) {
  const auto q = nlohmann::json::parse(ranges_request({"/p/a", "/p/b"}));
  EXPECT_FALSE(q.contains("compare"));
  ASSERT_EQ(q["success"].size(), 2u);
  EXPECT_EQ(q["success"][0]["request_range"]["key"], b64("/p/a"));
  EXPECT_EQ(q["success"][1]["request_range"]["key"], b64("/p/b"));
  const std::string header = R"("header":{"revision":"9"})";
  const std::string a = R"({"response_range":{"header":{"revision":"9"},"kvs":[{"key":")" + b64("/p/a") +
                        R"(","mod_revision":"8","value":")" + b64("va") + R"("}],"count":"1"}})";
  const std::string none = R"({"response_range":{"header":{"revision":"9"}}})";
  auto answer = [&](const std::string& list, const char* succeeded = "true") {
    return "{" + header + R"(,"succeeded":)" + succeeded + R"(,"responses":[)" + list + "]}";
  };
  const auto got = decode_ranges_response(answer(a + "," + none), {"/p/a", "/p/b"});
  ASSERT_TRUE(got);
  ASSERT_EQ(got->size(), 2u);
  ASSERT_TRUE((*got)[0]);
  EXPECT_EQ((*got)[0]->value, bytes("va"));
  EXPECT_FALSE((*got)[1]);
  // Another order, another count, a failed transaction, a put among the answers: none decodes.
  EXPECT_FALSE(decode_ranges_response(answer(none + "," + a), {"/p/a", "/p/b"}));
  EXPECT_FALSE(decode_ranges_response(answer(a), {"/p/a", "/p/b"}));
  EXPECT_FALSE(decode_ranges_response(answer(a + "," + none + "," + none), {"/p/a", "/p/b"}));
  EXPECT_FALSE(decode_ranges_response(answer(a + "," + none, "false"), {"/p/a", "/p/b"}));
  EXPECT_FALSE(decode_ranges_response(answer(a + R"(,{"response_put":{}})"), {"/p/a", "/p/b"}));
}

TEST(EtcdCodec, TxnPutAndDeleteAnswersDecode) {
  const std::string header = R"("header":{"revision":"12"})";
  const auto won = decode_txn_response(
      "{" + header +
          R"(,"succeeded":true,"responses":[{"response_put":{"header":{"revision":"12"}}}]})",
      "/n");
  ASSERT_TRUE(won);
  EXPECT_TRUE(won->succeeded);
  EXPECT_EQ(won->revision, 12);
  // With a marker, two puts answer; one, three, or a range among them do not decode.
  const std::string put = R"({"response_put":{"header":{"revision":"12"}}})";
  const auto puts = [&](std::initializer_list<std::string> each) {
    std::string list;
    for (const auto& p : each) list += (list.empty() ? "" : ",") + p;
    return "{" + header + R"(,"succeeded":true,"responses":[)" + list + "]}";
  };
  const auto won_marked = decode_txn_response(puts({put, put}), "/n", "/m");
  ASSERT_TRUE(won_marked);
  EXPECT_TRUE(won_marked->succeeded);
  EXPECT_EQ(won_marked->revision, 12);
  EXPECT_FALSE(decode_txn_response(puts({put, put}), "/n"));
  EXPECT_FALSE(decode_txn_response(puts({put}), "/n", "/m"));
  EXPECT_FALSE(decode_txn_response(puts({put, put, put}), "/n", "/m"));
  EXPECT_FALSE(decode_txn_response(puts({put, R"({"response_range":{}})"}), "/n", "/m"));
  // A success that says no revision did not put anything.
  EXPECT_FALSE(
      decode_txn_response(R"({"header":{},"succeeded":true,"responses":[)" + put + "]}", "/n"));
  const auto range_of = [](const std::string& key, const std::vector<uint8_t>& value) {
    return R"({"response_range":{"header":{"revision":"12"},"kvs":[{"key":")" + b64(key) +
           R"(","mod_revision":"11","value":")" + base64_encode(value) + R"("}],"count":"1"}})";
  };
  const std::vector<uint8_t> five{5, 0, 0, 0, 0, 0, 0, 0};
  const auto lost =
      decode_txn_response("{" + header + R"(,"responses":[)" + range_of("/n", five) + "]}", "/n");
  ASSERT_TRUE(lost);
  EXPECT_FALSE(lost->succeeded);
  ASSERT_TRUE(lost->current);
  EXPECT_EQ(lost->current->mod_revision, 11);
  EXPECT_FALSE(lost->marker);
  // With a marker, the failure reads the key and the marker, in that order; the marker may be
  // absent (no add of that store applied yet).
  const std::vector<uint8_t> mark = bytes("0123456789abcdef");
  const auto lost_marked = decode_txn_response(
      "{" + header + R"(,"responses":[)" + range_of("/n", five) + "," + range_of("/m", mark) + "]}",
      "/n", "/m");
  ASSERT_TRUE(lost_marked);
  EXPECT_FALSE(lost_marked->succeeded);
  ASSERT_TRUE(lost_marked->current && lost_marked->marker);
  EXPECT_EQ(lost_marked->current->value, five);
  EXPECT_EQ(lost_marked->marker->value, mark);
  EXPECT_EQ(lost_marked->marker->mod_revision, 11);
  const auto no_marker =
      decode_txn_response("{" + header + R"(,"responses":[)" + range_of("/n", five) +
                              R"(,{"response_range":{"header":{"revision":"12"}}}]})",
                          "/n", "/m");
  ASSERT_TRUE(no_marker);
  EXPECT_TRUE(no_marker->current);
  EXPECT_FALSE(no_marker->marker);
  for (const std::string& bad : {
           "{" + header + R"(,"responses":[)" + range_of("/n", five) + "]}",  // no marker range
           "{" + header + R"(,"responses":[)" + range_of("/m", mark) + "," + range_of("/n", five) +
               "]}",  // swapped
           "{" + header + R"(,"responses":[)" + range_of("/n", five) + "," + put + "]}",
       })
    EXPECT_FALSE(decode_txn_response(bad, "/n", "/m")) << bad;
  EXPECT_EQ(decode_put_response("{" + header + "}"), 12);
  EXPECT_EQ(decode_delete_response("{" + header + R"(,"deleted":"1"})"), 1);
  EXPECT_EQ(decode_delete_response("{" + header + "}"), 0);
  EXPECT_EQ(
      decode_error_response(
          R"({"error":"etcdserver: request is too large","code":3,"message":"etcdserver: request is too large"})"),
      "etcdserver: request is too large");
}

TEST(EtcdCodec, AnswersThatAreNotTheGatewaysDoNotDecode) {
  const std::string h = R"("header":{"revision":"3"})";
  for (const std::string& bad : {
           std::string(""),
           std::string("null"),
           std::string("[]"),
           std::string("{"),
           std::string("<html>"),
           std::string("{}"),          // no header
           "{" + h + R"(,"kvs":{}})",  // kvs not an array
           "{" + h + R"(,"kvs":[{"key":")" + b64("/other") +
               R"(","mod_revision":"2"}]})",  // another key
           "{" + h + R"(,"kvs":[{"key":")" + b64("/k") +
               R"(","mod_revision":"2","value":"!!"}]})",  // bad base64
           "{" + h + R"(,"kvs":[{"key":")" + b64("/k") + R"(","mod_revision":"x"}]})",  // bad int
           "{" + h + R"(,"kvs":[{"key":")" + b64("/k") + R"("}]})",  // no revision
           "{" + h + R"(,"count":"-1"})",
       })
    EXPECT_FALSE(decode_range_response(bad, "/k")) << bad;
  EXPECT_FALSE(decode_txn_response(
      "{" + h + R"(,"succeeded":"yes","responses":[{"response_put":{}}]})", "/k"));
  EXPECT_FALSE(decode_txn_response("{" + h + R"(,"succeeded":true})", "/k"));
  EXPECT_FALSE(decode_delete_response("{" + h + R"(,"deleted":"-2"})"));
  // Deep nesting is refused before the parser builds it.
  EXPECT_FALSE(decode_put_response("{" + h + R"(,"x":)" + std::string(10000, '[') +
                                   std::string(10000, ']') + "}"));
  EXPECT_FALSE(decode_error_response("{}"));
}

// Blob transfers between real processes on loopback sockets (blob_check.cc is the rank program):
// 4 ranks in 2 domains unless said otherwise, so the broadcast goes hierarchically.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "run_ranks.h"

namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

class BlobMp : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("geoccl_blob_mp_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::vector<int> run(int n, const std::string& mode, Env extra = {}) {
    extra.emplace_back("GEOCCL_BLOB_DIR", dir_.string());
    if (n == 4) extra.emplace_back("GEOCCL_TEST_DOMAINS", "a,a,b,b");
    return run_ranks(n, mode, 90, extra);
  }
  static void all_zero(const std::vector<int>& codes, const std::string& what) {
    for (size_t r = 0; r < codes.size(); ++r) EXPECT_EQ(codes[r], 0) << what << ", rank " << r;
  }

  std::filesystem::path dir_;
};

TEST_F(BlobMp, BytesBroadcastEveryCodecAcrossTwoDomains) { all_zero(run(4, "bytes"), "bytes"); }

TEST_F(BlobMp, FileBroadcastFromTheMappedFile) { all_zero(run(4, "file"), "file"); }

TEST_F(BlobMp, FileSendRecvBetweenTwoRanksOfThree) { all_zero(run(3, "p2p"), "p2p"); }

TEST_F(BlobMp, CorruptedChunkIsFetchedAgainAndNeverDelivered) {
  all_zero(run(4, "corrupt", {{"GEOCCL_BLOB_TEST_CORRUPT", "3:2"}}), "corrupt");
}

// Run 1: rank 2 exits after verifying 40 of 65 chunks; everyone else gets a typed error in time.
// Run 2, a fresh group: only the missing chunks go, and every destination has the right hash.
TEST_F(BlobMp, ResumesAfterAReceiverExitedMidTransfer) {
  const auto first = run(4, "resume-break", {{"GEOCCL_BLOB_TEST_EXIT_AFTER", "2:40"}});
  for (size_t r = 0; r < first.size(); ++r)
    EXPECT_EQ(first[r], r == 2 ? 75 : 0) << "run 1, rank " << r;
  all_zero(run(4, "resume-finish"), "run 2");
}

TEST_F(BlobMp, BadInputFailsEveryRankWithTheSameTypedError) {
  all_zero(run(4, "bad-input"), "bad input");
}

}  // namespace

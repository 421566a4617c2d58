// Hashing: stable across runs and machines, sensitive to every byte and to string boundaries.
#include "util/hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace kiln {
namespace {

TEST(Hash, KnownDigestOfEmptyInput) {
  // XXH3-64 of zero bytes with seed 0, from the xxHash specification's test vectors.
  EXPECT_EQ(hash_bytes("", 0), 0x2D06800538D394C2ULL);
  EXPECT_EQ(Hasher().digest(), 0x2D06800538D394C2ULL);
}

TEST(Hash, IncrementalEqualsOneShot) {
  const std::string text = "graph(%x : Tensor): return (%x)";
  Hasher h;
  h.update(text.data(), 10).update(text.data() + 10, text.size() - 10);
  EXPECT_EQ(h.digest(), hash_bytes(text.data(), text.size()));
}

TEST(Hash, StringsAreLengthPrefixed) {
  Hasher a, b;
  a.update(std::string_view("ab")).update(std::string_view("c"));
  b.update(std::string_view("a")).update(std::string_view("bc"));
  EXPECT_NE(a.digest(), b.digest());
}

TEST(Hash, ScalarsAndHex) {
  Hasher a, b;
  a.update(int64_t{1});
  b.update(int64_t{2});
  EXPECT_NE(a.digest(), b.digest());
  EXPECT_EQ(hash_hex(0xabcULL), "0000000000000abc");
  EXPECT_EQ(hash_hex(a.digest()).size(), 16u);
}

TEST(Hash, Digest128) {
  // XXH3-128 of zero bytes with seed 0 (the xxHash specification's test vectors).
  EXPECT_EQ(Hasher().digest128_hex(), "99aa06d3014798d86001c324468d497f");
  Hasher a;
  a.update(int64_t{1});
  EXPECT_NE(a.digest128_hex(), Hasher().digest128_hex());
}

TEST(Hash, ChunkDigestsAreEachChunksOwnOnAnyThread) {
  // Enough bytes that several threads share them; sizes that are not multiples of the chunk.
  std::vector<uint8_t> big((size_t{40} << 20) + 123), small(1000);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  for (size_t i = 0; i < small.size(); ++i) small[i] = static_cast<uint8_t>(i);
  const size_t chunk = size_t{1} << 20;
  const auto out = chunk_digests(
      {{big.data(), big.size()}, {small.data(), 0}, {small.data(), small.size()}}, chunk);
  ASSERT_EQ(out.size(), 3u);
  ASSERT_EQ(out[0].size(), 41u);
  EXPECT_TRUE(out[1].empty());
  ASSERT_EQ(out[2].size(), 1u);
  const auto one = [](const uint8_t* data, size_t size) {
    return chunk_digests({{data, size}}, size).at(0).at(0);
  };
  for (size_t k = 0; k < out[0].size(); ++k) {
    const size_t at = k * chunk;
    EXPECT_EQ(out[0][k], one(big.data() + at, std::min(chunk, big.size() - at))) << k;
  }
  EXPECT_EQ(out[2][0], one(small.data(), small.size()));
  // Every byte counts.
  big[big.size() - 1] ^= 1;
  EXPECT_NE(chunk_digests({{big.data(), big.size()}}, chunk)[0].back(), out[0].back());
  EXPECT_EQ(chunk_digests({{big.data(), big.size()}}, chunk)[0].front(), out[0].front());
}

}  // namespace
}  // namespace kiln

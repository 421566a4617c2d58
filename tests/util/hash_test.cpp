// Hashing: stable across runs and machines, sensitive to every byte and to string boundaries.
#include "util/hash.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln

// SHA-256 content addresses: the standard test vectors, and fields that cannot run together.
#include "kiln/digest.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(Digest, Sha256OfKnownTexts) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Digest, FieldsAreFramedByTheirLengths) {
  std::string ab_c = Sha256().add("ab").add("c").hex();
  std::string a_bc = Sha256().add("a").add("bc").hex();
  EXPECT_NE(ab_c, a_bc);
  EXPECT_EQ(ab_c, Sha256().add("ab").add("c").hex());
  EXPECT_EQ(ab_c.size(), 64u);
  EXPECT_NE(ab_c, sha256_hex("abc"));
}

TEST(Digest, RawPiecesHashAsTheirConcatenation) {
  EXPECT_EQ(Sha256().add_raw("ab").add_raw("c").hex(), sha256_hex("abc"));
  EXPECT_EQ(Sha256().add_raw("").hex(), sha256_hex(""));
  std::string big(200000, 'x');
  EXPECT_EQ(
      Sha256().add_raw(std::string_view(big).substr(0, 70001)).add_raw(big.substr(70001)).hex(),
      sha256_hex(big));
}

}  // namespace
}  // namespace kiln

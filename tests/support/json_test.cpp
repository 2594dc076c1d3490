// kiln's JSON writer (the CLI's --json, artifact metadata, benchmark lines): what any message
// becomes.
#include "kiln/json.h"

#include <gtest/gtest.h>

#include <limits>

namespace kiln {
namespace {

TEST(Json, StringsEscapeQuotesBackslashesAndControlCharacters) {
  EXPECT_EQ(json_string("plain"), R"("plain")");
  EXPECT_EQ(json_string("a \"b\" c\\d"), R"("a \"b\" c\\d")");
  EXPECT_EQ(json_string("line\nnext\ttab\r"), R"("line\nnext\ttab\r")");
  EXPECT_EQ(json_string(std::string("nul\0bell\a", 9)), R"("nul\u0000bell\u0007")");
  EXPECT_EQ(json_string("\x7f"), R"("\u007f")");
}

TEST(Json, WellFormedUtf8PassesAndAnythingElseBecomesReplacement) {
  EXPECT_EQ(json_string("π ≤ 4 🙂"), "\"π ≤ 4 🙂\"");
  EXPECT_EQ(json_string("bad\xff\xfe"), R"("bad\ufffd\ufffd")");
  EXPECT_EQ(json_string("cut \xe2\x89"), R"("cut \ufffd\ufffd")");    // truncated sequence
  EXPECT_EQ(json_string("\xc0\xaf"), R"("\ufffd\ufffd")");            // overlong '/'
  EXPECT_EQ(json_string("\xed\xa0\x80"), R"("\ufffd\ufffd\ufffd")");  // a surrogate
}

TEST(Json, NumbersRoundTripAndNonFiniteIsNull) {
  EXPECT_EQ(json_number(0), "0");
  EXPECT_EQ(json_number(2.5), "2.5");
  EXPECT_EQ(json_number(-1e-7), "-1e-07");
  EXPECT_EQ(json_number(0.1), "0.1");
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(json_number(1234.5678, 4), "1235");  // significant digits, as the benchmarks print
  EXPECT_EQ(json_number(0.000123456, 3), "0.000123");
}

TEST(Json, ArraysOfStringsAndOfJson) {
  EXPECT_EQ(json_string_array({"a", "b\"c"}), R"(["a","b\"c"])");
  EXPECT_EQ(json_array({"1", "{}", "null"}), "[1,{},null]");
  EXPECT_EQ(json_string_array({}), "[]");
}

TEST(Json, ObjectsKeepInsertionOrder) {
  JsonObject o;
  o.str("func", "mat\"mul").boolean("ok", true).null("error").integer("n", -3).num("e", 0.5);
  o.raw("index", json_int_array({3, 1}));
  EXPECT_EQ(o.done(), R"({"func":"mat\"mul","ok":true,"error":null,"n":-3,"e":0.5,"index":[3,1]})");
  EXPECT_EQ(JsonObject().done(), "{}");
  EXPECT_EQ(json_int_array({}), "[]");
}

}  // namespace
}  // namespace kiln

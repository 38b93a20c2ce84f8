// The test's JSON parser: it must accept valid JSON and reject malformed
// JSON, or the profiler's trace tests would prove nothing.
#include <gtest/gtest.h>

#include <string>

#include "profiler/json.hpp"

namespace {

TEST(JsonParser, AcceptsValidDocuments) {
  const json::Value v = json::parse(R"( {"a": [1, -2.5, 3e2, 0, -0.0, 1E-3], "b": {"c": null, "d": true, "e": false},
      "s": "q\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00", "empty": [], "o": {}} )");
  ASSERT_TRUE(v.is_object());
  ASSERT_EQ(v["a"].array().size(), 6U);
  EXPECT_DOUBLE_EQ(v["a"].array()[1].number(), -2.5);
  EXPECT_DOUBLE_EQ(v["a"].array()[2].number(), 300);
  EXPECT_DOUBLE_EQ(v["a"].array()[5].number(), 0.001);
  EXPECT_TRUE(v["b"]["c"].is_null());
  EXPECT_TRUE(v["b"]["d"].boolean());
  EXPECT_EQ(v["s"].string(), "q\"\\/\b\f\n\r\t\xC3\xA9\xF0\x9F\x98\x80");
  EXPECT_TRUE(v["empty"].array().empty());
  EXPECT_TRUE(v["o"].object().empty());
  EXPECT_TRUE(json::parse("42").is_number());
  EXPECT_TRUE(json::parse("\"x\"").is_string());
}

TEST(JsonParser, RejectsMalformedDocuments) {
  const char* bad[] = {
      "",                      // nothing
      "   ",                   // only whitespace
      "{",                     // unterminated object
      "[1, 2",                 // unterminated array
      "[1, 2,]",               // trailing comma
      "{\"a\": 1,}",           // trailing comma in an object
      "{a: 1}",                // unquoted key
      "{\"a\" 1}",             // missing colon
      "{\"a\": 1, \"a\": 2}",  // duplicate key
      "[01]",                  // leading zero
      "[1.]",                  // no digit after the point
      "[.5]",                  // no digit before the point
      "[1e]",                  // empty exponent
      "[-]",                   // lone minus
      "[+1]",                  // plus sign
      "[NaN]",                 // not JSON
      "[tru]",                 // bad literal
      "[nul]",                 // bad literal
      "\"abc",                 // unterminated string
      "\"a\nb\"",              // raw newline in a string
      "\"\\x\"",               // bad escape
      "\"\\u12\"",             // short \u escape
      "\"\\u12G4\"",           // bad hex digit
      "\"\\ud83d\"",           // lone high surrogate
      "\"\\ude00\"",           // lone low surrogate
      "[1] [2]",               // two documents
      "{} x",                  // trailing garbage
      "['a']",                 // single quotes
      "[1 2]",                 // missing comma
  };
  for (const char* text : bad) {
    EXPECT_THROW((void)json::parse(text), json::ParseError) << "accepted: " << text;
  }
  std::string deep(300, '[');
  deep += std::string(300, ']');
  EXPECT_THROW((void)json::parse(deep), json::ParseError) << "nesting limit";
}

}  // namespace

//===- ExprTest.cpp - Size expressions over symbols -----------------------===//
//
// Part of moec.
//
//===----------------------------------------------------------------------===//

#include "moec/Runtime/Expr.h"

#include <gtest/gtest.h>

#include <limits>

using namespace moec::rt;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

int64_t eval(const std::string &rpn, std::vector<int64_t> symbols = {}) {
  int64_t value = -1;
  Status s = evalExpr(rpn, symbols, value);
  EXPECT_TRUE(s.isOk()) << rpn << ": " << s.toString();
  return value;
}

/// The message of a failing evaluation ("" if it succeeds).
std::string evalError(const std::string &rpn,
                      std::vector<int64_t> symbols = {}) {
  int64_t value = 0;
  Status s = evalExpr(rpn, symbols, value);
  if (s.isOk())
    return "";
  EXPECT_EQ(s.code(), ErrorCode::InvalidArgument);
  return s.message();
}

std::string validateError(const std::string &rpn, size_t numSymbols) {
  Status s = validateExpr(rpn, numSymbols);
  return s.isOk() ? "" : s.message();
}

TEST(ExprTest, Literals) {
  EXPECT_EQ(eval("0"), 0);
  EXPECT_EQ(eval("42"), 42);
  EXPECT_EQ(eval("007"), 7);
  EXPECT_EQ(eval("9223372036854775807"), kMax);
}

TEST(ExprTest, Symbols) {
  EXPECT_EQ(eval("s0", {5}), 5);
  EXPECT_EQ(eval("s2", {1, 2, 3}), 3);
  EXPECT_EQ(eval("s1 s0 -", {4, 10}), 6);
  EXPECT_EQ(eval("s10", std::vector<int64_t>(11, 9)), 9);
}

TEST(ExprTest, Operators) {
  EXPECT_EQ(eval("2 3 +"), 5);
  EXPECT_EQ(eval("7 3 -"), 4);
  EXPECT_EQ(eval("3 3 -"), 0);
  EXPECT_EQ(eval("6 7 *"), 42);
  EXPECT_EQ(eval("7 2 /"), 3);
  EXPECT_EQ(eval("0 5 /"), 0);
  EXPECT_EQ(eval("7 2 cdiv"), 4);
  EXPECT_EQ(eval("8 2 cdiv"), 4);
  EXPECT_EQ(eval("0 2 cdiv"), 0);
  EXPECT_EQ(eval("3 9 min"), 3);
  EXPECT_EQ(eval("3 9 max"), 9);
}

TEST(ExprTest, Composite) {
  EXPECT_EQ(eval("s0 8 * 127 +", {3}), 151);
  // Ragged tile count: cdiv(T*k, 128) + E.
  EXPECT_EQ(eval("s0 8 * 128 cdiv 128 +", {1000}), 63 + 128);
  EXPECT_EQ(eval("s0 s1 max s0 s1 min -", {3, 11}), 8);
  // Long expressions: 10001 terms.
  std::string rpn = "1";
  for (int i = 0; i < 10000; ++i)
    rpn += " 1 +";
  EXPECT_EQ(eval(rpn), 10001);
}

TEST(ExprTest, Limits) {
  EXPECT_EQ(eval("9223372036854775806 1 +"), kMax);
  EXPECT_EQ(eval("4611686018427387903 2 *"), kMax - 1);
  EXPECT_EQ(eval("9223372036854775807 9223372036854775807 /"), 1);
  EXPECT_EQ(eval("9223372036854775807 2 cdiv"), 4611686018427387904);
}

TEST(ExprTest, ArithmeticErrors) {
  EXPECT_NE(evalError("9223372036854775807 1 +").find("overflows int64"),
            std::string::npos);
  EXPECT_NE(evalError("4611686018427387904 2 *").find("overflows int64"),
            std::string::npos);
  EXPECT_NE(evalError("s0 s0 *", {kMax}).find("overflows"), std::string::npos);
  EXPECT_NE(evalError("1 2 -").find("negative result"), std::string::npos);
  EXPECT_NE(evalError("s0 1 -", {0}).find("negative result"),
            std::string::npos);
  EXPECT_NE(evalError("1 0 /").find("division by zero"), std::string::npos);
  EXPECT_NE(evalError("1 s0 cdiv", {0}).find("division by zero"),
            std::string::npos);
  EXPECT_NE(evalError("s0", {-1}).find("negative"), std::string::npos);
  // The message quotes the expression and names the token.
  EXPECT_EQ(evalError("1 0 /"),
            "expression '1 0 /': token 2 (column 4): 1 / 0: division by zero");
}

TEST(ExprTest, SyntaxErrors) {
  EXPECT_NE(validateError("", 0).find("empty"), std::string::npos);
  EXPECT_NE(validateError(" 1", 0).find("empty token"), std::string::npos);
  EXPECT_NE(validateError("1  2 +", 0).find("empty token"), std::string::npos);
  EXPECT_NE(validateError("1 2 + ", 0).find("trailing space"),
            std::string::npos);
  EXPECT_NE(validateError("-5", 0).find("unknown token"), std::string::npos);
  EXPECT_NE(validateError("+5", 0).find("unknown token"), std::string::npos);
  EXPECT_NE(validateError("1 2 %", 0).find("unknown token '%'"),
            std::string::npos);
  EXPECT_NE(validateError("1 2 MIN", 0).find("unknown token"),
            std::string::npos);
  EXPECT_NE(validateError("1.5", 0).find("not a decimal integer"),
            std::string::npos);
  EXPECT_NE(validateError("12x", 0).find("not a decimal integer"),
            std::string::npos);
  EXPECT_NE(validateError("9223372036854775808", 0).find("not a decimal"),
            std::string::npos);
  EXPECT_NE(validateError("99999999999999999999999", 0).find("not a decimal"),
            std::string::npos);
  EXPECT_NE(validateError("s", 1).find("unknown token"), std::string::npos);
  EXPECT_NE(validateError("sx", 1).find("unknown token"), std::string::npos);
  EXPECT_NE(validateError("s-1", 1).find("unknown token"), std::string::npos);
  EXPECT_EQ(validateError("s3", 3),
            "expression 's3': token 0 (column 0): symbol s3 out of range (3 "
            "symbols)");
  EXPECT_NE(validateError("s99999999999999999999", 3).find("out of range"),
            std::string::npos);
  EXPECT_NE(validateError("+", 0).find("needs two operands"),
            std::string::npos);
  EXPECT_NE(validateError("1 +", 0).find("needs two operands, the stack has 1"),
            std::string::npos);
  EXPECT_NE(validateError("1 2", 0).find("leaves 2 values"), std::string::npos);
  EXPECT_NE(validateError("1\t2 +", 0).find("\\x09"), std::string::npos);
}

TEST(ExprTest, ValidateDoesNotEvaluate) {
  // Syntax only: values are unknown until the symbols are bound.
  EXPECT_TRUE(validateExpr("1 0 /", 0).isOk());
  EXPECT_TRUE(validateExpr("0 1 -", 0).isOk());
  EXPECT_TRUE(validateExpr("s0 s1 * 9223372036854775807 +", 2).isOk());
  EXPECT_FALSE(validateExpr("s0", 0).isOk());
}

TEST(ExprTest, EvalChecksSymbolCount) {
  int64_t v;
  EXPECT_FALSE(evalExpr("s1", {4}, v).isOk());
  EXPECT_FALSE(evalExpr("1 +", {}, v).isOk());
}

} // namespace

// Typed errors: kinds, messages, and the check macros.
#include "util/errors.h"

#include <gtest/gtest.h>

#include <set>

namespace kiln {
namespace {

TEST(Errors, KindAndMessage) {
  try {
    KILN_THROW(ShapeMismatch, "input ", 0, " has shape [2, 3], expected [2, 4]");
    FAIL() << "did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kShapeMismatch);
    EXPECT_EQ(e.message(), "input 0 has shape [2, 3], expected [2, 4]");
    EXPECT_STREQ(e.what(), "shape mismatch: input 0 has shape [2, 3], expected [2, 4]");
  }
}

TEST(Errors, CheckThrowsOnlyWhenFalse) {
  EXPECT_NO_THROW(KILN_CHECK(1 + 1 == 2, InternalError, "arithmetic"));
  EXPECT_THROW(KILN_CHECK(false, CorruptInput, "plan: bad magic"), CorruptInput);
  EXPECT_THROW(KILN_CHECK(false, Unsupported, "op"), Error);
}

TEST(Errors, EveryKindHasADistinctName) {
  const ErrorKind kinds[] = {ErrorKind::kInvalidArgument, ErrorKind::kUnsupported,
                             ErrorKind::kCorruptInput,    ErrorKind::kShapeMismatch,
                             ErrorKind::kDevice,          ErrorKind::kInternal};
  std::set<std::string> names;
  for (auto k : kinds) names.insert(error_kind_name(k));
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(DeviceError("x").kind(), ErrorKind::kDevice);
  EXPECT_EQ(InvalidArgument("x").kind(), ErrorKind::kInvalidArgument);
}

}  // namespace
}  // namespace kiln

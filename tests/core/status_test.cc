// Status table, last-error messages and the propagation macros.
#include "core/status.h"

#include <gtest/gtest.h>

#include <string>

static tl_status fails_with_value(int v) {
  return TL_ERRF(TL_ERR_CONFIG, "mesh.tp=%d does not divide model.heads=%d", v, 12);
}

static tl_status propagates(int v) {
  TL_CHECK(fails_with_value(v));
  return TL_OK;
}

TEST(Status, NamesAndMessagesComeFromOneTable) {
  EXPECT_STREQ(tl_status_name(TL_OK), "TL_OK");
  EXPECT_STREQ(tl_status_name(TL_ERR_CONFIG), "TL_ERR_CONFIG");
  EXPECT_STREQ(tl_status_message(TL_ERR_NOMEM), "out of memory");
  EXPECT_STREQ(tl_status_name((tl_status)999), "TL_UNKNOWN_STATUS");
  for (int s = 0; s < TL_STATUS_COUNT; s++)
    EXPECT_NE(std::string(tl_status_message((tl_status)s)), "");
}

TEST(Status, ErrfRecordsWhereAndWhatAndCheckPropagatesIt) {
  tl_clear_error();
  EXPECT_EQ(propagates(5), TL_ERR_CONFIG);
  std::string msg = tl_last_error();
  EXPECT_NE(msg.find("status_test.cc:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mesh.tp=5 does not divide model.heads=12"), std::string::npos) << msg;
  tl_clear_error();
  EXPECT_STREQ(tl_last_error(), "");
}

TEST(Status, LongMessagesAreTruncatedNotOverflowed) {
  std::string big(20000, 'x');
  TL_ERRF(TL_ERR_INVALID, "%s", big.c_str());
  EXPECT_LT(std::string(tl_last_error()).size(), 8192u);
}

// Status table, last-error messages, the propagation macros, and the words
// for a CUDA device that is not there (core/device.h).
#include "core/status.h"

#include <gtest/gtest.h>

#include <string>

#include "core/device.h"

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
  // what a person is shown: the message without where
  EXPECT_STREQ(tl_last_error_message(), "mesh.tp=5 does not divide model.heads=12");
  tl_clear_error();
  EXPECT_STREQ(tl_last_error(), "");
  EXPECT_STREQ(tl_last_error_message(), "");
}

// A message recorded again elsewhere (a collective's failure re-raised by
// the wait, a rank's message on the others) reads without either place;
// text that only looks like one past the start is kept.
TEST(Status, TheMessageAPersonSeesHasNoLocation) {
  EXPECT_EQ(propagates(5), TL_ERR_CONFIG);
  std::string inner = tl_last_error();
  TL_ERRF(TL_ERR_CONFIG, "%s", inner.c_str());
  EXPECT_NE(std::string(tl_last_error()).find(inner), std::string::npos);
  EXPECT_STREQ(tl_last_error_message(), "mesh.tp=5 does not divide model.heads=12");
  TL_ERRF(TL_ERR_IO, "cannot read 'a.c:12: b': No such file");
  EXPECT_STREQ(tl_last_error_message(), "cannot read 'a.c:12: b': No such file");
  tl_clear_error();
  TL_ERRF(TL_ERR_IO, "%s", "model.n_layers: 3: not a prefix");
  EXPECT_STREQ(tl_last_error_message(), "model.n_layers: 3: not a prefix");
  tl_clear_error();
}

TEST(Status, LongMessagesAreTruncatedNotOverflowed) {
  std::string big(20000, 'x');
  TL_ERRF(TL_ERR_INVALID, "%s", big.c_str());
  EXPECT_LT(std::string(tl_last_error()).size(), 8192u);
}

// Why CUDA found no device: the user is told what to fix, an old driver by
// its version against the runtime's.
TEST(CudaAbsent, SaysWhetherTheGpuTheDriverOrItsVersionIsMissing) {
  char buf[256];
  EXPECT_STREQ(tl_cuda_absent_why(0, 0, 13000, buf, sizeof buf),
               "no NVIDIA GPU or driver found on this machine");
  std::string old = tl_cuda_absent_why(0, 12040, 13000, buf, sizeof buf);
  EXPECT_NE(old.find("the NVIDIA driver supports CUDA 12.4, older than the CUDA 13.0 runtime"),
            std::string::npos)
      << old;
  EXPECT_NE(old.find("install a newer driver"), std::string::npos) << old;
  std::string none = tl_cuda_absent_why(1, 13000, 13000, buf, sizeof buf);
  EXPECT_NE(none.find("no NVIDIA GPU found"), std::string::npos) << none;
  std::string odd = tl_cuda_absent_why(0, 13010, 13000, buf, sizeof buf);
  EXPECT_NE(odd.find("refused the CUDA 13.0 runtime"), std::string::npos) << odd;
  EXPECT_NE(odd.find("CUDA 13.1"), std::string::npos) << odd;
}

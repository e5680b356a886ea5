// The libraries trellis loads rather than links: from the given folder,
// else the loader's path; a failure names the library, the folder and why.
#include "core/dynlib.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

TEST(Dynlib, OpensFromTheFolderElseTheLoadersPath) {
  char err[512] = "";
  // libm from the loader's path, whatever folder is named first
  void* h = tl_dynlib_open("libm.so.6", "/no/such/folder", err, sizeof err);
  ASSERT_NE(h, nullptr) << err;
  EXPECT_NE(dlsym(h, "cos"), nullptr);
  dlclose(h);
  h = tl_dynlib_open("libm.so.6", "", err, sizeof err);
  ASSERT_NE(h, nullptr) << err;
  dlclose(h);
}

TEST(Dynlib, AMissingLibrarySaysWhichWhereAndWhy) {
  char err[512] = "";
  EXPECT_EQ(tl_dynlib_open("libtrellis_absent.so.7", "/opt/toolkit/lib64", err, sizeof err),
            nullptr);
  std::string msg = err;
  EXPECT_NE(msg.find("cannot load libtrellis_absent.so.7 (from /opt/toolkit/lib64 or the "
                     "loader's path): "),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("libtrellis_absent.so.7: cannot open shared object file"), std::string::npos)
      << msg;
  EXPECT_EQ(tl_dynlib_open("libtrellis_absent.so.7", "", err, sizeof err), nullptr);
  EXPECT_NE(std::string(err).find("libtrellis_absent.so.7 (from the loader's path): "),
            std::string::npos)
      << err;
}

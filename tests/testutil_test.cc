// The test helpers' own promises: a test's temp files are gone when its process ends, failed or not.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/testutil.h"

namespace steady {
namespace {

// Run only as the child of the test below (--gtest_also_run_disabled_tests): makes a directory
// with a file in it, then fails.
TEST(TempDirTest, DISABLED_ChildFailsOnPurpose) {
  const std::string dir = testing::MakeTempDir("child");
  std::ofstream(dir + "/file") << "left behind?";
  ASSERT_TRUE(std::filesystem::exists(dir + "/file"));
  FAIL() << "failing on purpose";
}

TEST(TempDirTest, AFailedTestLeavesNothingBehind) {
  const std::string base = testing::MakeTempDir("base");
  const std::string out = base + "/../child.log";
  const std::string command = "TEST_TMPDIR='" + base + "' /proc/" + std::to_string(::getpid()) +
                              "/exe --gtest_also_run_disabled_tests "
                              "--gtest_filter=TempDirTest.DISABLED_ChildFailsOnPurpose > '" + out + "' 2>&1";
  const int rc = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(rc));
  EXPECT_NE(WEXITSTATUS(rc), 0) << "the child test should have failed";
  std::ifstream log(out);
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("failing on purpose"), std::string::npos) << text;
  EXPECT_TRUE(std::filesystem::is_empty(base)) << "the child left files in " << base;
}

}  // namespace
}  // namespace steady

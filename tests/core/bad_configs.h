// bad_configs.h — the table of broken configs that both the library test
// (tests/core/config_test.cc) and the CLI test (tests/launcher/check_cli_test.cc)
// run: each JSON text with the message it must produce.
#ifndef TL_TESTS_CORE_BAD_CONFIGS_H
#define TL_TESTS_CORE_BAD_CONFIGS_H

#include <vector>

struct BadConfig {
  const char* name;  // a GoogleTest-safe name
  const char* json;
  // Must appear in the error. "{file}" stands for the config's path.
  const char* expect;
};

const std::vector<BadConfig>& BadConfigs();

#endif

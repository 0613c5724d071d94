// Entry point of the `stallscope` command (see cli.h).
#include <string>
#include <vector>

#include "analyzer/cli.h"

int main(int argc, char** argv) {
  return stallscope::analyzer::RunCli(std::vector<std::string>(argv + 1, argv + argc));
}

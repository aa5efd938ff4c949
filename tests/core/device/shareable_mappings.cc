#include "tests/core/device/shareable_mappings.h"

#include <fstream>
#include <string>

namespace braid::testing {

int ShareableMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) count += line.find("braid-simulated-shareable") != std::string::npos;
  return count;
}

}  // namespace braid::testing

// Linked (alwayslink) only into test binaries that run braid over the software model of the
// verbs calls: installs the model before main, so every verbs transport the binary creates, in
// this process or a forked rank, uses it. Nothing in the product links this.
#include "tests/transport/ibverbs/verbs_model.h"

namespace {

const bool kModelInstalled = [] {
  braid::testing::verbs_model::InstallVerbsModel();
  return true;
}();

}  // namespace

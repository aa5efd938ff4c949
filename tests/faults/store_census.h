// "No key lost from the store": what the rendezvous store of a unique id holds before a fault,
// checked again after it.
//
// braidGetUniqueId starts the store in the calling process (the test's own process, which no
// fault touches), so a fault test can reach it from any rank, before and after the fault, with a
// plain store client.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bindings/c/braid.h"
#include "core/base/status.h"
#include "rendezvous/store.h"

namespace braid::testing {

// A client of the store behind `id` (its own connection, no key prefix).
Result<std::shared_ptr<rendezvous::Store>> ConnectToStore(const braidUniqueId& id,
                                                          int64_t timeout_ms = 10000);

// The value StoreCensus::Take writes to the marker key of `who`.
std::string MarkerKey(const std::string& who);
std::string MarkerValue(const std::string& who);

// "" if the marker that `who` set through StoreCensus::Take is in the store of `id` with its value.
std::string CheckMarker(const braidUniqueId& id, const std::string& who);

class StoreCensus {
 public:
  // Writes the marker key of `who`, then records every key in the store of `id` and their count.
  // Returns "" or what went wrong.
  std::string Take(const braidUniqueId& id, const std::string& who);
  // "" if every recorded key is still in the store, the marker holds its value and the key count
  // did not shrink; otherwise names what is missing.
  std::string CheckNoneLost() const;
  size_t size() const { return keys_.size(); }

 private:
  braidUniqueId id_{};
  std::string who_;
  std::vector<std::string> keys_;  // sorted, as ListKeys returns them
  int64_t count_ = -1;
};

}  // namespace braid::testing

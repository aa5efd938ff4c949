// PrefixStore: a view of another Store in which every key becomes `prefix + "/" + key`.
//
// Why: subgroups and successive communicators share one store server; each works under its own
// prefix so that their keys (and barriers) cannot collide. Views nest (a PrefixStore over a
// PrefixStore gives "outer/inner/key").
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "rendezvous/store.h"

namespace braid::rendezvous {

class PrefixStore : public Store {
 public:
  // `base` must not be null. Thread-safe as far as `base` is.
  PrefixStore(std::shared_ptr<Store> base, std::string prefix);

  const std::string& prefix() const { return prefix_; }
  const std::shared_ptr<Store>& base() const { return base_; }

  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  Result<std::string> Get(const std::string& key, Deadline deadline) override;
  Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Result<bool> Check(const std::vector<std::string>& keys, Deadline deadline) override;
  Result<bool> DeleteKey(const std::string& key, Deadline deadline) override;
  // Counts only the keys under this prefix (c10d's PrefixStore counts the whole store; braid
  // isolates views). Costs a ListKeys of the base store.
  Result<int64_t> NumKeys(Deadline deadline) override;
  Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                            Deadline deadline) override;
  Status MultiSet(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                  Deadline deadline) override;
  Status Append(const std::string& key, const std::string& value, Deadline deadline) override;
  // Only keys under this prefix, with the prefix removed.
  Result<std::vector<std::string>> ListKeys(Deadline deadline) override;
  Status Barrier(const std::string& key, int n, Deadline deadline) override;

 private:
  std::string Full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> Full(const std::vector<std::string>& keys) const;

  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace braid::rendezvous

#include "rendezvous/prefix_store.h"

#include <utility>

namespace braid::rendezvous {

PrefixStore::PrefixStore(std::shared_ptr<Store> base, std::string prefix)
    : base_(std::move(base)), prefix_(std::move(prefix)) {}

std::vector<std::string> PrefixStore::Full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(Full(key));
  return out;
}

Status PrefixStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  return base_->Set(Full(key), value, deadline);
}

Result<std::string> PrefixStore::Get(const std::string& key, Deadline deadline) {
  return base_->Get(Full(key), deadline);
}

Result<int64_t> PrefixStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  return base_->Add(Full(key), delta, deadline);
}

Result<std::string> PrefixStore::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, Deadline deadline) {
  return base_->CompareSet(Full(key), expected, desired, deadline);
}

Status PrefixStore::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  return base_->Wait(Full(keys), deadline);
}

Result<bool> PrefixStore::Check(const std::vector<std::string>& keys, Deadline deadline) {
  return base_->Check(Full(keys), deadline);
}

Result<bool> PrefixStore::DeleteKey(const std::string& key, Deadline deadline) {
  return base_->DeleteKey(Full(key), deadline);
}

Result<int64_t> PrefixStore::NumKeys(Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> keys, ListKeys(deadline));
  return static_cast<int64_t>(keys.size());
}

Result<std::vector<std::string>> PrefixStore::MultiGet(const std::vector<std::string>& keys,
                                                       Deadline deadline) {
  return base_->MultiGet(Full(keys), deadline);
}

Status PrefixStore::MultiSet(const std::vector<std::string>& keys,
                             const std::vector<std::string>& values, Deadline deadline) {
  return base_->MultiSet(Full(keys), values, deadline);
}

Status PrefixStore::Append(const std::string& key, const std::string& value, Deadline deadline) {
  return base_->Append(Full(key), value, deadline);
}

Result<std::vector<std::string>> PrefixStore::ListKeys(Deadline deadline) {
  BRAID_ASSIGN_OR_RETURN(std::vector<std::string> all, base_->ListKeys(deadline));
  const std::string head = prefix_ + "/";
  std::vector<std::string> mine;
  for (const std::string& key : all) {
    if (key.compare(0, head.size(), head) == 0) mine.push_back(key.substr(head.size()));
  }
  return mine;
}

Status PrefixStore::Barrier(const std::string& key, int n, Deadline deadline) {
  return base_->Barrier(Full(key), n, deadline);
}

}  // namespace braid::rendezvous

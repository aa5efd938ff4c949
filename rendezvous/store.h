// Store: the key-value interface rendezvous runs on, with the operations of c10d's Store.
//
// Implementations: TcpStoreClient (talks to a TcpStoreServer), PrefixStore (a view that prepends
// "prefix/" to every key), and later an adapter over c10d's own store. Values are byte strings
// (std::string holds arbitrary bytes).
//
// Contract shared by every method:
// - Thread-safe: one Store may be used from several threads at once.
// - Blocking: every call blocks at most until `deadline`; on expiry it returns Code::kTimeout with
//   a message that names the keys it was waiting for.
// - Errors are values: a lost server connection is Code::kSystemError naming the server address.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/deadline.h"
#include "core/base/status.h"

namespace braid::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  virtual Status Set(const std::string& key, const std::string& value, Deadline deadline) = 0;
  // Waits until `key` exists, then returns its value.
  virtual Result<std::string> Get(const std::string& key, Deadline deadline) = 0;
  // Atomically adds `delta` to the int64 stored (as decimal text) at `key`, creating it at 0;
  // returns the new value.
  virtual Result<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) = 0;
  // c10d semantics: if `key` is absent and `expected` is empty, or `key` holds `expected`, store
  // `desired`. Returns the value held afterwards (so the caller learns whether it won).
  virtual Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                         const std::string& desired, Deadline deadline) = 0;
  // Waits until every key exists.
  virtual Status Wait(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // True if every key exists now; never waits for keys.
  virtual Result<bool> Check(const std::vector<std::string>& keys, Deadline deadline) = 0;
  // True if the key existed.
  virtual Result<bool> DeleteKey(const std::string& key, Deadline deadline) = 0;
  virtual Result<int64_t> NumKeys(Deadline deadline) = 0;
  // Waits until every key exists; values in the order of `keys`.
  virtual Result<std::vector<std::string>> MultiGet(const std::vector<std::string>& keys,
                                                    Deadline deadline) = 0;
  virtual Status MultiSet(const std::vector<std::string>& keys,
                          const std::vector<std::string>& values, Deadline deadline) = 0;
  // Appends to the value at `key`, creating it if absent.
  virtual Status Append(const std::string& key, const std::string& value, Deadline deadline) = 0;
  virtual Result<std::vector<std::string>> ListKeys(Deadline deadline) = 0;
  // Returns once `n` callers have called Barrier with the same key. On timeout the message says
  // how many of the n arrived.
  virtual Status Barrier(const std::string& key, int n, Deadline deadline) = 0;
};

}  // namespace braid::rendezvous

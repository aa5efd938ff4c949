#include "tests/faults/store_census.h"

#include <algorithm>
#include <iterator>

#include "core/base/deadline.h"
#include "rendezvous/tcp_store_client.h"
#include "rendezvous/unique_id.h"

namespace braid::testing {

Result<std::shared_ptr<rendezvous::Store>> ConnectToStore(const braidUniqueId& id,
                                                          int64_t timeout_ms) {
  auto fields = rendezvous::DecodeUniqueId(id.internal);
  if (!fields.ok()) return fields.status();
  auto client = rendezvous::TcpStoreClient::Connect(fields.value().host, fields.value().port,
                                                    fields.value().token,
                                                    Deadline::AfterMs(timeout_ms));
  if (!client.ok()) return client.status();
  return std::shared_ptr<rendezvous::Store>(std::move(client).value());
}

std::string MarkerKey(const std::string& who) { return "faults/marker/" + who; }
std::string MarkerValue(const std::string& who) { return "set by " + who + " before the fault"; }

std::string CheckMarker(const braidUniqueId& id, const std::string& who) {
  auto store = ConnectToStore(id);
  if (!store.ok()) return "store census: reconnecting: " + store.status().message();
  auto present = store.value()->Check({MarkerKey(who)}, Deadline::AfterMs(10000));
  if (!present.ok()) return "store census: " + present.status().message();
  if (!present.value()) return "store census: marker key '" + MarkerKey(who) + "' was lost";
  auto value = store.value()->Get(MarkerKey(who), Deadline::AfterMs(10000));
  if (!value.ok()) return "store census: " + value.status().message();
  if (value.value() != MarkerValue(who)) {
    return "store census: marker key '" + MarkerKey(who) + "' now holds '" + value.value() + "'";
  }
  return "";
}

std::string StoreCensus::Take(const braidUniqueId& id, const std::string& who) {
  id_ = id;
  who_ = who;
  auto store = ConnectToStore(id);
  if (!store.ok()) return "store census: connecting: " + store.status().message();
  const Deadline deadline = Deadline::AfterMs(10000);
  Status set = store.value()->Set(MarkerKey(who), MarkerValue(who), deadline);
  if (!set.ok()) return "store census: " + set.message();
  auto keys = store.value()->ListKeys(deadline);
  if (!keys.ok()) return "store census: " + keys.status().message();
  auto count = store.value()->NumKeys(deadline);
  if (!count.ok()) return "store census: " + count.status().message();
  keys_ = std::move(keys).value();
  count_ = count.value();
  if (std::find(keys_.begin(), keys_.end(), MarkerKey(who)) == keys_.end()) {
    return "store census: ListKeys does not list the marker key just set";
  }
  return "";
}

std::string StoreCensus::CheckNoneLost() const {
  if (count_ < 0) return "store census: never taken";
  auto store = ConnectToStore(id_);
  if (!store.ok()) return "store census: reconnecting: " + store.status().message();
  const Deadline deadline = Deadline::AfterMs(10000);
  auto keys = store.value()->ListKeys(deadline);
  if (!keys.ok()) return "store census: " + keys.status().message();
  auto count = store.value()->NumKeys(deadline);
  if (!count.ok()) return "store census: " + count.status().message();
  std::vector<std::string> lost;
  std::set_difference(keys_.begin(), keys_.end(), keys.value().begin(), keys.value().end(),
                      std::back_inserter(lost));
  if (!lost.empty()) {
    std::string names;
    for (const auto& key : lost) names += (names.empty() ? "'" : ", '") + key + "'";
    return "store census: " + std::to_string(lost.size()) + " of " + std::to_string(keys_.size()) +
           " keys were lost: " + names;
  }
  if (count.value() < count_) {
    return "store census: NumKeys fell from " + std::to_string(count_) + " to " +
           std::to_string(count.value());
  }
  return CheckMarker(id_, who_);
}

}  // namespace braid::testing

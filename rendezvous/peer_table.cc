#include "rendezvous/peer_table.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <utility>

namespace braid::rendezvous {
namespace {

std::string PeerKey(int rank) { return "peer/" + std::to_string(rank); }
// How many ranks have published their record.
constexpr char kJoinedKey[] = "peers_joined";
// The peer table, written once by the last rank to join.
constexpr char kTableKey[] = "peer_table";
constexpr char kTableMagic[] = "braid-peer-table 1";

std::string ListRanks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    if (i == 32) return out + "... (" + std::to_string(ranks.size()) + " in all)";
    out += std::to_string(ranks[i]);
  }
  return out;
}

// Why the table never came, for a rank that timed out waiting for it: the ranks whose record is
// missing, from one key listing (not one request per rank: at 1024 ranks every waiting rank
// asks).
std::string Absentees(Store& store, int size) {
  Result<std::vector<std::string>> keys = store.ListKeys(Deadline::AfterMs(5000));
  if (!keys.ok()) {
    return "timed out waiting for the other ranks to join the communicator (listing who joined "
           "failed: " +
           keys.status().message() + ")";
  }
  std::vector<bool> present(static_cast<size_t>(size), false);
  for (const std::string& key : keys.value()) {
    if (key.compare(0, 5, "peer/") != 0 || key.size() == 5 || key.size() > 15) continue;
    char* end = nullptr;
    const long r = std::strtol(key.c_str() + 5, &end, 10);
    if (*end == '\0' && r >= 0 && r < size) present[static_cast<size_t>(r)] = true;
  }
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (!present[static_cast<size_t>(r)]) missing.push_back(r);
  }
  if (missing.empty()) {
    return "timed out waiting for the peer table: all " + std::to_string(size) +
           " ranks published their records, but the last to join did not publish the table "
           "(it failed or left while building it)";
  }
  return "timed out waiting for " + std::to_string(missing.size()) + " of " + std::to_string(size) +
         " ranks to join the communicator; missing ranks: " + ListRanks(missing);
}

// A bounded decimal number at `*at`, followed by `end_char`; advances past it.
bool ReadNumber(const std::string& text, size_t* at, char end_char, long max, long* out) {
  const size_t start = *at;
  long value = 0;
  while (*at < text.size() && text[*at] >= '0' && text[*at] <= '9' && *at - start < 10) {
    value = value * 10 + (text[*at] - '0');
    ++*at;
  }
  if (*at == start || *at >= text.size() || text[*at] != end_char || value > max) return false;
  ++*at;
  *out = value;
  return true;
}

}  // namespace

PeerRecord IdentityOf(const PeerRecord& record) {
  PeerRecord identity = record;
  for (auto& named : identity.addresses) named.second.clear();
  return identity;
}

// "braid-peer-table 1\n" <k>"\n", k times <bytes>"\n"<serialized identity>, then one identity
// index per rank, each followed by " " (the last by "\n").
std::string EncodePeerTable(const std::vector<PeerRecord>& identities) {
  std::map<std::string, size_t> index_of;
  std::vector<const std::string*> distinct;
  std::string indices;
  for (const PeerRecord& record : identities) {
    auto [it, added] = index_of.emplace(record.Serialize(), distinct.size());
    if (added) distinct.push_back(&it->first);
    indices += std::to_string(it->second);
    indices += ' ';
  }
  if (!indices.empty()) indices.back() = '\n';
  std::string out = std::string(kTableMagic) + "\n" + std::to_string(distinct.size()) + "\n";
  for (const std::string* text : distinct) out += std::to_string(text->size()) + "\n" + *text;
  return out + indices;
}

PeerTable PeerTable::FromRecords(const std::vector<PeerRecord>& records) {
  PeerTable table;
  std::map<std::string, uint32_t> index_of;
  table.index_.reserve(records.size());
  for (const PeerRecord& record : records) {
    auto [it, added] =
        index_of.emplace(record.Serialize(), static_cast<uint32_t>(table.identities_.size()));
    if (added) table.identities_.push_back(record);
    table.index_.push_back(it->second);
  }
  return table;
}

PeerTable PeerTable::Subset(const std::vector<int>& ranks) const {
  PeerTable table;
  table.identities_ = identities_;
  table.index_.reserve(ranks.size());
  for (int rank : ranks) table.index_.push_back(index_[static_cast<size_t>(rank)]);
  return table;
}

HostLoad BusiestHost(const PeerTable& table) {
  std::vector<int> ranks(static_cast<size_t>(table.distinct()), 0);
  for (int r = 0; r < table.size(); ++r) ++ranks[static_cast<size_t>(table.identity_of(r))];
  std::map<std::string, std::pair<int, int>> per_host;  // host + boot id -> (ranks, cpus)
  for (int i = 0; i < table.distinct(); ++i) {
    const PeerRecord& identity = table.identity(i);
    auto& [count, cpus] = per_host[identity.host + "/" + identity.boot_id];
    count += ranks[static_cast<size_t>(i)];
    cpus = std::max(cpus, std::max(identity.cpus, 1));
  }
  HostLoad load;
  for (const auto& [host, counts] : per_host) {
    if (counts.first == 0) continue;  // an identity no rank of a subset has
    load.oversubscribed |= counts.first > counts.second;
    load.ranks_per_cpu =
        std::max(load.ranks_per_cpu, static_cast<double>(counts.first) / counts.second);
  }
  return load;
}

std::vector<PeerRecord> PeerTable::Expand() const {
  std::vector<PeerRecord> records;
  records.reserve(index_.size());
  for (uint32_t index : index_) records.push_back(identities_[index]);
  return records;
}

Result<PeerTable> DecodePeerTable(const std::string& text, int size) {
  auto bad = [](const std::string& why) {
    return Status::RemoteError("malformed peer table: " + why);
  };
  const std::string head = std::string(kTableMagic) + "\n";
  if (text.compare(0, head.size(), head) != 0) {
    return bad("it does not start with '" + std::string(kTableMagic) + "'");
  }
  size_t at = head.size();
  long count = 0;
  if (!ReadNumber(text, &at, '\n', std::max(size, 1), &count) || (count == 0) != (size == 0)) {
    return bad("bad identity count");
  }
  PeerTable table;
  for (long i = 0; i < count; ++i) {
    long bytes = 0;
    if (!ReadNumber(text, &at, '\n', 1 << 20, &bytes) ||
        text.size() - at < static_cast<size_t>(bytes)) {
      return bad("identity " + std::to_string(i) + " is cut short");
    }
    Result<PeerRecord> record = PeerRecord::Parse(text.substr(at, static_cast<size_t>(bytes)));
    if (!record.ok()) {
      return record.status().WithContext("peer table identity " + std::to_string(i));
    }
    table.identities_.push_back(std::move(record).value());
    at += static_cast<size_t>(bytes);
  }
  table.index_.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    long index = 0;
    if (!ReadNumber(text, &at, r + 1 == size ? '\n' : ' ', count - 1, &index)) {
      return bad("rank " + std::to_string(r) + "'s identity index is missing or out of range");
    }
    table.index_.push_back(static_cast<uint32_t>(index));
  }
  if (at != text.size()) return bad("trailing bytes after " + std::to_string(size) + " ranks");
  return table;
}

Result<PeerTable> ExchangePeerTable(Store& store, int rank, int size, const PeerRecord& self,
                                    Deadline deadline) {
  const std::string who = "rank " + std::to_string(rank);
  std::string agreed;
  BRAID_ASSIGN_OR_RETURN(agreed, store.CompareSet("nranks", "", std::to_string(size), deadline));
  if (agreed != std::to_string(size)) {
    return Status::InvalidUsage(
        who + " was given nranks=" + std::to_string(size) +
        " but another rank of this communicator registered nranks=" + agreed);
  }
  int64_t claims = 0;
  BRAID_ASSIGN_OR_RETURN(claims, store.Add("claim/" + std::to_string(rank), 1, deadline));
  if (claims > 1) {
    return Status::InvalidUsage(who +
                                " is claimed by more than one caller: two processes (or "
                                "threads) were given the same rank");
  }
  BRAID_RETURN_IF_ERROR(store.Set(PeerKey(rank), self.Serialize(), deadline));
  // Counted only after the record is in, so the rank that brings the count to `size` finds
  // every record there and nobody waits on n keys.
  int64_t joined = 0;
  BRAID_ASSIGN_OR_RETURN(joined, store.Add(kJoinedKey, 1, deadline));
  if (joined == size) {
    std::vector<std::string> keys;
    keys.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) keys.push_back(PeerKey(r));
    std::vector<std::string> values;
    BRAID_ASSIGN_OR_RETURN(values, store.MultiGet(keys, deadline));
    std::vector<PeerRecord> identities;
    identities.reserve(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      PeerRecord record;
      BRAID_ASSIGN_OR_RETURN(record, PeerRecord::Parse(values[static_cast<size_t>(r)]));
      identities.push_back(IdentityOf(record));
    }
    const std::string text = EncodePeerTable(identities);
    BRAID_RETURN_IF_ERROR(store.Set(kTableKey, text, deadline));
    // Decoded like everyone else's, so every rank holds the same table.
    return DecodePeerTable(text, size);
  }
  Result<std::string> text = store.Get(kTableKey, deadline);
  if (text.status().code() == Code::kTimeout) {
    return Status::Timeout(who + ": " + Absentees(store, size));
  }
  BRAID_RETURN_IF_ERROR(text.status());
  Result<PeerTable> table = DecodePeerTable(text.value(), size);
  if (!table.ok()) return table.status().WithContext(who + ": reading the peer table");
  return table;
}

Result<PeerRecord> FetchPeer(Store& store, int peer, Deadline deadline) {
  Result<std::string> text = store.Get(PeerKey(peer), deadline);
  if (!text.ok()) {
    return text.status().WithContext("reading rank " + std::to_string(peer) + "'s peer record");
  }
  Result<PeerRecord> record = PeerRecord::Parse(text.value());
  if (!record.ok()) {
    return record.status().WithContext("rank " + std::to_string(peer) + "'s peer record");
  }
  return record;
}

}  // namespace braid::rendezvous

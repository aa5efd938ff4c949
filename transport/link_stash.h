// The accepting side of a pair's link set-up, shared by transports whose lower rank dials: a
// listener thread stashes handshaken links by peer rank, and Connect(peer) on the higher rank
// claims its link, waiting for it with the deadline.
#pragma once

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "core/deadline.h"
#include "core/status.h"

namespace braid::transport {

// Waits (with `lock` held on the mutex guarding `stash`, `claimed` and `aborted`) until the link
// from `peer` is stashed or the transport is aborted, then moves it out and marks `peer` claimed.
// Errors: `aborted` once aborted; kTimeout "rank R: no <what> from rank P within T ms (<where>)".
template <typename Link>
Result<Link> ClaimStashedLink(std::unique_lock<std::mutex>& lock, std::condition_variable& stashed,
                              std::map<int, Link>& stash, std::set<int>& claimed,
                              const Status& aborted, int rank, int peer, Deadline deadline,
                              const std::string& what, const std::string& where) {
  const int64_t budget_ms = deadline.RemainingMs();
  auto ready = [&] { return !aborted.ok() || stash.count(peer) != 0; };
  if (deadline.when() == Deadline::Clock::time_point::max()) {
    stashed.wait(lock, ready);
  } else {
    stashed.wait_until(lock, deadline.when(), ready);
  }
  if (!aborted.ok()) return aborted;
  auto it = stash.find(peer);
  if (it == stash.end()) {
    return Status::Timeout("rank " + std::to_string(rank) + ": no " + what + " from rank " +
                           std::to_string(peer) + " within " + std::to_string(budget_ms) +
                           " ms (" + where + ")");
  }
  Result<Link> link(std::move(it->second));
  stash.erase(it);
  claimed.insert(peer);
  return link;
}

}  // namespace braid::transport

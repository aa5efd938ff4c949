// The accepting side of a pair's link set-up, shared by transports whose lower rank dials: a
// listener thread stashes handshaken links by peer rank, and Connect(peer) on the higher rank
// claims its link, waiting for it with the deadline.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "core/base/deadline.h"
#include "core/base/logging.h"
#include "core/base/status.h"

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

// "rank R: rank P is gone: <why>": the peer's process exited or was killed.
inline Status PeerGone(int rank, int peer, const std::string& why) {
  return Status::RemoteError("rank " + std::to_string(rank) + ": rank " + std::to_string(peer) +
                             " is gone: " + why);
}

// While the accepting side waits for the peer's dial, it probes the peer's listener this often.
constexpr int64_t kProbeEveryMs = 500;

// ClaimStashedLink for the accepting side of Connect, which also notices a peer that died before
// (or while) dialing: every kProbeEveryMs it asks `gone_probe` (empty: no probing), which returns
// "" while the peer's listener is there, else why it is gone; then fails with PeerGone within a
// second instead of at the deadline. Called with `lock` held; probes run without it.
template <typename Link>
Result<Link> AwaitStashedLink(std::unique_lock<std::mutex>& lock, std::condition_variable& stashed,
                              std::map<int, Link>& stash, std::set<int>& claimed,
                              const Status& aborted, int rank, int peer, Deadline deadline,
                              const std::string& what, const std::string& where,
                              const std::function<std::string()>& gone_probe) {
  const int64_t budget_ms = deadline.RemainingMs();
  for (;;) {
    Result<Link> link = ClaimStashedLink(lock, stashed, stash, claimed, aborted, rank, peer,
                                         gone_probe ? deadline.Min(kProbeEveryMs) : deadline,
                                         what, where);
    if (link.ok() || link.status().code() != Code::kTimeout) return link;
    if (deadline.Expired()) {
      return Status::Timeout("rank " + std::to_string(rank) + ": no " + what + " from rank " +
                             std::to_string(peer) + " within " + std::to_string(budget_ms) +
                             " ms (" + where + ")");
    }
    lock.unlock();
    const std::string gone = gone_probe();
    lock.lock();
    if (!gone.empty() && stash.count(peer) == 0 && aborted.ok()) {
      BRAID_LOG(kInfo, rank) << "rank " << peer << " is gone while this rank waited for its " << what
                             << ": " << gone;
      return PeerGone(rank, peer, gone);
    }
  }
}

}  // namespace braid::transport

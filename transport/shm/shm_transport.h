// ShmTransport: links the ranks of one communicator that share a host through shared memory.
//
// Why: on one host TCP costs two copies through the kernel and a syscall per message (3 us
// one-way at best); a shared ring costs one cache-line transfer for a small message (~0.2 us)
// and, with cross-memory attach, one copy for a large one.
//
// Selection: CanConnect() says yes for peers with the same hostname, boot id and network
// namespace (PeerInfo), so the registry picks shm before TCP for them; BRAID_TRANSPORTS=^shm
// turns it off.
//
// Connection set-up: each transport listens on an abstract Unix socket whose name (with comm id,
// rank, pid and a random part) is the address published through the store. Of each pair the
// lower rank dials the higher one, creates the segment (memfd) and passes it in the hello
// (wire.h). The higher rank's control thread checks the hello -- a stranger, another
// communicator or another build is refused with a logged reason and the listener keeps going --
// and the two prove to each other that they hold the communicator's secret (challenge-response,
// wire.h; the secret never travels, "" = no authentication on both sides). The higher rank then
// keeps the link by sender rank until its own Connect(peer) claims it. A connection that closes
// before sending anything is a peer's liveness probe and is dropped quietly.
//
// Control thread (one per transport): accepts and handshakes, watches every link's socket for
// end of file (the peer closed, exited or was SIGKILLed: the kernel closes its socket either way),
// and answers doorbells by pushing queued sends. It never touches a message on the fast path.
//
// Cleanup: segments are memfds and socket names are abstract, so nothing is ever created in
// /dev/shm or the file system; the kernel frees both with the last process holding them, however
// that process ends.
//
// Lifetime: destroying the transport fails every connection it made (kAborted locally; peers see
// the link drop) and joins the control thread. Connections may outlive it; they then fail every
// request.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/base/deadline.h"
#include "core/base/status.h"
#include "transport/connection.h"
#include "transport/shm/ring_size.h"
#include "transport/shm/wait.h"
#include "transport/transport.h"

namespace braid::transport::shm {

// Where large messages take one copy instead of two. Measured on the 2-core development VM
// (AMD EPYC, 1 MiB L2 per core, 32 MiB L3; other jobs running, best of two runs), 2 ranks
// exchanging both ways at once, GB/s per direction:
//                              64 KiB  256 KiB  1 MiB  4 MiB  16 MiB
//   ring, 2 processes            10.6    15.2    16.1    7.3    4.0   (two copies, pipelined)
//   process_vm_readv, 2 procs     7.5     9.4     8.4    3.7    2.8   (one copy)
//   memcpy, 2 thread ranks       24.9    26.1    28.2   24.6    5.2   (one copy)
// Raw process_vm_readv costs 1.5 us per call and tops out at 11 GB/s (4 GB/s beyond the caches)
// where memcpy does 40 (9): pinning the peer's pages is slow in this VM, while the ring stays in
// cache and both cores copy at once. So thread ranks copy once (memcpy) from 16 KiB, while
// between processes it depends on the host: bench/calibrate measures both there and writes the
// crossover (shm.single_copy_bytes), and the communicator hands it to cross_process_copy_bytes
// through its config (algorithms/single_copy_choice.h, ShmTransport::Create). Measured with a
// two-process stream program kept out of the tree; end to end, `braidrun -n 2 --
// all_reduce_perf -b 64K -e 16M -f 4 -d float` shows the effect on allreduce.
constexpr uint64_t kNeverCopyOnce = UINT64_MAX;

struct ShmOptions {
  // Bytes of each direction's ring (a power of two, 64 KiB .. 1 GiB); the dialer's choice holds
  // for the pair. kRingBytesByPlacement (the default): 1 MiB (two rings stay in L2/L3 and a
  // 512 KiB chunk streams in 4 pieces), or 4 MiB to other processes where ranks outnumber the
  // CPUs and this one is not pinned to a CPU (ring_size.h says why; INFO says which).
  uint64_t ring_bytes = kRingBytesByPlacement;
  // Messages from this size up between thread ranks of one process are copied once (memcpy from
  // the sender's buffer); smaller ones, and everything when off, go through the ring.
  uint64_t same_process_copy_bytes = uint64_t{16} << 10;
  // Likewise between processes, with process_vm_readv; off unless set (see above). A context
  // whose config.shm_single_copy_bytes is set (>= 0; 0 = never) replaces it in Create.
  uint64_t cross_process_copy_bytes = kNeverCopyOnce;
  // false: never read the peer's memory (as if process_vm_readv were refused), whatever the
  // thresholds; the ring carries everything.
  bool cross_memory = true;
  // How waits spin, yield and sleep (wait.h); unset: WaitBudget::For(communicator size).
  std::optional<WaitBudget> wait_budget;
  // A connected stranger that completes no handshake within this time is dropped.
  int64_t handshake_timeout_ms = 30 * 1000;
};

class ShmTransport : public Transport {
 public:
  // Starts listening and the control thread. Returns a null transport (registry: "not available
  // here") when the communicator has a single rank, or when memfd_create is unavailable (old
  // kernel, seccomp). Errors: InvalidArgument for a bad rank or ring size, socket errors.
  static Result<std::unique_ptr<ShmTransport>> Create(const TransportContext& context,
                                                      const ShmOptions& options = ShmOptions());
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  const char* name() const override { return "shm"; }
  // The abstract socket name (without the leading NUL), "braid-shm-<comm>-r<rank>-<pid>-<rnd>".
  std::string LocalAddress() const override;
  // Same host: equal, non-empty hostname and boot id.
  bool CanConnect(const PeerInfo& self, const PeerInfo& peer) const override;
  // Blocks until the link with `peer` is up. The lower rank dials `peer_address` (retrying while
  // nobody listens there, for up to a second) and completes the handshake; the higher rank waits
  // for the peer's hello, probing the peer's socket at `peer_address` every half second
  // meanwhile (none when it is not a shm address). Nobody listening at a published address means
  // the peer's process is gone. Errors: kTimeout naming the peer, kAborted after Abort,
  // kRemoteError "rank P is gone: ..." when the peer's process exited or was killed, kRemoteError
  // when the peer refuses the handshake or the two hold different secrets
  // (TransportContext::secret), kInvalidArgument for a bad address or rank, kSystemError when
  // the segment cannot be created. Call at most once per peer.
  Result<std::unique_ptr<Connection>> Connect(int peer, const std::string& peer_address,
                                              Deadline deadline) override;
  // Fails every pending and future request and Connect with kAborted carrying `reason`'s
  // message, and wakes every waiter (spinning, yielding or asleep on a futex) at once. Stops
  // listening (the control thread closes the socket), so a peer waiting for this rank to dial
  // finds nobody there and names it instead of waiting for its deadline. Safe from any thread;
  // idempotent (first reason wins).
  void Abort(const Status& reason) override;

  struct State;  // defined in shm_transport.cc

 private:
  explicit ShmTransport(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace braid::transport::shm

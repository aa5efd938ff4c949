// A software model of the verbs calls braid's verbs transport makes (transport/ibverbs/
// verbs_api.h), for tests on machines without an RDMA device. It is a model, not a device and not
// a driver: nothing here is ever used unless a test installs it with InstallVerbsModel().
//
// What it reproduces, because the transport's correctness depends on it:
// - one device "braid_verbs_model_0" with one active RoCE-like port; its GID (index 0 only; any
//   other index fails as on hardware) names this process and its model memory, so two processes
//   (or two threads of one) that exchange GIDs and QP numbers can connect reliable-connected QPs;
// - the QP state machine RESET -> INIT -> RTR -> RTS (a transition missing a required attribute
//   fails with EINVAL), and the error state: any error completion moves the QP to ERR, after
//   which every posted and later-posted work request completes with IBV_WC_WR_FLUSH_ERR;
// - RDMA write and RDMA write with immediate, executed in post order per QP: the data is copied
//   into the remote process's memory (process_vm_writev; memcpy inside one process), a write
//   with immediate consumes the remote QP's oldest posted receive and completes it with the
//   immediate and the byte count (IBV_WC_RECV_RDMA_WITH_IMM);
// - queue depths: a post beyond max_send_wr / max_recv_wr outstanding requests fails with
//   ENOMEM, as does creating a QP or CQ larger than the model's device limits;
// - receiver-not-ready: a write with immediate to a QP with no posted receive is retried every
//   min_rnr_timer period (counted in RnrNaks()) and fails with IBV_WC_RNR_RETRY_EXC_ERR after
//   rnr_retry retries (7 = forever);
// - memory regions: a local scatter entry outside a region of the QP's protection domain with
//   that lkey fails with IBV_WC_LOC_PROT_ERR; a remote range outside the region named by the
//   rkey, or a region without IBV_ACCESS_REMOTE_WRITE, fails with IBV_WC_REM_ACCESS_ERR and puts
//   both QPs in ERR; registering REMOTE_WRITE without LOCAL_WRITE fails with EINVAL;
// - a peer that disappears (its process exited, its QP destroyed or in error, a PSN that does not
//   match): the write is retried and fails with IBV_WC_RETRY_EXC_ERR after retry_cnt + 1 ACK
//   timeouts of 4.096 us * 2^timeout, as on a real fabric; a receiver hears nothing.
//
// What it does not model: sends, reads and atomics (only the two writes braid uses), completion
// channels, inline data, more than one port, LID routing (the port is RoCE), wire timing. Work
// moves when the owning process calls into the model (post, poll), not in the background.
//
// Where its state lives: each process keeps its model memory (memory-region and QP tables, the
// inbound completion queues) in a memfd segment that peers map through pidfd_getfd, so nothing is
// left in /dev/shm. A process forked after using the model starts a model of its own.
#pragma once

#include <cstdint>

#include "transport/ibverbs/verbs_api.h"

namespace braid::testing::verbs_model {

// The model's table; `source` is "software model of verbs (tests only)".
const transport::ibverbs::VerbsApi& ModelVerbsApi();

// Makes every verbs transport created from now on in this process (and its forked children) use
// the model (transport::ibverbs::UseVerbsApiForTesting).
void InstallVerbsModel();

// Receiver-not-ready retries this process's QPs have met (a transport with working flow control
// keeps this at 0).
uint64_t RnrNaks();

}  // namespace braid::testing::verbs_model

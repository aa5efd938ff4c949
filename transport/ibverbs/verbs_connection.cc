#include "transport/ibverbs/verbs_connection.h"

#include <arpa/inet.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <random>

#include "transport/link_stash.h"

namespace braid::transport::ibverbs {
namespace {

// wr_id of every work request: which queue it was posted on (error completions carry no opcode).
constexpr uint64_t kSendWr = 1;
constexpr uint64_t kRecvWr = 2;
// Completions taken from the CQ per poll call.
constexpr int kPollBatch = 32;
// While a wait makes no progress, the peer's bootstrap link is probed this often.
constexpr int64_t kPeerCheckEveryNs = 20'000'000;
// The backstop's period while a send is unfinished.
constexpr auto kBackstopPeriod = std::chrono::milliseconds(1);

std::string ErrnoText(int error) { return error == 0 ? "unknown error" : std::strerror(error); }

// What a verbs error status usually means here, so the message says where to look.
const char* Hint(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
      return " (no answer from the peer's adapter: its process or host is gone, or the fabric "
             "path is broken; BRAID_IB_TIMEOUT / BRAID_IB_RETRY_CNT bound the retries)";
    case IBV_WC_REM_ACCESS_ERR:
      return " (the peer refused the write: outside its registered ring or without remote "
             "write access)";
    case IBV_WC_LOC_PROT_ERR:
      return " (a local buffer outside its memory registration)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return " (the peer had no receive posted)";
    default:
      return "";
  }
}

uint32_t RandomPsn() {
  std::random_device random;
  return random() & 0xffffff;
}

}  // namespace

VerbsLink::VerbsLink(std::shared_ptr<VerbsDevice> device, std::shared_ptr<RegistrationCache> cache,
                     const IbConfig& config, int rank, int peer)
    : device_(std::move(device)),
      api_(device_->api()),
      cache_(std::move(cache)),
      config_(config),
      rank_(rank),
      peer_(peer) {}

std::string VerbsLink::Who() const {
  return "rank " + std::to_string(rank_) + ": verbs link to rank " + std::to_string(peer_);
}

Result<std::shared_ptr<VerbsLink>> VerbsLink::Create(std::shared_ptr<VerbsDevice> device,
                                                     std::shared_ptr<RegistrationCache> cache,
                                                     const IbConfig& config, int rank, int peer) {
  std::shared_ptr<VerbsLink> link(new VerbsLink(std::move(device), std::move(cache), config, rank,
                                                peer));
  const VerbsApi& api = link->api_;
  VerbsDevice& dev = *link->device_;
  auto failed = [&](const char* call) {
    return Status::SystemError(link->Who() + ": " + call + " on " + dev.Describe() + ": " +
                               ErrnoText(errno));
  };
  errno = 0;
  link->cq_ = api.create_cq(dev.context(), kSendDepth + kRecvDepth, nullptr, nullptr, 0);
  if (link->cq_ == nullptr) return failed("ibv_create_cq");
  ibv_qp_init_attr init{};
  init.send_cq = link->cq_;
  init.recv_cq = link->cq_;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = kSendDepth;
  init.cap.max_recv_wr = kRecvDepth;
  init.cap.max_send_sge = 2;  // slot header + payload
  init.cap.max_recv_sge = 1;
  link->qp_ = api.create_qp(dev.pd(), &init);
  if (link->qp_ == nullptr) return failed("ibv_create_qp");
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = dev.port();
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  int rc = api.modify_qp(link->qp_, &attr,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) {
    errno = rc;
    return failed("ibv_modify_qp to INIT");
  }
  const size_t ring_bytes = size_t{kSlots} * kSlotBytes;
  link->ring_.reset(new char[ring_bytes]);
  ibv_mr* ring = api.reg_mr(dev.pd(), link->ring_.get(), ring_bytes,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (ring == nullptr) return failed("ibv_reg_mr of the receive ring");
  link->ring_region_ = std::make_unique<Region>(api, ring);
  link->headers_.reset(new SlotHeader[kSlots]);
  ibv_mr* headers = api.reg_mr(dev.pd(), link->headers_.get(), sizeof(SlotHeader) * kSlots, 0);
  if (headers == nullptr) return failed("ibv_reg_mr of the slot headers");
  link->headers_region_ = std::make_unique<Region>(api, headers);

  SetupInfo& info = link->local_;
  info.lid = dev.port_attr().lid;
  std::memcpy(info.gid, dev.gid().raw, sizeof(info.gid));
  info.link_layer = dev.port_attr().link_layer;
  info.qpn = link->qp_->qp_num;
  info.psn = RandomPsn();
  info.mtu = dev.port_attr().active_mtu;
  info.slots = kSlots;
  info.slot_bytes = kSlotBytes;
  info.ring_addr = reinterpret_cast<uint64_t>(link->ring_.get());
  info.ring_rkey = ring->rkey;
  return link;
}

VerbsLink::~VerbsLink() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    FailLocked(Status::Aborted(Who() + " was closed"));
  }
  // The QP first, so the adapter stops touching the memory released after it.
  if (qp_ != nullptr) api_.destroy_qp(qp_);
  in_flight_.clear();
  sends_.clear();
  if (cq_ != nullptr) api_.destroy_cq(cq_);
  ring_region_.reset();
  headers_region_.reset();
}

Status VerbsLink::Connect(const SetupInfo& peer) {
  std::lock_guard<std::mutex> lock(mutex_);
  BRAID_RETURN_IF_ERROR(ConnectLocked(peer));
  stage_ = Stage::kUp;
  return Status::Ok();
}

void VerbsLink::Start(std::unique_ptr<Connection> bootstrap) {
  std::lock_guard<std::mutex> lock(mutex_);
  bootstrap_ = std::move(bootstrap);
  info_sent_ = bootstrap_->PostSend(&local_, sizeof(local_), kSetupTag);
  info_received_ = bootstrap_->PostRecv(&peer_info_, sizeof(peer_info_), kSetupTag);
  ready_received_ = bootstrap_->PostRecv(&ready_in_, 1, kReadyTag);
  stage_ = Stage::kExchanging;
}

bool VerbsLink::AdvanceSetupLocked() {
  bool moved = false;
  if (stage_ == Stage::kExchanging && info_received_->Test()) {
    moved = true;
    Status status = info_received_->status();
    if (status.ok()) status = ConnectLocked(peer_info_);
    if (!status.ok()) {
      FailLocked(status.WithContext(Who() + ": exchanging QP numbers"));
      return true;
    }
    // Our QP receives from here on: the peer may write once this arrives.
    ready_sent_ = bootstrap_->PostSend(&ready_out_, 1, kReadyTag);
    stage_ = Stage::kReadying;
  }
  if (stage_ == Stage::kReadying && ready_received_->Test()) {
    moved = true;
    if (!ready_received_->status().ok()) {
      FailLocked(ready_received_->status().WithContext(Who() + ": waiting for the peer's QP"));
      return true;
    }
    stage_ = Stage::kUp;
  }
  return moved;
}

Status VerbsLink::ConnectLocked(const SetupInfo& peer) {
  if (peer.magic != kSetupMagic || peer.version != kSetupVersion) {
    return Status::InvalidUsage(Who() + ": the peer's set-up record is of another build (magic " +
                                std::to_string(peer.magic) + ", version " +
                                std::to_string(peer.version) + "; this build speaks version " +
                                std::to_string(kSetupVersion) + ")");
  }
  if (peer.slots != kSlots || peer.slot_bytes != kSlotBytes) {
    return Status::InvalidUsage(Who() + ": ring geometry differs (peer " +
                                std::to_string(peer.slots) + " x " +
                                std::to_string(peer.slot_bytes) + " bytes, here " +
                                std::to_string(kSlots) + " x " + std::to_string(kSlotBytes) + ")");
  }
  remote_ = peer;
  for (uint32_t i = 0; i < kRecvDepth; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = kRecvWr;
    ibv_recv_wr* bad = nullptr;
    int rc = api_.post_recv(qp_, &wr, &bad);
    if (rc != 0) return Status::SystemError(Who() + ": ibv_post_recv: " + ErrnoText(rc));
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min(local_.mtu, peer.mtu));
  attr.dest_qp_num = peer.qpn;
  attr.rq_psn = peer.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  attr.ah_attr.port_num = device_->port();
  if (device_->is_ethernet()) {
    // RoCE: addressed by GID, through the GID table entry BRAID_IB_GID_INDEX names.
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, sizeof(peer.gid));
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(device_->gid_index());
    attr.ah_attr.grh.hop_limit = 255;
  } else {
    attr.ah_attr.dlid = peer.lid;
  }
  int rc = api_.modify_qp(qp_, &attr,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) return Status::SystemError(Who() + ": ibv_modify_qp to RTR: " + ErrnoText(rc));
  attr = ibv_qp_attr{};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(config_.timeout);
  attr.retry_cnt = static_cast<uint8_t>(config_.retry_cnt);
  attr.rnr_retry = 7;  // never needed: credits keep a receive posted for every write
  attr.sq_psn = local_.psn;
  attr.max_rd_atomic = 1;
  rc = api_.modify_qp(qp_, &attr,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) return Status::SystemError(Who() + ": ibv_modify_qp to RTS: " + ErrnoText(rc));
  return Status::Ok();
}

RequestPtr VerbsLink::NewRequestLocked(const std::shared_ptr<VerbsDriver>& driver) {
  auto request = std::make_shared<Request>(driver);
  if (!status_.ok()) request->Complete(status_);
  return request;
}

RequestPtr VerbsLink::PostSend(const void* data, size_t bytes, uint64_t tag,
                               const std::shared_ptr<VerbsDriver>& driver) {
  std::lock_guard<std::mutex> lock(mutex_);
  RequestPtr request = NewRequestLocked(driver);
  if (request->IsDone()) return request;
  OutSend send;
  send.data = static_cast<const char*>(data);
  send.bytes = bytes;
  send.tag = tag;
  send.request = request;
  if (bytes > 0) {
    Result<std::shared_ptr<Region>> region = cache_->Find(data, bytes);
    if (!region.ok()) {
      request->Complete(region.status().WithContext(Who()));
      return request;
    }
    send.region = std::move(region.value());
  }
  sends_.push_back(std::move(send));
  PostChunksLocked();
  if (!sends_.empty()) driver->Kick();
  return request;
}

RequestPtr VerbsLink::PostRecv(void* data, size_t bytes, uint64_t tag,
                               std::shared_ptr<LandingSink> sink,
                               const std::shared_ptr<VerbsDriver>& driver) {
  std::lock_guard<std::mutex> lock(mutex_);
  RequestPtr request = NewRequestLocked(driver);
  if (request->IsDone()) return request;
  InRecv recv;
  recv.data = static_cast<char*>(data);
  recv.bytes = bytes;
  recv.tag = tag;
  recv.sink = std::move(sink);
  recv.request = request;
  recvs_.push_back(std::move(recv));
  if (DeliverLocked()) ReturnCreditsLocked();
  return request;
}

Result<std::optional<Connection::Incoming>> VerbsLink::Probe() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (status_.ok() && stage_ != Stage::kUp) AdvanceSetupLocked();
  if (status_.ok() && stage_ == Stage::kUp) {
    PollLocked();
    DeliverLocked();  // with no receive posted, only drops the rest of a refused message
    ReturnCreditsLocked();
    PostChunksLocked();
  }
  if (!status_.ok()) return status_;
  if (!recvs_.empty()) {
    return Status::Internal(Who() + ": Probe while a receive is pending on the link");
  }
  if (stage_ != Stage::kUp) return std::optional<Connection::Incoming>();  // nothing yet
  if (landed_.empty()) {
    // A peer that left without sending more is a loss (Connection::Probe).
    if (PeerGoneLocked()) return status_;
    return std::optional<Connection::Incoming>();
  }
  SlotHeader header;
  std::memcpy(&header, SlotAt(landed_.front().slot), sizeof(header));
  return std::optional<Connection::Incoming>(Connection::Incoming{header.tag, header.bytes});
}

bool VerbsLink::Progress(bool check_peer) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !status_.ok()) return false;  // another thread is moving this link
  if (stage_ != Stage::kUp) {
    bool advanced = AdvanceSetupLocked();
    if (stage_ != Stage::kUp) return advanced;
  }
  bool moved = PollLocked();
  moved |= DeliverLocked();
  moved |= ReturnCreditsLocked();
  moved |= PostChunksLocked();
  const bool waiting = !sends_.empty() || !recvs_.empty();
  if (!moved && check_peer && waiting && landed_.empty()) {
    const int64_t now = NowNs();
    if (now - last_peer_check_ns_ >= kPeerCheckEveryNs) {
      last_peer_check_ns_ = now;
      moved = PeerGoneLocked();
    }
  }
  return moved;
}

bool VerbsLink::PeerGoneLocked() {
  if (bootstrap_ == nullptr || !status_.ok()) return false;
  Result<std::optional<Connection::Incoming>> boot = bootstrap_->Probe();
  if (boot.ok()) return false;
  const std::string& said = boot.status().message();
  if (said.find("closed the link and said why") != std::string::npos) {
    // Alive, and broke for the reason it gave (an aborting transport's goodbye).
    FailLocked(Status::RemoteError(Who() + ": " + said));
  } else {
    FailLocked(PeerGone(rank_, peer_, "its bootstrap link closed: " + said));
  }
  return true;
}

bool VerbsLink::PollLocked() {
  bool moved = false;
  ibv_wc wc[kPollBatch];
  while (status_.ok()) {
    int n = api_.poll_cq(cq_, kPollBatch, wc);
    if (n < 0) {
      FailLocked(Status::SystemError(Who() + ": ibv_poll_cq failed (completion queue overrun?)"));
      return true;
    }
    if (n == 0) break;
    moved = true;
    for (int i = 0; i < n && status_.ok(); ++i) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        const bool send = wc[i].wr_id == kSendWr;
        FailLocked(Status::RemoteError(
            Who() + ": " + (send ? "an RDMA write to rank " : "a receive from rank ") +
            std::to_string(peer_) + " failed with verbs status " +
            std::to_string(static_cast<int>(wc[i].status)) + " (" +
            api_.wc_status_str(wc[i].status) + ")" + Hint(wc[i].status)));
        break;
      }
      if (wc[i].wr_id == kRecvWr) {
        ibv_recv_wr wr{};
        wr.wr_id = kRecvWr;
        ibv_recv_wr* bad = nullptr;
        int rc = api_.post_recv(qp_, &wr, &bad);
        if (rc != 0) {
          FailLocked(Status::SystemError(Who() + ": ibv_post_recv: " + ErrnoText(rc)));
          break;
        }
        const uint32_t imm = ntohl(wc[i].imm_data);
        if (imm & kCreditFlag) {
          credits_ += imm & ~kCreditFlag;
        } else {
          landed_.push_back({static_cast<uint32_t>(recv_slot_++ % kSlots), imm});
        }
      } else if (!in_flight_.empty()) {
        InFlight done = std::move(in_flight_.front());
        in_flight_.pop_front();
        if (done.last_of_message && !sends_.empty()) {
          sends_.front().request->Complete(Status::Ok());
          sends_.pop_front();
          --next_to_post_;
        }
      }
    }
  }
  return moved;
}

bool VerbsLink::DeliverLocked() {
  bool moved = false;
  while (status_.ok() && !landed_.empty() && (discard_left_ > 0 || !recvs_.empty())) {
    const Landed chunk = landed_.front();
    const char* slot = SlotAt(chunk.slot);
    SlotHeader header;
    std::memcpy(&header, slot, sizeof(header));
    if (discard_left_ > 0) {  // the rest of a refused message
      discard_left_ -= std::min<uint64_t>(discard_left_, chunk.length - kSlotHeaderBytes);
      landed_.pop_front();
      ++credits_owed_;
      moved = true;
      continue;
    }
    InRecv& recv = recvs_.front();
    if (!recv.started) {
      if (header.tag != recv.tag || header.bytes != recv.bytes) {
        // The refused message is dropped whole, so the next one arrives intact.
        discard_left_ = header.bytes;
        if (discard_left_ == 0) {
          landed_.pop_front();
          ++credits_owed_;
        }
        recv.request->Complete(Status::Internal(
            Who() + ": message mismatch: expected tag " + std::to_string(recv.tag) + " (" +
            std::to_string(recv.bytes) + " bytes), rank " + std::to_string(peer_) +
            " sent tag " + std::to_string(header.tag) + " (" + std::to_string(header.bytes) +
            " bytes)"));
        recvs_.pop_front();
        moved = true;
        continue;
      }
      recv.started = true;
    }
    const size_t payload = chunk.length - kSlotHeaderBytes;
    if (chunk.length < kSlotHeaderBytes || chunk.length > kSlotBytes ||
        payload > recv.bytes - recv.offset || header.tag != recv.tag) {
      FailLocked(Status::Internal(Who() + ": a chunk of " + std::to_string(chunk.length) +
                                  " bytes does not fit the message being received"));
      return true;
    }
    if (payload > 0) {
      if (recv.sink != nullptr) {
        recv.sink->Land(recv.offset, slot + kSlotHeaderBytes, payload);
      } else {
        std::memcpy(recv.data + recv.offset, slot + kSlotHeaderBytes, payload);
      }
    }
    recv.offset += payload;
    landed_.pop_front();
    ++credits_owed_;
    moved = true;
    if (recv.offset == recv.bytes) {
      recv.sink.reset();
      recv.request->Complete(Status::Ok());
      recvs_.pop_front();
    }
  }
  return moved;
}

bool VerbsLink::PostWriteLocked(ibv_sge* sge, int num_sge, uint64_t remote_addr, uint32_t imm,
                                InFlight in_flight) {
  ibv_send_wr wr{};
  wr.wr_id = kSendWr;
  wr.sg_list = sge;
  wr.num_sge = num_sge;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_addr;
  wr.wr.rdma.rkey = remote_.ring_rkey;
  ibv_send_wr* bad = nullptr;
  in_flight_.push_back(std::move(in_flight));  // before posting: the model completes at once
  int rc = api_.post_send(qp_, &wr, &bad);
  if (rc != 0) {
    in_flight_.pop_back();
    FailLocked(Status::SystemError(Who() + ": ibv_post_send: " + ErrnoText(rc)));
    return false;
  }
  return true;
}

bool VerbsLink::PostChunksLocked() {
  if (stage_ != Stage::kUp) return false;
  bool moved = false;
  while (status_.ok() && next_to_post_ < sends_.size() && credits_ > 0 &&
         in_flight_.size() < kSendDepth) {
    OutSend& send = sends_[next_to_post_];
    const size_t payload =
        std::min<size_t>(kSlotBytes - kSlotHeaderBytes, send.bytes - send.posted);
    const uint32_t slot = static_cast<uint32_t>(send_slot_ % kSlots);
    headers_[slot] = SlotHeader{send.tag, send.bytes};
    ibv_sge sge[2];
    sge[0].addr = reinterpret_cast<uint64_t>(&headers_[slot]);
    sge[0].length = kSlotHeaderBytes;
    sge[0].lkey = headers_region_->lkey();
    int num_sge = 1;
    if (payload > 0) {
      sge[1].addr = reinterpret_cast<uint64_t>(send.data + send.posted);
      sge[1].length = static_cast<uint32_t>(payload);
      sge[1].lkey = send.region->lkey();
      num_sge = 2;
    }
    const bool last = send.posted + payload == send.bytes;
    InFlight in_flight{last, send.region};
    // Counted before posting: a write may complete (and be polled) before post_send returns.
    ++send_slot_;
    --credits_;
    send.posted += payload;
    if (last) ++next_to_post_;
    if (!PostWriteLocked(sge, num_sge, remote_.ring_addr + uint64_t{slot} * kSlotBytes,
                         static_cast<uint32_t>(kSlotHeaderBytes + payload), std::move(in_flight))) {
      return true;
    }
    moved = true;
  }
  return moved;
}

bool VerbsLink::ReturnCreditsLocked() {
  if (!status_.ok() || stage_ != Stage::kUp || credits_owed_ == 0 ||
      in_flight_.size() >= kSendDepth) {
    return false;
  }
  const uint32_t returned = credits_owed_;
  credits_owed_ = 0;
  return PostWriteLocked(nullptr, 0, remote_.ring_addr, kCreditFlag | returned, InFlight{});
}

void VerbsLink::FailLocked(const Status& reason) {
  if (!status_.ok()) return;
  status_ = reason.ok() ? Status::Aborted(Who() + " was closed") : reason;
  if (qp_ != nullptr) {
    // The error state stops the adapter: the peer's writes find no QP to land in and fail there.
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    api_.modify_qp(qp_, &attr, IBV_QP_STATE);
  }
  for (OutSend& send : sends_) send.request->Complete(status_);
  for (InRecv& recv : recvs_) recv.request->Complete(status_);
  sends_.clear();
  next_to_post_ = 0;
  recvs_.clear();
  landed_.clear();
  discard_left_ = 0;
}

void VerbsLink::Fail(const Status& reason, bool keep_bootstrap) {
  std::lock_guard<std::mutex> lock(mutex_);
  FailLocked(reason);
  if (bootstrap_ != nullptr && !keep_bootstrap) bootstrap_->Close(status_);
}

bool VerbsLink::Sending() {
  std::lock_guard<std::mutex> lock(mutex_);
  return status_.ok() && (!sends_.empty() || stage_ != Stage::kUp);
}

std::string VerbsLink::Stall(const Request* request) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string setup =
      stage_ == Stage::kUp ? ""
      : stage_ == Stage::kExchanging
          ? " (the link is not up yet: rank " + std::to_string(peer_) +
                " has not sent its QP numbers)"
          : " (the link is not up yet: rank " + std::to_string(peer_) +
                " has not said its QP is ready)";
  for (const OutSend& send : sends_) {
    if (send.request.get() != request) continue;
    std::string what = "a send of " + std::to_string(send.bytes) + " bytes to rank " +
                       std::to_string(peer_) + " is stuck: ";
    if (credits_ == 0) {
      return what + "its credit window is exhausted (all " + std::to_string(kSlots) +
             " ring slots of rank " + std::to_string(peer_) +
             " hold data it has not received: it posts no matching receive)";
    }
    return what + std::to_string(send.posted) + " bytes written, waiting for completions" + setup;
  }
  for (const InRecv& recv : recvs_) {
    if (recv.request.get() != request) continue;
    return "a receive of " + std::to_string(recv.bytes) + " bytes from rank " +
           std::to_string(peer_) + " has " + std::to_string(recv.offset) + " bytes so far" + setup;
  }
  return "";
}

// ---- VerbsDriver ----

void VerbsDriver::Add(const std::shared_ptr<VerbsLink>& link) {
  std::lock_guard<std::mutex> lock(mutex_);
  links_.push_back(link);
}

std::vector<std::shared_ptr<VerbsLink>> VerbsDriver::Links() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::shared_ptr<VerbsLink>> live;
  size_t kept = 0;
  for (auto& weak : links_) {
    if (auto link = weak.lock()) {
      live.push_back(std::move(link));
      links_[kept++] = weak;
    }
  }
  links_.resize(kept);
  return live;
}

bool VerbsDriver::ProgressAll(bool check_peers) {
  bool moved = false;
  for (const auto& link : Links()) moved |= link->Progress(check_peers);
  return moved;
}

void VerbsDriver::Progress() { ProgressAll(false); }

Status VerbsDriver::Wait(const Request& request, Deadline deadline) {
  const int64_t start = NowNs();
  const int64_t end = EndNs(deadline, start);
  int64_t last_progress = start;
  for (;;) {
    if (request.IsDone()) break;
    int64_t now = NowNs();
    const bool moved = ProgressAll(now - last_progress > kPeerCheckEveryNs);
    if (request.IsDone()) break;
    now = NowNs();
    if (moved) last_progress = now;
    if (now >= end) {
      std::string stall;
      for (const auto& link : Links()) {
        stall = link->Stall(&request);
        if (!stall.empty()) break;
      }
      return Status::Timeout("request did not complete before the deadline" +
                             (stall.empty() ? std::string() : ": " + stall));
    }
    if (budget_.SpinOrYield(now - last_progress) == WaitStep::kSleep) {
      timespec nap{0, 50'000};  // no completion channel: nap, then poll again
      nanosleep(&nap, nullptr);
    }
  }
  return request.status().ok() ? Status::Ok() : request.status();
}

void VerbsDriver::FailAll(const Status& reason) {
  for (const auto& link : Links()) link->Fail(reason, /*keep_bootstrap=*/true);
}

void VerbsDriver::Kick() {
  if (backstop_awake_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(backstop_mutex_);
  kicked_ = true;
  backstop_awake_.store(true, std::memory_order_release);
  backstop_cv_.notify_one();
}

void VerbsDriver::Stop() {
  std::lock_guard<std::mutex> lock(backstop_mutex_);
  stopped_ = true;
  backstop_cv_.notify_one();
}

void VerbsDriver::RunBackstop() {
  std::unique_lock<std::mutex> lock(backstop_mutex_);
  while (!stopped_) {
    backstop_cv_.wait(lock, [&] { return stopped_ || kicked_; });
    if (stopped_) break;
    kicked_ = false;
    lock.unlock();
    bool sending = false;
    for (const auto& link : Links()) {
      link->Progress(true);
      sending = link->Sending() || sending;
    }
    lock.lock();
    if (sending) {
      kicked_ = true;  // look again after a period
      backstop_cv_.wait_for(lock, kBackstopPeriod, [&] { return stopped_; });
    } else {
      // Going to sleep. A send posted from here on finds the flag clear and kicks; one posted
      // during the scan above is seen by the second look (Kick runs under the link's lock, which
      // Sending() takes after this store).
      backstop_awake_.store(false, std::memory_order_seq_cst);
      lock.unlock();
      bool again = false;
      for (const auto& link : Links()) again = link->Sending() || again;
      lock.lock();
      if (again) {
        kicked_ = true;
        backstop_awake_.store(true, std::memory_order_seq_cst);
      }
    }
  }
}

// ---- VerbsConnection ----

VerbsConnection::~VerbsConnection() {
  link_->Fail(Status::Ok());  // OK: "rank R: verbs link to rank P was closed"
}

RequestPtr VerbsConnection::PostSend(const void* data, size_t bytes, uint64_t tag) {
  return link_->PostSend(data, bytes, tag, driver_);
}

RequestPtr VerbsConnection::PostRecv(void* data, size_t bytes, uint64_t tag) {
  return link_->PostRecv(data, bytes, tag, nullptr, driver_);
}

RequestPtr VerbsConnection::PostRecvInto(size_t bytes, uint64_t tag,
                                         std::shared_ptr<LandingSink> sink) {
  return link_->PostRecv(nullptr, bytes, tag, std::move(sink), driver_);
}

}  // namespace braid::transport::ibverbs

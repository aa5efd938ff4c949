#include "tests/transport/ibverbs/verbs_model.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <new>
#include <vector>

namespace braid::testing::verbs_model {
namespace {

using transport::ibverbs::VerbsApi;

// The model device's limits (what ibv_query_device reports).
constexpr uint32_t kMaxMrs = 4096;  // memory regions per process; a key's low 12 bits index them
constexpr uint32_t kMaxQps = 256;   // QPs per process
constexpr uint32_t kMaxWr = 1024;   // work requests per queue
constexpr int kMaxSge = 4;
constexpr int kMaxCqe = 65536;
constexpr uint32_t kGidMagic = 0x4d565242;  // "BRVM": a GID the model made
constexpr uint64_t kSegmentMagic = 0x4c45444f4d565242ULL;  // "BRVMODEL"

// ---- what peers see of a process: its model segment ----

struct MrSlot {
  std::atomic<uint32_t> key{0};  // 0: free; else the lkey == rkey of the live region
  uint32_t pd = 0;
  int32_t access = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
};

struct Inbound {  // one write with immediate that consumed a posted receive
  uint32_t imm = 0;
  uint32_t byte_len = 0;
};

struct QpSlot {
  std::atomic<uint32_t> qpn{0};  // 0: free
  std::atomic<int32_t> state{IBV_QPS_RESET};
  std::atomic<uint32_t> rq_psn{0};
  std::atomic<int32_t> access{0};  // the QP's qp_access_flags
  uint32_t pd = 0;
  std::atomic<uint64_t> recv_posted{0};   // receives ever posted (owner)
  std::atomic<uint64_t> recv_claimed{0};  // ... and consumed by the peer's writes (the peer)
  Inbound inbound[kMaxWr];                // [claimed % kMaxWr], written before claimed++
};

struct Segment {
  uint64_t magic = kSegmentMagic;
  int32_t pid = 0;
  MrSlot mrs[kMaxMrs];
  QpSlot qps[kMaxQps];
};

// ---- this process's private side ----

// Each model object extends the public struct the transport sees, so a downcast finds it.
struct ModelCq : ibv_cq {
  std::deque<ibv_wc> entries;
  int capacity = 0;
  bool overrun = false;
  int users = 0;  // QPs attached
};

struct PendingSend {
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  std::vector<ibv_sge> sge;
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;
};

struct Remote {
  pid_t pid = 0;
  int pidfd = -1;  // -1 for this process
  Segment* segment = nullptr;
};

struct ModelQp : ibv_qp {
  uint32_t slot_index = 0;
  ModelCq* model_send_cq = nullptr;  // send_cq and recv_cq, as the model's own
  ModelCq* model_recv_cq = nullptr;
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_sge = 0;
  bool sq_sig_all = false;
  // Attributes from modify_qp.
  ibv_gid dgid{};
  uint32_t dest_qpn = 0;
  uint32_t sq_psn = 0;
  uint8_t timeout = 0;
  uint8_t retry_cnt = 0;
  uint8_t rnr_retry = 0;
  uint8_t min_rnr_timer = 0;
  Remote* remote = nullptr;
  std::deque<PendingSend> sends;  // posted, not yet executed (the head may be retrying)
  std::deque<uint64_t> recvs;     // posted receives' wr_ids, oldest first
  uint64_t recv_consumed = 0;
  int64_t stalled_since_ns = 0;   // the head send's first failed try, 0 when none
};

struct ModelContext : ibv_context {
  std::vector<ModelQp*> qps;
  int objects = 0;  // PDs and CQs alive (close_device refuses while any)
};

ModelQp* AsQp(ibv_qp* qp) { return static_cast<ModelQp*>(qp); }
ModelCq* AsCq(ibv_cq* cq) { return static_cast<ModelCq*>(cq); }
ModelContext* AsContext(ibv_context* context) { return static_cast<ModelContext*>(context); }

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The model's process-wide state. One mutex guards everything private; the segment's shared
// fields are atomics written by one side each (see QpSlot).
struct Model {
  std::mutex mutex;
  pid_t pid = 0;
  int memfd = -1;
  Segment* segment = nullptr;
  uint32_t next_qpn = 0x100;
  uint32_t next_pd = 1;
  uint32_t key_generation = 1;
  std::map<pid_t, Remote*> remotes;
  std::atomic<uint64_t> rnr_naks{0};
  ibv_device device{};
  ibv_device* device_list[2] = {&device, nullptr};

  // (Re)creates this process's segment: on first use, and in a child forked after use (the
  // parent's objects are not the child's to use; they are dropped, not freed).
  bool EnsureOwnSegment() {
    if (segment != nullptr && pid == getpid()) return true;
    pid = getpid();
    remotes.clear();
    next_qpn = 0x100;
    int fd = static_cast<int>(syscall(SYS_memfd_create, "braid-verbs-model", 0));
    if (fd < 0) return false;
    if (ftruncate(fd, sizeof(Segment)) != 0) {
      close(fd);
      return false;
    }
    void* map = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
      close(fd);
      return false;
    }
    memfd = fd;
    segment = new (map) Segment();
    segment->pid = pid;
    std::strncpy(device.name, "braid_verbs_model_0", sizeof(device.name) - 1);
    std::strncpy(device.dev_name, "model0", sizeof(device.dev_name) - 1);
    device.node_type = IBV_NODE_CA;
    device.transport_type = IBV_TRANSPORT_IB;
    return true;
  }

  // The segment of the process a model GID names, mapped once per process; null if that process
  // is gone or the GID is not the model's.
  Remote* Resolve(const ibv_gid& gid) {
    uint32_t magic, gid_pid, gid_fd;
    std::memcpy(&magic, gid.raw, 4);
    std::memcpy(&gid_pid, gid.raw + 4, 4);
    std::memcpy(&gid_fd, gid.raw + 8, 4);
    if (magic != kGidMagic) return nullptr;
    auto found = remotes.find(static_cast<pid_t>(gid_pid));
    if (found != remotes.end()) return found->second;
    auto* remote = new Remote();
    remote->pid = static_cast<pid_t>(gid_pid);
    if (remote->pid == pid) {
      remote->segment = segment;
    } else {
      int pidfd = static_cast<int>(syscall(SYS_pidfd_open, remote->pid, 0));
      if (pidfd < 0) {
        delete remote;
        return nullptr;
      }
      int fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(gid_fd), 0));
      void* map = fd < 0 ? MAP_FAILED
                         : mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                                0);
      if (fd >= 0) close(fd);
      if (map == MAP_FAILED || static_cast<Segment*>(map)->magic != kSegmentMagic ||
          static_cast<Segment*>(map)->pid != remote->pid) {
        if (map != MAP_FAILED) munmap(map, sizeof(Segment));
        close(pidfd);
        delete remote;
        return nullptr;
      }
      remote->pidfd = pidfd;
      remote->segment = static_cast<Segment*>(map);
    }
    remotes[remote->pid] = remote;
    return remote;
  }
};

Model& TheModel() {
  static Model* model = new Model();  // never destroyed: verbs objects may outlive statics
  return *model;
}

// Locks the model and makes sure this process has its segment.
struct Locked {
  Locked() : lock(TheModel().mutex), ok(TheModel().EnsureOwnSegment()) {}
  std::unique_lock<std::mutex> lock;
  bool ok;
};

bool Alive(const Remote& remote) {
  if (remote.pidfd < 0) return true;
  pollfd entry{remote.pidfd, POLLIN, 0};
  return poll(&entry, 1, 0) == 0;  // readable once the process exited
}

MrSlot* FindMr(Segment* segment, uint32_t key) {
  MrSlot& slot = segment->mrs[key % kMaxMrs];
  return slot.key.load(std::memory_order_acquire) == key && key != 0 ? &slot : nullptr;
}

bool Within(const MrSlot& mr, uint64_t addr, uint64_t length) {
  return addr >= mr.addr && length <= mr.length && addr - mr.addr <= mr.length - length;
}

void Push(ModelCq* cq, const ibv_wc& wc) {
  if (static_cast<int>(cq->entries.size()) >= cq->capacity) {
    cq->overrun = true;  // as a real CQ overrun: the CQ is unusable from now on
    return;
  }
  cq->entries.push_back(wc);
}

ibv_wc Completion(const ModelQp& qp, uint64_t wr_id, ibv_wc_status status, ibv_wc_opcode opcode) {
  ibv_wc wc{};
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.qp_num = qp.qp_num;
  return wc;
}

QpSlot& SlotOf(const ModelQp& qp) { return TheModel().segment->qps[qp.slot_index]; }

void EnterError(ModelQp& qp) {
  qp.state = IBV_QPS_ERR;
  SlotOf(qp).state.store(IBV_QPS_ERR, std::memory_order_release);
}

// The remote QP a connected QP writes to, if it is there and ready to receive.
QpSlot* RemoteQp(ModelQp& qp) {
  Model& model = TheModel();
  if (qp.remote == nullptr) qp.remote = model.Resolve(qp.dgid);
  if (qp.remote == nullptr || !Alive(*qp.remote)) return nullptr;
  QpSlot& slot = qp.remote->segment->qps[qp.dest_qpn % kMaxQps];
  if (slot.qpn.load(std::memory_order_acquire) != qp.dest_qpn) return nullptr;
  int32_t state = slot.state.load(std::memory_order_acquire);
  if (state != IBV_QPS_RTR && state != IBV_QPS_RTS) return nullptr;
  if (slot.rq_psn.load(std::memory_order_acquire) != qp.sq_psn) return nullptr;  // packets dropped
  return &slot;
}

// Copies the gathered local entries to `remote_addr` in the remote process.
bool WriteRemote(const Remote& remote, const std::vector<ibv_sge>& sge, uint64_t remote_addr,
                 uint64_t total) {
  if (total == 0) return true;
  if (remote.pidfd < 0) {
    uint64_t at = remote_addr;
    for (const ibv_sge& entry : sge) {
      std::memmove(reinterpret_cast<void*>(at), reinterpret_cast<const void*>(entry.addr),
                   entry.length);
      at += entry.length;
    }
    return true;
  }
  std::vector<iovec> local;
  for (const ibv_sge& entry : sge) {
    local.push_back({reinterpret_cast<void*>(entry.addr), entry.length});
  }
  iovec target{reinterpret_cast<void*>(remote_addr), total};
  ssize_t written = process_vm_writev(remote.pid, local.data(), local.size(), &target, 1, 0);
  return written == static_cast<ssize_t>(total);
}

// The head send cannot go now (no answer from the peer, or receiver not ready): true while the
// retries of `budget_ns` in all last, false once they are spent (the caller fails it).
bool KeepRetrying(ModelQp& qp, int64_t budget_ns) {
  int64_t now = NowNs();
  if (qp.stalled_since_ns == 0) qp.stalled_since_ns = now;
  return budget_ns < 0 || now - qp.stalled_since_ns < budget_ns;
}

// Executes the QP's posted sends in order, as far as they can go now.
void RunSends(ModelQp& qp) {
  Model& model = TheModel();
  while (!qp.sends.empty()) {
    PendingSend& send = qp.sends.front();
    ibv_wc_status status = IBV_WC_SUCCESS;
    if (qp.state == IBV_QPS_ERR) {
      status = IBV_WC_WR_FLUSH_ERR;
    } else {
      uint64_t total = 0;
      for (const ibv_sge& entry : send.sge) {
        MrSlot* mr = FindMr(model.segment, entry.lkey);
        if (mr == nullptr || mr->pd != qp.pd->handle || !Within(*mr, entry.addr, entry.length)) {
          status = IBV_WC_LOC_PROT_ERR;
        }
        total += entry.length;
      }
      QpSlot* remote = status == IBV_WC_SUCCESS ? RemoteQp(qp) : nullptr;
      // ACK timeout 4.096 us * 2^timeout, retry_cnt retries after the first try.
      const int64_t ack_budget_ns = (int64_t{4096} << qp.timeout) * (qp.retry_cnt + 1);
      if (status == IBV_WC_SUCCESS && remote == nullptr) {
        if (KeepRetrying(qp, ack_budget_ns)) return;
        status = IBV_WC_RETRY_EXC_ERR;
      }
      if (status == IBV_WC_SUCCESS && total > 0) {
        MrSlot* mr = FindMr(qp.remote->segment, send.rkey);
        if (mr == nullptr || mr->pd != remote->pd || !(mr->access & IBV_ACCESS_REMOTE_WRITE) ||
            !(remote->access.load() & IBV_ACCESS_REMOTE_WRITE) ||
            !Within(*mr, send.remote_addr, total)) {
          status = IBV_WC_REM_ACCESS_ERR;
          remote->state.store(IBV_QPS_ERR, std::memory_order_release);  // the responder too
        }
      }
      uint64_t claimed = 0;
      if (status == IBV_WC_SUCCESS && send.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        claimed = remote->recv_claimed.load(std::memory_order_relaxed);
        if (remote->recv_posted.load(std::memory_order_acquire) == claimed) {
          model.rnr_naks.fetch_add(1, std::memory_order_relaxed);
          // min_rnr_timer 0 means 655.36 ms; otherwise modelled as 10 us per unit.
          const int64_t rnr_ns = qp.min_rnr_timer == 0 ? 655'360'000 : qp.min_rnr_timer * 10'000;
          if (KeepRetrying(qp, qp.rnr_retry == 7 ? -1 : rnr_ns * (qp.rnr_retry + 1))) return;
          status = IBV_WC_RNR_RETRY_EXC_ERR;
        }
      }
      if (status == IBV_WC_SUCCESS && !WriteRemote(*qp.remote, send.sge, send.remote_addr, total)) {
        if (KeepRetrying(qp, ack_budget_ns)) return;  // the process went away mid-write
        status = IBV_WC_RETRY_EXC_ERR;
      }
      if (status == IBV_WC_SUCCESS && send.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        remote->inbound[claimed % kMaxWr] = {send.imm, static_cast<uint32_t>(total)};
        remote->recv_claimed.store(claimed + 1, std::memory_order_release);
      }
    }
    qp.stalled_since_ns = 0;
    if (status != IBV_WC_SUCCESS && status != IBV_WC_WR_FLUSH_ERR) EnterError(qp);
    if (status != IBV_WC_SUCCESS || send.signaled) {
      Push(qp.model_send_cq, Completion(qp, send.wr_id, status, IBV_WC_RDMA_WRITE));
    }
    qp.sends.pop_front();
  }
}

// Completes the receives that the peer's writes with immediate consumed; flushes them in ERR.
void RunReceives(ModelQp& qp) {
  QpSlot& slot = SlotOf(qp);
  if (slot.state.load(std::memory_order_acquire) == IBV_QPS_ERR) qp.state = IBV_QPS_ERR;
  uint64_t claimed = slot.recv_claimed.load(std::memory_order_acquire);
  while (qp.recv_consumed < claimed && !qp.recvs.empty()) {
    const Inbound& in = slot.inbound[qp.recv_consumed % kMaxWr];
    ibv_wc wc = Completion(qp, qp.recvs.front(), IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM);
    wc.byte_len = in.byte_len;
    wc.imm_data = in.imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
    Push(qp.model_recv_cq, wc);
    qp.recvs.pop_front();
    ++qp.recv_consumed;
  }
  if (qp.state == IBV_QPS_ERR) {
    while (!qp.recvs.empty()) {
      Push(qp.model_recv_cq, Completion(qp, qp.recvs.front(), IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV));
      qp.recvs.pop_front();
    }
  }
}


// ---- the table ----

ibv_device** GetDeviceList(int* num_devices) {
  Locked locked;
  if (!locked.ok) {
    errno = ENOMEM;
    if (num_devices != nullptr) *num_devices = 0;
    return nullptr;
  }
  if (num_devices != nullptr) *num_devices = 1;
  return TheModel().device_list;
}

void FreeDeviceList(ibv_device**) {}

const char* GetDeviceName(ibv_device* device) { return device->name; }

ibv_context* OpenDevice(ibv_device* device) {
  Locked locked;
  auto* context = new ModelContext();
  context->device = device;
  return context;
}

int CloseDevice(ibv_context* context) {
  Locked locked;
  ModelContext* model = AsContext(context);
  if (model->objects != 0 || !model->qps.empty()) return EBUSY;
  delete model;
  return 0;
}

int QueryDevice(ibv_context*, ibv_device_attr* attr) {
  *attr = ibv_device_attr{};
  attr->phys_port_cnt = 1;
  attr->max_qp = kMaxQps;
  attr->max_qp_wr = kMaxWr;
  attr->max_sge = kMaxSge;
  attr->max_cqe = kMaxCqe;
  attr->max_mr = kMaxMrs;
  return 0;
}

int QueryPort(ibv_context*, uint8_t port_num, ibv_port_attr* attr) {
  if (port_num != 1) return EINVAL;
  *attr = ibv_port_attr{};
  attr->state = IBV_PORT_ACTIVE;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = IBV_MTU_4096;
  attr->gid_tbl_len = 1;
  attr->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

int QueryGid(ibv_context*, uint8_t port_num, int index, ibv_gid* gid) {
  Locked locked;
  if (port_num != 1 || index != 0 || !locked.ok) {
    errno = EINVAL;
    return -1;
  }
  *gid = ibv_gid{};
  uint32_t magic = kGidMagic;
  uint32_t pid = static_cast<uint32_t>(TheModel().pid);
  uint32_t fd = static_cast<uint32_t>(TheModel().memfd);
  std::memcpy(gid->raw, &magic, 4);
  std::memcpy(gid->raw + 4, &pid, 4);
  std::memcpy(gid->raw + 8, &fd, 4);
  return 0;
}

ibv_pd* AllocPd(ibv_context* context) {
  Locked locked;
  auto* pd = new ibv_pd();
  pd->context = context;
  pd->handle = TheModel().next_pd++;
  ++AsContext(context)->objects;
  return pd;
}

int DeallocPd(ibv_pd* pd) {
  Locked locked;
  for (const MrSlot& mr : TheModel().segment->mrs) {
    if (mr.key.load() != 0 && mr.pd == pd->handle) return EBUSY;
  }
  --AsContext(pd->context)->objects;
  delete pd;
  return 0;
}

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  Locked locked;
  Model& model = TheModel();
  if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  for (uint32_t i = 0; i < kMaxMrs; ++i) {
    MrSlot& slot = model.segment->mrs[i];
    if (slot.key.load() != 0) continue;
    uint32_t key = ((model.key_generation++ & 0xfffff) << 12) | i;
    if (key == 0) key = (1u << 12) | i;
    slot.pd = pd->handle;
    slot.access = access;
    slot.addr = reinterpret_cast<uint64_t>(addr);
    slot.length = length;
    slot.key.store(key, std::memory_order_release);
    auto* mr = new ibv_mr();
    mr->context = pd->context;
    mr->pd = pd;
    mr->addr = addr;
    mr->length = length;
    mr->handle = i;
    mr->lkey = key;
    mr->rkey = key;
    return mr;
  }
  errno = ENOMEM;
  return nullptr;
}

int DeregMr(ibv_mr* mr) {
  Locked locked;
  TheModel().segment->mrs[mr->handle].key.store(0, std::memory_order_release);
  delete mr;
  return 0;
}

ibv_cq* CreateCq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel*, int) {
  Locked locked;
  if (cqe < 1 || cqe > kMaxCqe) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new ModelCq();
  cq->context = context;
  cq->cq_context = cq_context;
  cq->cqe = cqe;
  cq->capacity = cqe;
  ++AsContext(context)->objects;
  return cq;
}

int DestroyCq(ibv_cq* cq) {
  Locked locked;
  ModelCq* model = AsCq(cq);
  if (model->users != 0) return EBUSY;
  --AsContext(cq->context)->objects;
  delete model;
  return 0;
}

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  Locked locked;
  Model& model = TheModel();
  if (attr->qp_type != IBV_QPT_RC || attr->send_cq == nullptr || attr->recv_cq == nullptr ||
      attr->srq != nullptr || attr->cap.max_send_sge > kMaxSge ||
      attr->cap.max_recv_sge > kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->cap.max_send_wr > kMaxWr || attr->cap.max_recv_wr > kMaxWr) {
    errno = ENOMEM;
    return nullptr;
  }
  for (uint32_t i = 0; i < kMaxQps; ++i) {
    uint32_t qpn = model.next_qpn;
    QpSlot& slot = model.segment->qps[qpn % kMaxQps];
    model.next_qpn = model.next_qpn + 1 == 0 ? 0x100 : model.next_qpn + 1;
    if (slot.qpn.load() != 0) continue;
    auto* qp = new ModelQp();
    qp->context = pd->context;
    qp->pd = pd;
    qp->send_cq = attr->send_cq;
    qp->recv_cq = attr->recv_cq;
    qp->qp_context = attr->qp_context;
    qp->qp_num = qpn;
    qp->qp_type = IBV_QPT_RC;
    qp->state = IBV_QPS_RESET;
    qp->slot_index = qpn % kMaxQps;
    qp->model_send_cq = AsCq(attr->send_cq);
    qp->model_recv_cq = AsCq(attr->recv_cq);
    qp->max_send_wr = attr->cap.max_send_wr;
    qp->max_recv_wr = attr->cap.max_recv_wr;
    qp->max_sge = attr->cap.max_send_sge;
    qp->sq_sig_all = attr->sq_sig_all != 0;
    ++qp->model_send_cq->users;
    ++qp->model_recv_cq->users;
    slot.state.store(IBV_QPS_RESET);
    slot.access.store(0);
    slot.pd = pd->handle;
    slot.recv_posted.store(0);
    slot.recv_claimed.store(0);
    slot.qpn.store(qpn, std::memory_order_release);
    AsContext(pd->context)->qps.push_back(qp);
    return qp;
  }
  errno = ENOMEM;
  return nullptr;
}

int ModifyQp(ibv_qp* qp_public, ibv_qp_attr* attr, int mask) {
  Locked locked;
  ModelQp& qp = *AsQp(qp_public);
  QpSlot& slot = SlotOf(qp);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  auto has = [&](int required) { return (mask & required) == required; };
  const ibv_qp_state from = qp.state;
  const ibv_qp_state to = attr->qp_state;
  if (to == IBV_QPS_ERR) {
    EnterError(qp);
    return 0;
  }
  if (to == IBV_QPS_RESET) {
    qp.state = IBV_QPS_RESET;
    slot.state.store(IBV_QPS_RESET);
    qp.sends.clear();
    qp.recvs.clear();
    return 0;
  }
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    if (!has(IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) || attr->port_num != 1) {
      return EINVAL;
    }
    slot.access.store(static_cast<int32_t>(attr->qp_access_flags));
  } else if (from == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    if (!has(IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) ||
        !attr->ah_attr.is_global) {  // the model's port is RoCE: a GRH is required
      return EINVAL;
    }
    qp.dgid = attr->ah_attr.grh.dgid;
    qp.dest_qpn = attr->dest_qp_num;
    qp.min_rnr_timer = attr->min_rnr_timer;
    slot.rq_psn.store(attr->rq_psn & 0xffffff);
  } else if (from == IBV_QPS_RTR && to == IBV_QPS_RTS) {
    if (!has(IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
             IBV_QP_MAX_QP_RD_ATOMIC)) {
      return EINVAL;
    }
    qp.timeout = attr->timeout;
    qp.retry_cnt = attr->retry_cnt;
    qp.rnr_retry = attr->rnr_retry;
    qp.sq_psn = attr->sq_psn & 0xffffff;
  } else {
    return EINVAL;
  }
  qp.state = to;
  slot.state.store(to, std::memory_order_release);
  return 0;
}

int DestroyQp(ibv_qp* qp_public) {
  Locked locked;
  ModelQp* qp = AsQp(qp_public);
  QpSlot& slot = SlotOf(*qp);
  slot.state.store(IBV_QPS_RESET);
  slot.qpn.store(0, std::memory_order_release);
  --qp->model_send_cq->users;
  --qp->model_recv_cq->users;
  auto& qps = AsContext(qp_public->context)->qps;
  for (size_t i = 0; i < qps.size(); ++i) {
    if (qps[i] == qp) {
      qps.erase(qps.begin() + static_cast<long>(i));
      break;
    }
  }
  delete qp;
  return 0;
}

int PostSend(ibv_qp* qp_public, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  Locked locked;
  ModelQp& qp = *AsQp(qp_public);
  for (; wr != nullptr; wr = wr->next) {
    int error = 0;
    if (qp.state != IBV_QPS_RTS && qp.state != IBV_QPS_ERR) {
      error = EINVAL;
    } else if (wr->num_sge < 0 || wr->num_sge > static_cast<int>(qp.max_sge) ||
               (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)) {
      error = EINVAL;
    } else if (qp.sends.size() >= qp.max_send_wr) {
      error = ENOMEM;
    }
    if (error != 0) {
      *bad_wr = wr;
      return error;
    }
    PendingSend send;
    send.wr_id = wr->wr_id;
    send.opcode = wr->opcode;
    send.signaled = qp.sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    send.sge.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    send.remote_addr = wr->wr.rdma.remote_addr;
    send.rkey = wr->wr.rdma.rkey;
    send.imm = wr->imm_data;
    qp.sends.push_back(std::move(send));
  }
  RunSends(qp);
  return 0;
}

int PostRecv(ibv_qp* qp_public, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  Locked locked;
  ModelQp& qp = *AsQp(qp_public);
  for (; wr != nullptr; wr = wr->next) {
    if (qp.state == IBV_QPS_RESET || wr->num_sge > kMaxSge) {
      *bad_wr = wr;
      return EINVAL;
    }
    if (qp.recvs.size() >= qp.max_recv_wr) {
      *bad_wr = wr;
      return ENOMEM;
    }
    qp.recvs.push_back(wr->wr_id);
    SlotOf(qp).recv_posted.fetch_add(1, std::memory_order_release);
  }
  return 0;
}

int PollCq(ibv_cq* cq_public, int num_entries, ibv_wc* wc) {
  Locked locked;
  ModelCq* cq = AsCq(cq_public);
  // The model's "hardware" runs here: every QP of the device moves what it can.
  for (ModelQp* qp : AsContext(cq_public->context)->qps) {
    RunSends(*qp);
    RunReceives(*qp);
  }
  if (cq->overrun) return -1;
  int n = 0;
  while (n < num_entries && !cq->entries.empty()) {
    wc[n++] = cq->entries.front();
    cq->entries.pop_front();
  }
  return n;
}

const char* WcStatusStr(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    default: return "unknown";
  }
}

VerbsApi MakeApi() {
  VerbsApi api;
  api.source = "software model of verbs (tests only)";
  api.get_device_list = &GetDeviceList;
  api.free_device_list = &FreeDeviceList;
  api.get_device_name = &GetDeviceName;
  api.open_device = &OpenDevice;
  api.close_device = &CloseDevice;
  api.query_device = &QueryDevice;
  api.query_port = &QueryPort;
  api.query_gid = &QueryGid;
  api.alloc_pd = &AllocPd;
  api.dealloc_pd = &DeallocPd;
  api.reg_mr = &RegMr;
  api.dereg_mr = &DeregMr;
  api.create_cq = &CreateCq;
  api.destroy_cq = &DestroyCq;
  api.create_qp = &CreateQp;
  api.modify_qp = &ModifyQp;
  api.destroy_qp = &DestroyQp;
  api.post_send = &PostSend;
  api.post_recv = &PostRecv;
  api.poll_cq = &PollCq;
  api.wc_status_str = &WcStatusStr;
  return api;
}

}  // namespace

const VerbsApi& ModelVerbsApi() {
  static const VerbsApi api = MakeApi();
  return api;
}

void InstallVerbsModel() { transport::ibverbs::UseVerbsApiForTesting(&ModelVerbsApi()); }

uint64_t RnrNaks() { return TheModel().rnr_naks.load(std::memory_order_relaxed); }

}  // namespace braid::testing::verbs_model

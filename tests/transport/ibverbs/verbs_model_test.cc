// The software model of the verbs calls (verbs_model.h) against what the verbs specification and
// rdma-core's man pages say a device does: post order, completions with immediates, the QP state
// machine, queue depths, receiver-not-ready retries, memory-region bounds and access flags, the
// error state and its flushes, and a peer process that disappears. The verbs transport's tests
// trust the model, so the model is checked on its own first. Most cases run both QPs in one
// thread (the model's "hardware" runs inside post and poll calls, so the order of events is
// exact); the cross-process case forks.
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "tests/transport/ibverbs/read_all.h"
#include "tests/transport/ibverbs/verbs_model.h"

namespace braid::testing::verbs_model {
namespace {

using transport::ibverbs::VerbsApi;

constexpr size_t kMemoryBytes = 1 << 16;

// One side of a connection: a device context, PD, CQ, RC QP and one registered buffer.
struct Side {
  const VerbsApi& api = ModelVerbsApi();
  ibv_context* context = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_mr* mr = nullptr;
  ibv_gid gid{};
  std::vector<char> memory = std::vector<char>(kMemoryBytes, 0);

  explicit Side(uint32_t send_wr = 8, uint32_t recv_wr = 8,
                int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) {
    int count = 0;
    ibv_device** devices = api.get_device_list(&count);
    REQUIRE(count == 1);
    context = api.open_device(devices[0]);
    api.free_device_list(devices);
    REQUIRE(context != nullptr);
    REQUIRE(api.query_gid(context, 1, 0, &gid) == 0);
    pd = api.alloc_pd(context);
    cq = api.create_cq(context, 64, nullptr, nullptr, 0);
    REQUIRE((pd != nullptr && cq != nullptr));
    ibv_qp_init_attr init{};
    init.send_cq = cq;
    init.recv_cq = cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = send_wr;
    init.cap.max_recv_wr = recv_wr;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 1;
    qp = api.create_qp(pd, &init);
    REQUIRE(qp != nullptr);
    mr = api.reg_mr(pd, memory.data(), memory.size(), access);
    REQUIRE(mr != nullptr);
  }
  ~Side() {
    if (qp != nullptr) api.destroy_qp(qp);
    api.dereg_mr(mr);
    api.destroy_cq(cq);
    api.dealloc_pd(pd);
    api.close_device(context);
  }

  int ToInit() {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.port_num = 1;
    attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    return api.modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }
  int ToRtr(const ibv_gid& peer_gid, uint32_t peer_qpn, uint32_t peer_psn) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = IBV_MTU_4096;
    attr.dest_qp_num = peer_qpn;
    attr.rq_psn = peer_psn;
    attr.min_rnr_timer = 1;
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = peer_gid;
    attr.ah_attr.port_num = 1;
    return api.modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                             IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  }
  int ToRts(uint32_t psn, uint8_t timeout, uint8_t retry_cnt, uint8_t rnr_retry) {
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.timeout = timeout;
    attr.retry_cnt = retry_cnt;
    attr.rnr_retry = rnr_retry;
    attr.sq_psn = psn;
    return api.modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  // Connects to `peer` (whose QP must be connected back the same way). PSNs 100 / 200.
  void ConnectTo(const ibv_gid& peer_gid, uint32_t peer_qpn, bool lower, uint8_t timeout = 8,
                 uint8_t retry_cnt = 2, uint8_t rnr_retry = 7) {
    REQUIRE(ToInit() == 0);
    REQUIRE(ToRtr(peer_gid, peer_qpn, lower ? 200 : 100) == 0);
    REQUIRE(ToRts(lower ? 100 : 200, timeout, retry_cnt, rnr_retry) == 0);
  }

  int Write(uint64_t wr_id, size_t offset, uint32_t length, uint32_t lkey, uint64_t remote_addr,
            uint32_t rkey, bool with_imm, uint32_t imm = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(memory.data() + offset), length, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = length > 0 ? 1 : 0;
    wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote_addr;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    return api.post_send(qp, &wr, &bad);
  }
  int Recv(uint64_t wr_id) {
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    ibv_recv_wr* bad = nullptr;
    return api.post_recv(qp, &wr, &bad);
  }
  std::vector<ibv_wc> Poll() {
    ibv_wc wc[64];
    int n = api.poll_cq(cq, 64, wc);
    REQUIRE(n >= 0);
    return std::vector<ibv_wc>(wc, wc + n);
  }
  // Polls until a completion arrives or `ms` pass.
  std::vector<ibv_wc> PollFor(int ms) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    std::vector<ibv_wc> got;
    while (got.empty() && std::chrono::steady_clock::now() < end) got = Poll();
    return got;
  }
  uint64_t Addr(size_t offset) const { return reinterpret_cast<uint64_t>(memory.data() + offset); }
};

// Two connected sides in this process.
struct Pair {
  Side a;
  Side b;
  Pair(uint8_t timeout = 8, uint8_t retry_cnt = 2, uint8_t rnr_retry = 7) {
    a.ConnectTo(b.gid, b.qp->qp_num, true, timeout, retry_cnt, rnr_retry);
    b.ConnectTo(a.gid, a.qp->qp_num, false, timeout, retry_cnt, rnr_retry);
  }
};

TEST_CASE("model: writes with immediate land in post order and complete posted receives",
          "[verbs_model]") {
  Pair pair;
  for (int i = 0; i < 3; ++i) REQUIRE(pair.b.Recv(100 + i) == 0);
  for (int i = 0; i < 3; ++i) {
    std::memset(pair.a.memory.data() + i * 64, 'x' + i, 64);
    REQUIRE(pair.a.Write(i + 1, i * 64, 64, pair.a.mr->lkey, pair.b.Addr(1000 + i * 64),
                         pair.b.mr->rkey, true, 7 + i) == 0);
  }
  std::vector<ibv_wc> sent = pair.a.Poll();
  REQUIRE(sent.size() == 3);
  std::vector<ibv_wc> received = pair.b.Poll();
  REQUIRE(received.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(sent[i].status == IBV_WC_SUCCESS);
    CHECK(sent[i].opcode == IBV_WC_RDMA_WRITE);
    CHECK(sent[i].wr_id == static_cast<uint64_t>(i + 1));
    CHECK(received[i].status == IBV_WC_SUCCESS);
    CHECK(received[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM);
    CHECK(received[i].wr_id == static_cast<uint64_t>(100 + i));  // oldest receive first
    CHECK((received[i].wc_flags & IBV_WC_WITH_IMM) != 0);
    CHECK(ntohl(received[i].imm_data) == static_cast<uint32_t>(7 + i));
    CHECK(received[i].byte_len == 64);
    CHECK(pair.b.memory[1000 + i * 64] == 'x' + i);
    CHECK(pair.b.memory[1000 + i * 64 + 63] == 'x' + i);
  }
  // A plain write moves bytes and consumes no receive.
  REQUIRE(pair.b.Recv(200) == 0);
  pair.a.memory[5000] = 'p';
  REQUIRE(pair.a.Write(9, 5000, 1, pair.a.mr->lkey, pair.b.Addr(7), pair.b.mr->rkey, false) == 0);
  CHECK(pair.a.Poll().size() == 1);
  CHECK(pair.b.Poll().empty());
  CHECK(pair.b.memory[7] == 'p');
}

TEST_CASE("model: the QP state machine refuses skipped steps and missing attributes",
          "[verbs_model]") {
  Side a, b;
  CHECK(a.Write(1, 0, 8, a.mr->lkey, b.Addr(0), b.mr->rkey, false) == EINVAL);  // RESET
  CHECK(a.Recv(1) == EINVAL);                                                   // RESET
  CHECK(a.ToRts(1, 8, 2, 7) == EINVAL);  // RESET -> RTS
  REQUIRE(a.ToInit() == 0);
  CHECK(a.ToRts(1, 8, 2, 7) == EINVAL);  // INIT -> RTS
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  CHECK(a.api.modify_qp(a.qp, &attr, IBV_QP_STATE) == EINVAL);  // no address, QPN, PSN
  REQUIRE(a.ToRtr(b.gid, b.qp->qp_num, 1) == 0);
  CHECK(a.Write(1, 0, 8, a.mr->lkey, b.Addr(0), b.mr->rkey, false) == EINVAL);  // RTR
  ibv_gid other{};
  CHECK(a.api.query_gid(a.context, 1, 1, &other) != 0);  // only GID index 0 exists
}

TEST_CASE("model: queues hold at most their depth", "[verbs_model]") {
  Side a(2, 2), b(2, 2);
  a.ConnectTo(b.gid, b.qp->qp_num, true);
  b.ConnectTo(a.gid, a.qp->qp_num, false);
  // b posts no receive: writes with immediate wait (rnr_retry 7 retries forever) and fill a's
  // queue.
  REQUIRE(a.Write(1, 0, 8, a.mr->lkey, b.Addr(0), b.mr->rkey, true) == 0);
  REQUIRE(a.Write(2, 0, 8, a.mr->lkey, b.Addr(0), b.mr->rkey, true) == 0);
  CHECK(a.Write(3, 0, 8, a.mr->lkey, b.Addr(0), b.mr->rkey, true) == ENOMEM);
  CHECK(a.Poll().empty());
  const uint64_t naks = RnrNaks();
  CHECK(naks > 0);
  REQUIRE(b.Recv(1) == 0);
  REQUIRE(b.Recv(2) == 0);
  CHECK(b.Recv(3) == ENOMEM);
  std::vector<ibv_wc> sent = a.Poll();  // the retries now find receives
  REQUIRE(sent.size() == 2);
  CHECK(sent[0].status == IBV_WC_SUCCESS);
  CHECK(sent[1].status == IBV_WC_SUCCESS);
  CHECK(b.Poll().size() == 2);
}

TEST_CASE("model: receiver-not-ready retries end in RNR_RETRY_EXC_ERR and the error state",
          "[verbs_model]") {
  Pair pair(8, 2, /*rnr_retry=*/1);
  const uint64_t naks = RnrNaks();
  REQUIRE(pair.a.Write(1, 0, 8, pair.a.mr->lkey, pair.b.Addr(0), pair.b.mr->rkey, true) == 0);
  std::vector<ibv_wc> got = pair.a.PollFor(2000);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_RNR_RETRY_EXC_ERR);
  CHECK(RnrNaks() > naks);
  // In ERR every later request is flushed.
  REQUIRE(pair.a.Write(2, 0, 8, pair.a.mr->lkey, pair.b.Addr(0), pair.b.mr->rkey, false) == 0);
  REQUIRE(pair.a.Recv(3) == 0);
  got = pair.a.Poll();
  REQUIRE(got.size() == 2);
  CHECK(got[0].status == IBV_WC_WR_FLUSH_ERR);
  CHECK(got[1].status == IBV_WC_WR_FLUSH_ERR);
}

TEST_CASE("model: remote bounds and access flags give REM_ACCESS_ERR on both sides",
          "[verbs_model]") {
  SECTION("beyond the end of the remote region") {
    Pair pair;
    REQUIRE(pair.b.Recv(1) == 0);
    REQUIRE(pair.a.Write(1, 0, 16, pair.a.mr->lkey, pair.b.Addr(kMemoryBytes - 8),
                         pair.b.mr->rkey, true) == 0);
    std::vector<ibv_wc> got = pair.a.Poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == IBV_WC_REM_ACCESS_ERR);
    got = pair.b.Poll();  // the responder went to ERR too: its receive is flushed
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == IBV_WC_WR_FLUSH_ERR);
  }
  SECTION("a wrong rkey") {
    Pair pair;
    REQUIRE(pair.a.Write(1, 0, 16, pair.a.mr->lkey, pair.b.Addr(0), pair.b.mr->rkey + 1, false) ==
            0);
    std::vector<ibv_wc> got = pair.a.Poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == IBV_WC_REM_ACCESS_ERR);
  }
  SECTION("a region without remote write access") {
    Pair pair;
    ibv_mr* local_only = pair.b.api.reg_mr(pair.b.pd, pair.b.memory.data(), 4096,
                                           IBV_ACCESS_LOCAL_WRITE);
    REQUIRE(local_only != nullptr);
    REQUIRE(pair.a.Write(1, 0, 16, pair.a.mr->lkey, pair.b.Addr(0), local_only->rkey, false) == 0);
    std::vector<ibv_wc> got = pair.a.Poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == IBV_WC_REM_ACCESS_ERR);
    pair.b.api.dereg_mr(local_only);
  }
  SECTION("remote write without local write cannot be registered") {
    Side a;
    errno = 0;
    CHECK(a.api.reg_mr(a.pd, a.memory.data(), 64, IBV_ACCESS_REMOTE_WRITE) == nullptr);
    CHECK(errno == EINVAL);
  }
}

TEST_CASE("model: a local entry outside its region gives LOC_PROT_ERR", "[verbs_model]") {
  Pair pair;
  REQUIRE(pair.a.Write(1, kMemoryBytes - 8, 16, pair.a.mr->lkey, pair.b.Addr(0), pair.b.mr->rkey,
                       false) == 0);
  std::vector<ibv_wc> got = pair.a.Poll();
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_LOC_PROT_ERR);
}

TEST_CASE("model: a destroyed peer QP ends in RETRY_EXC_ERR after the ACK timeouts",
          "[verbs_model]") {
  Pair pair(/*timeout=*/10, /*retry_cnt=*/2);  // 4.096 us * 2^10 * 3 = ~12.6 ms
  pair.b.api.destroy_qp(pair.b.qp);
  pair.b.qp = nullptr;
  auto start = std::chrono::steady_clock::now();
  REQUIRE(pair.a.Write(1, 0, 16, pair.a.mr->lkey, pair.b.Addr(0), pair.b.mr->rkey, false) == 0);
  std::vector<ibv_wc> got = pair.a.PollFor(2000);
  auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_RETRY_EXC_ERR);
  CHECK(took >= std::chrono::milliseconds(12));
}

struct Address {
  ibv_gid gid;
  uint32_t qpn;
  uint64_t addr;
  uint32_t rkey;
};

TEST_CASE("model: bytes cross processes, and a peer process that exits is retried, then fails",
          "[verbs_model]") {
  int to_child[2], to_parent[2];
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(to_parent) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child: a side of its own (the model starts afresh after fork), receive one write,
    // check it, report, exit.
    Side side;
    Address mine{side.gid, side.qp->qp_num, side.Addr(0), side.mr->rkey};
    Address parent{};
    if (write(to_parent[1], &mine, sizeof(mine)) != sizeof(mine)) _exit(2);
    if (!ReadAll(to_child[0], &parent, sizeof(parent))) _exit(3);
    side.ConnectTo(parent.gid, parent.qpn, false);
    side.Recv(1);
    char ready = 'r';
    if (write(to_parent[1], &ready, 1) != 1) _exit(4);
    std::vector<ibv_wc> got = side.PollFor(10000);
    bool ok = got.size() == 1 && got[0].status == IBV_WC_SUCCESS && ntohl(got[0].imm_data) == 42 &&
              got[0].byte_len == 4096 && side.memory[100] == 'c' && side.memory[4195] == 'c';
    char verdict = ok ? 'y' : 'n';
    if (write(to_parent[1], &verdict, 1) != 1) _exit(5);
    _exit(0);
  }
  Side side;
  Address child_address{};
  REQUIRE(ReadAll(to_parent[0], &child_address, sizeof(child_address)));
  Address mine{side.gid, side.qp->qp_num, side.Addr(0), side.mr->rkey};
  REQUIRE(write(to_child[1], &mine, sizeof(mine)) == sizeof(mine));
  side.ConnectTo(child_address.gid, child_address.qpn, true, /*timeout=*/10, /*retry_cnt=*/2);
  char ready = 0;
  REQUIRE(ReadAll(to_parent[0], &ready, 1));
  std::memset(side.memory.data(), 'c', 4096);
  REQUIRE(side.Write(1, 0, 4096, side.mr->lkey, child_address.addr + 100, child_address.rkey,
                     true, 42) == 0);
  std::vector<ibv_wc> got = side.PollFor(5000);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_SUCCESS);
  char verdict = 0;
  REQUIRE(ReadAll(to_parent[0], &verdict, 1));
  CHECK(verdict == 'y');
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  // The child is gone: the next write finds no adapter answering.
  REQUIRE(side.Write(2, 0, 64, side.mr->lkey, child_address.addr, child_address.rkey, false) == 0);
  got = side.PollFor(2000);
  REQUIRE(got.size() == 1);
  CHECK(got[0].status == IBV_WC_RETRY_EXC_ERR);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) close(fd);
}

}  // namespace
}  // namespace braid::testing::verbs_model

#include "tests/collectives/collective_checks.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/collectives/reference.h"

namespace braid::testing {
namespace {

constexpr unsigned char kGuard = 0x5A;    // never-written bytes, and the guard byte past each buffer
constexpr unsigned char kGarbage = 0x33;  // what a rank's unused input holds

// ---- data-movement oracle: every element names its source, destination and index -------------

// Values stay exactly representable: small types get a small modulus.
int64_t Modulus(braidDataType_t type) {
  switch (type) {
    case braidInt8:
    case braidUint8:
    case braidBfloat16:
      return 127;
    case braidFloat16:
      return 2039;
    default:
      return 1000003;
  }
}

int64_t Encode(braidDataType_t type, int src, int dst, size_t i) {
  const int64_t m = Modulus(type);
  return (static_cast<int64_t>(src) * 53 + static_cast<int64_t>(dst) * 17 +
          static_cast<int64_t>(i % static_cast<size_t>(m)) + 1) %
         m;
}

// Writes block `block` of `buffer` (count elements each) as what `src` sends `dst`.
void FillBlock(braidDataType_t type, void* buffer, size_t block, size_t count, int src, int dst) {
  for (size_t i = 0; i < count; ++i) {
    Store(type, buffer, block * count + i, static_cast<double>(Encode(type, src, dst, i)));
  }
}

// "" if block `block` of `buffer` holds what `src` sent `dst`, else the first wrong element.
std::string CheckBlock(braidDataType_t type, const void* buffer, size_t block, size_t count,
                       int src, int dst) {
  for (size_t i = 0; i < count; ++i) {
    const double got = Load(type, buffer, block * count + i);
    const double want = static_cast<double>(Encode(type, src, dst, i));
    if (!(got == want)) {
      return "block " + std::to_string(block) + " element " + std::to_string(i) + " is " +
             std::to_string(got) + ", expected " + std::to_string(want) + " (from rank " +
             std::to_string(src) + " to rank " + std::to_string(dst) + ")";
    }
  }
  return "";
}

// ---- buffers ----------------------------------------------------------------------------------

// `elements` elements plus a guard byte, all `fill`.
std::vector<char> Blank(braidDataType_t type, size_t elements, unsigned char fill = kGuard) {
  return std::vector<char>(elements * TypeSize(type) + 1, static_cast<char>(fill));
}

// "" if block `block` of `buffer` still holds kGuard everywhere.
std::string CheckUntouched(braidDataType_t type, const std::vector<char>& buffer, size_t block,
                           size_t count, const char* name) {
  const size_t bytes = count * TypeSize(type);
  for (size_t b = block * bytes; b < (block + 1) * bytes; ++b) {
    if (static_cast<unsigned char>(buffer[b]) != kGuard) {
      return std::string(name) + " block " + std::to_string(block) +
             " was written although this rank does not own it";
    }
  }
  return "";
}

std::string CheckGuard(const std::vector<char>& buffer, const char* name) {
  return buffer.empty() || static_cast<unsigned char>(buffer.back()) == kGuard
             ? ""
             : std::string("wrote past the end of ") + name;
}

// Reduction input of `rank` (reference.h), `count` elements plus a kGuard byte.
std::vector<char> ReductionInput(braidDataType_t type, braidRedOp_t op, int rank, size_t count) {
  std::vector<char> v = MakeInput(type, op, rank, count);
  v.back() = static_cast<char>(kGuard);
  return v;
}

std::string CallFailed(braidComm_t comm, braidResult_t rc) {
  return std::string(braidGetErrorString(rc)) + ": " + braidGetLastError(comm);
}

// ---- one function per collective: "" or what went wrong ---------------------------------------

std::string AllReduce(braidComm_t comm, int rank, int n, const Call& c) {
  const std::vector<char> input = ReductionInput(c.type, c.op, rank, c.count);
  std::vector<char> send = input;
  std::vector<char> recv = c.in_place ? std::vector<char>() : Blank(c.type, c.count);
  std::vector<char>& result = c.in_place ? send : recv;
  const braidResult_t rc =
      braidAllReduce(send.data(), result.data(), c.count, c.type, c.op, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  std::string wrong = CheckReduced(c.type, c.op, n, result.data(), c.count);
  if (wrong.empty() && !c.in_place && send != input) wrong = "sendbuff was modified";
  if (wrong.empty()) wrong = CheckGuard(result, "recvbuff");
  return wrong;
}

std::string Broadcast(braidComm_t comm, int rank, int n, const Call& c) {
  (void)n;
  const bool is_root = rank == c.root;
  std::vector<char> expected = Blank(c.type, c.count);  // the root's data: it names the root
  FillBlock(c.type, expected.data(), 0, c.count, c.root, 0);
  std::vector<char> send, recv;
  const void* sendbuff = nullptr;
  if (c.in_place) {
    recv = is_root ? expected : Blank(c.type, c.count, kGarbage);
    recv.back() = static_cast<char>(kGuard);
    sendbuff = recv.data();
  } else {
    recv = Blank(c.type, c.count);
    if (is_root) {
      send = expected;
      sendbuff = send.data();
    }  // non-roots pass NULL: only the root reads sendbuff (NCCL)
  }
  const braidResult_t rc = braidBroadcast(sendbuff, recv.data(), c.count, c.type, c.root, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  std::string wrong = CheckBlock(c.type, recv.data(), 0, c.count, c.root, 0);
  if (wrong.empty() && !send.empty() && send != expected) wrong = "the root's sendbuff was modified";
  if (wrong.empty()) wrong = CheckGuard(recv, "recvbuff");
  return wrong;
}

std::string Reduce(braidComm_t comm, int rank, int n, const Call& c) {
  const bool is_root = rank == c.root;
  const std::vector<char> input = ReductionInput(c.type, c.op, rank, c.count);
  std::vector<char> send = input;
  std::vector<char> recv;
  void* recvbuff = nullptr;
  if (c.in_place) {
    recvbuff = send.data();
  } else if (is_root || (c.root + c.count) % 2 == 0) {
    // Every other call, non-roots pass a recvbuff too, which must stay untouched.
    recv = Blank(c.type, c.count);
    recvbuff = recv.data();
  }  // else non-roots pass NULL: only the root writes recvbuff (NCCL)
  const braidResult_t rc =
      braidReduce(send.data(), recvbuff, c.count, c.type, c.op, c.root, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  std::string wrong;
  if (is_root) wrong = CheckReduced(c.type, c.op, n, recvbuff, c.count);
  // Out of place nobody's sendbuff may change; in place a non-root's buffer is input only.
  if (wrong.empty() && (!c.in_place || !is_root) && send != input) {
    wrong = is_root ? "sendbuff was modified" : "a non-root's sendbuff was modified";
  }
  if (wrong.empty() && !is_root && !recv.empty()) {
    wrong = CheckUntouched(c.type, recv, 0, c.count, "a non-root's recvbuff");
  }
  if (wrong.empty()) wrong = CheckGuard(c.in_place ? send : recv, "recvbuff");
  return wrong;
}

std::string AllGather(braidComm_t comm, int rank, int n, const Call& c) {
  const size_t elem = TypeSize(c.type);
  std::vector<char> recv = Blank(c.type, n * c.count);
  std::vector<char> send;
  const void* sendbuff = nullptr;
  if (c.in_place) {
    FillBlock(c.type, recv.data(), rank, c.count, rank, 0);
    sendbuff = recv.data() + rank * c.count * elem;
  } else {
    send = Blank(c.type, c.count);
    FillBlock(c.type, send.data(), 0, c.count, rank, 0);
    sendbuff = send.data();
  }
  const std::vector<char> original = send;
  const braidResult_t rc = braidAllGather(sendbuff, recv.data(), c.count, c.type, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  for (int r = 0; r < n; ++r) {
    std::string wrong = CheckBlock(c.type, recv.data(), r, c.count, r, 0);
    if (!wrong.empty()) return wrong;
  }
  if (send != original) return "sendbuff was modified";
  return CheckGuard(recv, "recvbuff");
}

std::string ReduceScatter(braidComm_t comm, int rank, int n, const Call& c) {
  const size_t elem = TypeSize(c.type);
  const std::vector<char> input = ReductionInput(c.type, c.op, rank, n * c.count);
  std::vector<char> send = input;
  std::vector<char> recv = c.in_place ? std::vector<char>() : Blank(c.type, c.count);
  void* recvbuff = c.in_place ? send.data() + rank * c.count * elem : recv.data();
  const braidResult_t rc =
      braidReduceScatter(send.data(), recvbuff, c.count, c.type, c.op, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  std::string wrong = CheckReducedRange(c.type, c.op, n, recvbuff, rank * c.count, c.count);
  if (wrong.empty() && !c.in_place && send != input) wrong = "sendbuff was modified";
  if (wrong.empty()) wrong = CheckGuard(c.in_place ? send : recv, c.in_place ? "sendbuff" : "recvbuff");
  return wrong;
}

std::string AllToAll(braidComm_t comm, int rank, int n, const Call& c) {
  std::vector<char> send = Blank(c.type, n * c.count);
  for (int p = 0; p < n; ++p) FillBlock(c.type, send.data(), p, c.count, rank, p);
  const std::vector<char> original = send;
  std::vector<char> recv = c.in_place ? std::vector<char>() : Blank(c.type, n * c.count);
  std::vector<char>& result = c.in_place ? send : recv;
  const braidResult_t rc =
      braidAllToAll(send.data(), result.data(), c.count, c.type, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  for (int s = 0; s < n; ++s) {
    std::string wrong = CheckBlock(c.type, result.data(), s, c.count, s, rank);
    if (!wrong.empty()) return wrong;
  }
  if (!c.in_place && send != original) return "sendbuff was modified";
  return CheckGuard(result, "recvbuff");
}

std::string Gather(braidComm_t comm, int rank, int n, const Call& c) {
  const size_t elem = TypeSize(c.type);
  const bool is_root = rank == c.root;
  if (c.in_place) {
    // NCCL's in-place gather: sendbuff == recvbuff + rank * count on every rank.
    std::vector<char> buffer = Blank(c.type, n * c.count);
    FillBlock(c.type, buffer.data(), rank, c.count, rank, c.root);
    const braidResult_t rc = braidGather(buffer.data() + rank * c.count * elem, buffer.data(),
                                         c.count, c.type, c.root, comm, nullptr);
    if (rc != braidSuccess) return CallFailed(comm, rc);
    for (int s = 0; s < n; ++s) {
      std::string wrong = is_root || s == rank
                              ? CheckBlock(c.type, buffer.data(), s, c.count, s, c.root)
                              : CheckUntouched(c.type, buffer, s, c.count, "recvbuff");
      if (!wrong.empty()) return wrong;
    }
    return CheckGuard(buffer, "recvbuff");
  }
  std::vector<char> send = Blank(c.type, c.count);
  FillBlock(c.type, send.data(), 0, c.count, rank, c.root);
  const std::vector<char> original = send;
  std::vector<char> recv = is_root ? Blank(c.type, n * c.count) : std::vector<char>();
  // Non-roots pass NULL: only the root's recvbuff is used.
  const braidResult_t rc = braidGather(send.data(), is_root ? recv.data() : nullptr, c.count,
                                       c.type, c.root, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  if (send != original) return "sendbuff was modified";
  if (!is_root) return "";
  for (int s = 0; s < n; ++s) {
    std::string wrong = CheckBlock(c.type, recv.data(), s, c.count, s, c.root);
    if (!wrong.empty()) return wrong;
  }
  return CheckGuard(recv, "recvbuff");
}

std::string Scatter(braidComm_t comm, int rank, int n, const Call& c) {
  const size_t elem = TypeSize(c.type);
  const bool is_root = rank == c.root;
  if (c.in_place) {
    // NCCL's in-place scatter: recvbuff == sendbuff + rank * count on every rank.
    std::vector<char> buffer = Blank(c.type, n * c.count);
    if (is_root) {
      for (int p = 0; p < n; ++p) FillBlock(c.type, buffer.data(), p, c.count, c.root, p);
    }
    const braidResult_t rc = braidScatter(buffer.data(), buffer.data() + rank * c.count * elem,
                                          c.count, c.type, c.root, comm, nullptr);
    if (rc != braidSuccess) return CallFailed(comm, rc);
    for (int p = 0; p < n; ++p) {
      std::string wrong = is_root || p == rank
                              ? CheckBlock(c.type, buffer.data(), p, c.count, c.root, p)
                              : CheckUntouched(c.type, buffer, p, c.count, "sendbuff");
      if (!wrong.empty()) return wrong;
    }
    return CheckGuard(buffer, "sendbuff");
  }
  std::vector<char> send;
  if (is_root) {
    send = Blank(c.type, n * c.count);
    for (int p = 0; p < n; ++p) FillBlock(c.type, send.data(), p, c.count, c.root, p);
  }
  const std::vector<char> original = send;
  std::vector<char> recv = Blank(c.type, c.count);
  // Non-roots pass NULL: only the root's sendbuff is read.
  const braidResult_t rc = braidScatter(is_root ? send.data() : nullptr, recv.data(), c.count,
                                        c.type, c.root, comm, nullptr);
  if (rc != braidSuccess) return CallFailed(comm, rc);
  if (send != original) return "sendbuff was modified";
  std::string wrong = CheckBlock(c.type, recv.data(), 0, c.count, c.root, rank);
  return wrong.empty() ? CheckGuard(recv, "recvbuff") : wrong;
}

}  // namespace

const char* CollName(Coll coll) {
  switch (coll) {
    case Coll::kAllReduce: return "allreduce";
    case Coll::kBroadcast: return "broadcast";
    case Coll::kReduce: return "reduce";
    case Coll::kAllGather: return "allgather";
    case Coll::kReduceScatter: return "reducescatter";
    case Coll::kAllToAll: return "alltoall";
    case Coll::kGather: return "gather";
    case Coll::kScatter: return "scatter";
  }
  return "?";
}

bool Reduces(Coll coll) {
  return coll == Coll::kAllReduce || coll == Coll::kReduce || coll == Coll::kReduceScatter;
}

bool Rooted(Coll coll) {
  return coll == Coll::kBroadcast || coll == Coll::kReduce || coll == Coll::kGather ||
         coll == Coll::kScatter;
}

std::string Describe(const Call& call) {
  std::string s = std::string(CollName(call.coll)) + " " + TypeName(call.type);
  if (Reduces(call.coll)) s += std::string(" ") + OpName(call.op);
  s += " count " + std::to_string(call.count) + (call.in_place ? " in place" : " out of place");
  if (Rooted(call.coll)) s += " root " + std::to_string(call.root);
  return s;
}

std::string RunAndCheck(braidComm_t comm, int rank, int size, const Call& call) {
  std::string wrong;
  switch (call.coll) {
    case Coll::kAllReduce: wrong = AllReduce(comm, rank, size, call); break;
    case Coll::kBroadcast: wrong = Broadcast(comm, rank, size, call); break;
    case Coll::kReduce: wrong = Reduce(comm, rank, size, call); break;
    case Coll::kAllGather: wrong = AllGather(comm, rank, size, call); break;
    case Coll::kReduceScatter: wrong = ReduceScatter(comm, rank, size, call); break;
    case Coll::kAllToAll: wrong = AllToAll(comm, rank, size, call); break;
    case Coll::kGather: wrong = Gather(comm, rank, size, call); break;
    case Coll::kScatter: wrong = Scatter(comm, rank, size, call); break;
  }
  return wrong.empty() ? "" : Describe(call) + ": " + wrong;
}

}  // namespace braid::testing

// gloo_perf: nccl-tests' table for Gloo's collectives over its TCP transport (Debian's gloo 0.5.0,
// C++ API directly), float32 sum, host memory — braid's peer that PyTorch users know.
//
//   RANK=r WORLD_SIZE=n GLOO_STORE_DIR=/tmp/fresh_dir bench/peers/out/gloo_perf
//       --coll all_reduce --algo ring -b 8 -e 64M -f 4        (one process per rank)
//
// Ranks: RANK/WORLD_SIZE, or OMPI_COMM_WORLD_RANK/SIZE (so mpirun or braidrun can start it).
// Rendezvous: a gloo::rendezvous::FileStore in GLOO_STORE_DIR, which must be empty or absent and
// the same for every rank; without it, /tmp/gloo_perf_store.MASTER_ADDR.MASTER_PORT (as braidrun
// sets them; removed afterwards). Rank 0 empties the store once every rank is connected.
// Interface: GLOO_SOCKET_IFNAME, else address GLOO_HOSTNAME (default 127.0.0.1). Timeout:
// GLOO_TIMEOUT_S (default 300).
//
// --algo picks the allreduce (Gloo has several; `ring` is what torch's ProcessGroupGloo uses):
//   ring, bcube         gloo::allreduce (AllreduceOptions), out of place natively
//   ring_legacy, ring_chunked, hd, bcube_legacy
//                       the older algorithm objects (AllreduceRing, AllreduceRingChunked,
//                       AllreduceHalvingDoubling, AllreduceBcube), built once per row; in place
//                       only, so out of place each call first copies send into recv
// broadcast: gloo::broadcast; allgather: gloo::allgather (ring); reduce-scatter:
// ReduceScatterHalvingDoubling (Gloo's only one; in place, result at the buffer's start, so out
// of place copies send into recv first). reduce, gather, scatter, alltoall: gloo::reduce, gather,
// scatter, alltoall; sendrecv: unbound buffers to the next rank and from the previous one (what
// torch's ProcessGroupGloo does for send/recv). Those five are measured out of place only.
#include <dirent.h>
#include <sys/stat.h>

#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>

#include <map>

#include "bench/peers/peer_common.h"

namespace {

constexpr uint32_t kBenchTag = 0;
constexpr uint32_t kBookkeepingTag = 1;

const char kAlgos[] = "allreduce: ring (default), bcube, ring_legacy, ring_chunked, hd, bcube_legacy";

int EnvInt(const char* a, const char* b, int fallback) {
  const char* v = std::getenv(a);
  if (v == nullptr && b != nullptr) v = std::getenv(b);
  return v ? std::atoi(v) : fallback;
}

void EmptyDir(const std::string& dir) {
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) {
        std::remove((dir + "/" + e->d_name).c_str());
      }
    }
    closedir(d);
  }
}

class GlooBackend : public peers::Backend {
 public:
  explicit GlooBackend(const std::string& algo) : algo_(algo.empty() ? "ring" : algo) {
    static const char* kKnown[] = {"ring", "bcube", "ring_legacy", "ring_chunked", "hd",
                                   "bcube_legacy"};
    if (std::find_if(std::begin(kKnown), std::end(kKnown),
                     [&](const char* k) { return algo_ == k; }) == std::end(kKnown)) {
      throw std::invalid_argument("unknown --algo " + algo_ + " (" + kAlgos + ")");
    }
    const int rank = EnvInt("RANK", "OMPI_COMM_WORLD_RANK", -1);
    const int size = EnvInt("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", -1);
    if (rank < 0 || size < 1 || rank >= size) {
      throw std::invalid_argument("set RANK and WORLD_SIZE (0 <= RANK < WORLD_SIZE)");
    }
    std::string dir;
    bool derived = false;
    if (const char* d = std::getenv("GLOO_STORE_DIR")) {
      dir = d;
    } else if (const char* port = std::getenv("MASTER_PORT")) {
      const char* addr = std::getenv("MASTER_ADDR");
      dir = std::string("/tmp/gloo_perf_store.") + (addr ? addr : "local") + "." + port;
      derived = true;
    } else {
      throw std::invalid_argument("set GLOO_STORE_DIR to a fresh directory shared by all ranks");
    }
    mkdir(dir.c_str(), 0700);  // may exist already

    gloo::transport::tcp::attr attr;
    if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME")) {
      attr.iface = ifname;
    } else {
      const char* host = std::getenv("GLOO_HOSTNAME");
      attr.hostname = host ? host : "127.0.0.1";
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    context->setTimeout(std::chrono::seconds(EnvInt("GLOO_TIMEOUT_S", nullptr, 300)));
    context->connectFullMesh(store, device);
    context_ = context;
    Barrier();
    if (rank == 0) {  // every rank is connected: a later run with this directory starts clean
      EmptyDir(dir);
      if (derived) rmdir(dir.c_str());
    }
  }

  int Rank() const override { return context_->rank; }
  int Size() const override { return context_->size; }

  std::string Describe() const override {
    return peers::Printf("gloo=%d.%d.%d transport=tcp algo=%s", GLOO_VERSION_MAJOR,
                         GLOO_VERSION_MINOR, GLOO_VERSION_PATCH, algo_.c_str());
  }

  void Barrier() override {
    gloo::BarrierOptions opts(context_);
    opts.setTag(kBookkeepingTag);
    gloo::barrier(opts);
  }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override {
    gloo::AllgatherOptions opts(context_);
    opts.setInput(const_cast<char*>(static_cast<const char*>(in)), bytes);
    opts.setOutput(static_cast<char*>(out), bytes * context_->size);
    opts.setTag(kBookkeepingTag);
    gloo::allgather(opts);
  }

  void Prepare(peers::Coll c, const peers::Sizes& s, const float* /*send*/, float* recv,
               bool /*in_place*/, int /*root*/) override {
    legacy_.reset();
    if (s.param_count == 0) return;
    const std::vector<float*> ptrs{recv};
    if (c == peers::Coll::kReduceScatter) {
      const std::vector<int> counts(context_->size, static_cast<int>(s.recv_count));
      legacy_.reset(new gloo::ReduceScatterHalvingDoubling<float>(
          context_, ptrs, static_cast<int>(s.send_count), counts));
      return;
    }
    if (c != peers::Coll::kAllReduce) return;
    const int count = static_cast<int>(s.param_count);
    if (algo_ == "ring_legacy") legacy_.reset(new gloo::AllreduceRing<float>(context_, ptrs, count));
    if (algo_ == "ring_chunked") {
      legacy_.reset(new gloo::AllreduceRingChunked<float>(context_, ptrs, count));
    }
    if (algo_ == "hd") legacy_.reset(new gloo::AllreduceHalvingDoubling<float>(context_, ptrs, count));
    if (algo_ == "bcube_legacy") legacy_.reset(new gloo::AllreduceBcube<float>(context_, ptrs, count));
  }

  void Run(peers::Coll c, const peers::Sizes& s, const float* send, float* recv, bool in_place,
           int root) override {
    if (s.param_count == 0) return;  // nothing to move; Gloo rejects empty buffers
    float* in = const_cast<float*>(send);
    if (legacy_) {
      if (!in_place) std::memcpy(recv, send, s.send_count * sizeof(float));
      legacy_->run();
      return;
    }
    switch (c) {
      case peers::Coll::kAllReduce: {
        gloo::AllreduceOptions opts(context_);
        if (!in_place) opts.setInput(in, s.param_count);
        opts.setOutput(recv, s.param_count);
        opts.setAlgorithm(algo_ == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                           : gloo::AllreduceOptions::Algorithm::RING);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
        opts.setTag(kBenchTag);
        gloo::allreduce(opts);
        break;
      }
      case peers::Coll::kBroadcast: {
        gloo::BroadcastOptions opts(context_);
        if (!in_place && context_->rank == root) opts.setInput(in, s.param_count);
        opts.setOutput(recv, s.param_count);
        opts.setRoot(root);
        opts.setTag(kBenchTag);
        gloo::broadcast(opts);
        break;
      }
      case peers::Coll::kAllGather: {
        gloo::AllgatherOptions opts(context_);
        if (!in_place) opts.setInput(in, s.send_count);  // in place: recv + rank * count
        opts.setOutput(recv, s.recv_count);
        opts.setTag(kBenchTag);
        gloo::allgather(opts);
        break;
      }
      case peers::Coll::kReduceScatter:
        throw std::logic_error("reduce-scatter without its algorithm object");
      // Out of place only (peer_common.h refuses in place for these).
      case peers::Coll::kReduce: {
        gloo::ReduceOptions opts(context_);
        opts.setInput(in, s.param_count);
        opts.setOutput(recv, s.param_count);  // Gloo works in it on every rank
        opts.setRoot(root);
        opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(
            &gloo::sum<float>));
        opts.setTag(kBenchTag);
        gloo::reduce(opts);
        break;
      }
      case peers::Coll::kGather: {
        gloo::GatherOptions opts(context_);
        opts.setInput(in, s.send_count);
        if (context_->rank == root) opts.setOutput(recv, s.recv_count);
        opts.setRoot(root);
        opts.setTag(kBenchTag);
        gloo::gather(opts);
        break;
      }
      case peers::Coll::kScatter: {
        gloo::ScatterOptions opts(context_);
        if (context_->rank == root) {
          std::vector<float*> blocks;
          for (int k = 0; k < context_->size; ++k) blocks.push_back(in + k * s.recv_count);
          opts.setInputs(blocks, s.recv_count);
        }
        opts.setOutput(recv, s.recv_count);
        opts.setRoot(root);
        opts.setTag(kBenchTag);
        gloo::scatter(opts);
        break;
      }
      case peers::Coll::kAllToAll: {
        gloo::AlltoallOptions opts(context_);
        opts.setInput(in, s.send_count);
        opts.setOutput(recv, s.recv_count);
        opts.setTag(kBenchTag);
        gloo::alltoall(opts);
        break;
      }
      case peers::Coll::kSendRecv: {  // as ProcessGroupGloo's send/recv: unbound buffers
        const int n = context_->size, me = context_->rank;
        auto out = context_->createUnboundBuffer(in, s.send_count * sizeof(float));
        auto got = context_->createUnboundBuffer(recv, s.recv_count * sizeof(float));
        got->recv((me + n - 1) % n, kBenchTag);
        out->send((me + 1) % n, kBenchTag);
        out->waitSend();
        got->waitRecv();
        break;
      }
    }
  }

 private:
  std::string algo_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<gloo::Algorithm> legacy_;
};

}  // namespace

int main(int argc, char** argv) {
  peers::Options options;
  const int rc = peers::ParseOptions(argc, argv, &options, kAlgos);
  if (rc != 0) return rc == 1 ? 0 : rc;
  const char* rank = std::getenv("RANK");
  try {
    GlooBackend backend(options.algo);
    return peers::Driver(options, backend).Main();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "gloo_perf: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_perf: rank %s: %s\n", rank ? rank : "?", e.what());
    std::fflush(stderr);
    _exit(3);  // skip destructors that would wait on peers that are gone
  }
}

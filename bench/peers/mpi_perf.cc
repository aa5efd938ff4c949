// mpi_perf: nccl-tests' table for MPI's collectives (MPI_Allreduce, MPI_Bcast, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Reduce, MPI_Gather, MPI_Scatter, MPI_Alltoall, MPI_Sendrecv to
// the next rank), float32 sum, host memory — braid's peer on one host.
//
//   mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,vader
//       bench/peers/out/mpi_perf --coll all_reduce -b 8 -e 64M -f 4
//
// (--mca btl self,tcp for TCP.) Flags and output: bench/peers/peer_common.h.
#include <mpi.h>

#include "bench/peers/peer_common.h"

namespace {

class MpiBackend : public peers::Backend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int Rank() const override { return rank_; }
  int Size() const override { return size_; }

  std::string Describe() const override {
    char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string v(lib);
    v = v.substr(0, v.find_first_of(",\n"));  // "Open MPI v4.1.4"
    for (char& ch : v) if (ch == ' ') ch = '-';
    const char* btl = std::getenv("OMPI_MCA_btl");
    return peers::Printf("mpi=%s btl=%s", v.c_str(), btl ? btl : "(see mpirun --mca btl)");
  }

  void Barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

  void AllGatherBytes(const void* in, void* out, size_t bytes) override {
    MPI_Allgather(in, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE,
                  MPI_COMM_WORLD);
  }

  void Run(peers::Coll c, const peers::Sizes& s, const float* send, float* recv, bool in_place,
           int root) override {
    const int count = static_cast<int>(s.param_count);
    const void* sb = in_place ? MPI_IN_PLACE : static_cast<const void*>(send);
    int rc = MPI_SUCCESS;
    switch (c) {
      case peers::Coll::kAllReduce:
        rc = MPI_Allreduce(sb, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case peers::Coll::kBroadcast:
        // MPI's broadcast has one buffer: out of place, the root sends from its send buffer and
        // keeps its result there (no copy to recv is timed; see Result).
        rc = MPI_Bcast(!in_place && rank_ == root ? const_cast<float*>(send) : recv, count,
                       MPI_FLOAT, root, MPI_COMM_WORLD);
        break;
      case peers::Coll::kAllGather:
        rc = MPI_Allgather(sb, in_place ? 0 : count, MPI_FLOAT, recv, count, MPI_FLOAT,
                           MPI_COMM_WORLD);
        break;
      case peers::Coll::kReduceScatter:
        rc = MPI_Reduce_scatter_block(sb, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      // Out of place only (peer_common.h refuses in place for these).
      case peers::Coll::kReduce:
        rc = MPI_Reduce(send, recv, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD);
        break;
      case peers::Coll::kGather:
        rc = MPI_Gather(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, root, MPI_COMM_WORLD);
        break;
      case peers::Coll::kScatter:
        rc = MPI_Scatter(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, root, MPI_COMM_WORLD);
        break;
      case peers::Coll::kAllToAll:
        rc = MPI_Alltoall(send, count, MPI_FLOAT, recv, count, MPI_FLOAT, MPI_COMM_WORLD);
        break;
      case peers::Coll::kSendRecv:
        rc = MPI_Sendrecv(send, count, MPI_FLOAT, (rank_ + 1) % size_, 0, recv, count, MPI_FLOAT,
                          (rank_ + size_ - 1) % size_, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    }
    if (rc != MPI_SUCCESS) {
      std::fprintf(stderr, "mpi_perf: rank %d: MPI call failed (%d)\n", rank_, rc);
      MPI_Abort(MPI_COMM_WORLD, 3);
    }
  }

  const float* Result(peers::Coll c, const peers::Sizes& s, const float* send, const float* recv,
                      bool in_place, int rank, int root) const override {
    if (c == peers::Coll::kBroadcast && !in_place && rank == root) return send;
    return peers::Backend::Result(c, s, send, recv, in_place, rank, root);
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  peers::Options options;
  int rc = peers::ParseOptions(argc, argv, &options, "(ignored: MPI picks its own algorithms)");
  if (rc == 0) {
    MpiBackend backend;
    rc = peers::Driver(options, backend).Main();
  } else if (rc == 1) {
    rc = 0;
  }
  MPI_Finalize();
  return rc;
}

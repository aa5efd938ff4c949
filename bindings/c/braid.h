/* braid: collective communication for host and CUDA buffers.
 *
 * This header follows nccl.h on purpose: a framework that speaks NCCL switches by changing the
 * prefix. Every call returns a braidResult_t; on failure braidGetLastError() says what went wrong,
 * naming the argument, the rank or the peer. No call aborts the process on bad input. */
#ifndef BRAID_H_
#define BRAID_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BRAID_MAJOR 0
#define BRAID_MINOR 1
#define BRAID_PATCH 0
/* Same encoding as NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch. */
#define BRAID_VERSION_CODE (BRAID_MAJOR * 10000 + BRAID_MINOR * 100 + BRAID_PATCH)

typedef struct braidComm* braidComm_t;
typedef void* braidStream_t; /* a cudaStream_t for device buffers; NULL for host buffers */

#define BRAID_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braidUniqueId;

#define BRAID_SPLIT_NOCOLOR (-1)

typedef enum {
  braidSuccess = 0,
  braidUnhandledCudaError = 1,
  braidSystemError = 2,
  braidInternalError = 3,
  braidInvalidArgument = 4,
  braidInvalidUsage = 5,
  braidRemoteError = 6,
  braidInProgress = 7,
  braidTimeout = 8,
  braidAborted = 9,
  braidNumResults = 10
} braidResult_t;

typedef enum {
  braidInt8 = 0,
  braidChar = 0,
  braidUint8 = 1,
  braidInt32 = 2,
  braidInt = 2,
  braidUint32 = 3,
  braidInt64 = 4,
  braidUint64 = 5,
  braidFloat16 = 6,
  braidHalf = 6,
  braidFloat32 = 7,
  braidFloat = 7,
  braidFloat64 = 8,
  braidDouble = 8,
  braidBfloat16 = 9,
  braidNumTypes = 10
} braidDataType_t;

typedef enum {
  braidSum = 0,
  braidProd = 1,
  braidMax = 2,
  braidMin = 3,
  braidAvg = 4,
  braidNumOps = 5
} braidRedOp_t;

/* Per-communicator settings. Start from BRAID_CONFIG_INITIALIZER: a field left at
 * BRAID_CONFIG_UNDEF_INT / BRAID_CONFIG_UNDEF_PTR takes the environment's value (then the
 * built-in default). size/magic/version let later versions of braid grow the struct. */
#define BRAID_CONFIG_UNDEF_INT INT_MIN
#define BRAID_CONFIG_UNDEF_PTR NULL
#define BRAID_CONFIG_MAGIC 0xB7A1DC0Fu

typedef struct braidConfig {
  size_t size;           /* sizeof(braidConfig_t) */
  unsigned int magic;    /* BRAID_CONFIG_MAGIC */
  unsigned int version;  /* BRAID_VERSION_CODE */
  int timeoutMs;         /* BRAID_TIMEOUT_MS: deadline of every blocking wait */
  int chunkBytes;        /* BRAID_CHUNK_BYTES: pipelining unit of ring algorithms */
  const char* socketIfname; /* BRAID_SOCKET_IFNAME: NCCL syntax, e.g. "eth", "^docker", "=eth0" */
  const char* transports;   /* BRAID_TRANSPORTS: e.g. "tcp", "^shm" */
  int checkMode;         /* BRAID_CHECK: 1 = compare op, type, count and root across ranks first */
  int splitShare;        /* BRAID_COMM_SPLIT_SHARE_RESOURCES: 1 = braidCommSplit's child uses the
                            parent's links; the two then take turns (issue their operations in
                            the same order on every rank), as with NCCL's splitShare */
  const char* algo;      /* BRAID_ALGO: which algorithms this communicator may use, in BRAID_ALGO's
                            syntax ("allreduce:tree;broadcast:ring", "^ring"; docs/ALGORITHMS.md).
                            Replaces the environment's whole value ("" = no constraint, the cost
                            model picks); must be the same on every rank. The string is read during
                            the call that takes the config and need not outlive it. A struct
                            from a header older than this field (its size ends before it)
                            takes the environment's value. */
} braidConfig_t;

#define BRAID_CONFIG_INITIALIZER                                                          \
  {                                                                                       \
    sizeof(braidConfig_t), BRAID_CONFIG_MAGIC, BRAID_VERSION_CODE, BRAID_CONFIG_UNDEF_INT, \
        BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_PTR, BRAID_CONFIG_UNDEF_PTR,           \
        BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_PTR            \
  }

braidResult_t braidGetVersion(int* version);
const char* braidGetErrorString(braidResult_t result);
/* The last error message for `comm`, or this thread's last error if comm is NULL (for calls
 * that have no communicator yet, such as braidCommInitRank). Never NULL. */
const char* braidGetLastError(braidComm_t comm);

/* Rank 0 calls it (it starts a store server in this process) and shares the bytes. */
braidResult_t braidGetUniqueId(braidUniqueId* uniqueId);
braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank);
braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId,
                                      int rank, braidConfig_t* config);
/* env:// — MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (torchrun, braidrun), else SLURM_*, else OMPI_*. */
braidResult_t braidCommInitEnv(braidComm_t* comm, braidConfig_t* config);
braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm,
                             braidConfig_t* config);
braidResult_t braidCommFinalize(braidComm_t comm);
braidResult_t braidCommDestroy(braidComm_t comm);
braidResult_t braidCommAbort(braidComm_t comm);
braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError);
braidResult_t braidCommCount(const braidComm_t comm, int* count);
braidResult_t braidCommUserRank(const braidComm_t comm, int* rank);
braidResult_t braidCommCuDevice(const braidComm_t comm, int* device); /* -1: host-only comm */

braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                             braidStream_t stream);
braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, int root, braidComm_t comm,
                             braidStream_t stream);
braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count,
                          braidDataType_t datatype, braidRedOp_t op, int root, braidComm_t comm,
                          braidStream_t stream);
braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             braidDataType_t datatype, braidComm_t comm, braidStream_t stream);
braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                 braidStream_t stream);
braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count /* per peer */,
                            braidDataType_t datatype, braidComm_t comm, braidStream_t stream);
braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                          braidDataType_t datatype, int root, braidComm_t comm,
                          braidStream_t stream);
braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           braidDataType_t datatype, int root, braidComm_t comm,
                           braidStream_t stream);
braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer,
                        braidComm_t comm, braidStream_t stream);
braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                        braidComm_t comm, braidStream_t stream);
braidResult_t braidBarrier(braidComm_t comm, braidStream_t stream);
braidResult_t braidGroupStart(void);
braidResult_t braidGroupEnd(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRAID_H_ */

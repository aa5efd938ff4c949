/* braid: collective communication for host and CUDA buffers.
 *
 * This header follows nccl.h on purpose: a framework that speaks NCCL switches by changing the
 * prefix. Every call returns a braidResult_t; on failure braidGetLastError() says what went wrong,
 * naming the argument, the rank or the peer. No call aborts the process on bad input.
 *
 * Rules that hold for every call below (each call's comment adds its own):
 *
 * Buffers and streams. Host buffers take stream = NULL: the call returns when its work is
 *   complete on this rank (recvbuff holds the result; sendbuff may be reused). Device buffers
 *   (cudaMalloc or managed memory; a library linked with braid_cuda) take a cudaStream_t, or
 *   NULL for the legacy default stream as in NCCL: the call enqueues the work after everything
 *   already on that stream and returns without waiting for device work; the work runs on the
 *   communicator's own stream, and the caller's stream waits for it (events join the two), so
 *   later work on the stream sees the result. Every rank must enqueue the same operations in the
 *   same order. Ranks that are threads of one process must not share a stream (NULL included):
 *   one rank's wait would hold up the other's enqueue. A host-buffer call on a communicator with
 *   device work queued first waits for that work. Host and device buffers in one call are
 *   braidInvalidArgument; a stream with host buffers, or a stream being captured into a CUDA
 *   graph ("capture is not supported yet"), is braidInvalidUsage. An error inside device work (a
 *   lost peer, a timeout) breaks the communicator as a host operation's would: the stream is
 *   released (the outputs are then undefined) and braidCommGetAsyncError reports it; after
 *   braidCommAbort no stream stays blocked on the communicator. braidRecvAny takes host buffers
 *   only.
 *
 * Counts are elements of `datatype`, never bytes. Each collective says whether its count is the
 *   whole buffer or one rank's share. A collective with count = 0 is legal and returns
 *   braidSuccess at once (nothing is sent; the buffers may be NULL); a Send/Recv of 0 elements
 *   is still a message its peer must match. A count whose byte size overflows size_t is
 *   braidInvalidArgument. Every rank must pass the same count, datatype, op and root (set
 *   BRAID_CHECK=1 / config.checkMode to have ranks compare them first and name a mismatch).
 *
 * In place. Every collective works out of place (separate buffers that do not overlap) and in
 *   place, with NCCL's layouts: sendbuff == recvbuff for AllReduce, Broadcast, Reduce and
 *   AllToAll; sendbuff == recvbuff + rank * sendcount (elements) for AllGather and Gather (this
 *   rank's block already sits in its place in the result); recvbuff == sendbuff + rank * recvcount
 *   for ReduceScatter and Scatter (the result lands in this rank's block of the input). Any other
 *   overlap of the two buffers is undefined.
 *
 * Roots and peers are ranks of `comm`, in [0, nranks); anything else is braidInvalidArgument.
 *   braidAvg divides the sum by nranks once; integer types truncate toward zero. Integer sums
 *   and products wrap.
 *
 * Threads. A communicator runs its operations one at a time, in the order its calls take its
 *   lock: calls on one communicator from several threads are safe (they serialize), but every
 *   rank must issue the same collectives in the same order, so the application must order them.
 *   braidCommAbort, braidCommGetAsyncError, braidCommCount, braidCommUserRank,
 *   braidCommCuDevice and braidGetLastError may be called from any thread while an operation
 *   runs. Different communicators are independent and may run at the same time on different
 *   threads, except a parent and the children split from it with splitShare, which share links
 *   and take turns (issue their operations in the same order on every rank). braidCommDestroy
 *   must not race any other call on the same communicator. Group state is per thread.
 *
 * Errors. A call refused for bad input (braidInvalidArgument / braidInvalidUsage) sends nothing.
 *   On a communicator of more than one rank, a collective, Send or Recv refused so breaks it: its
 *   peers may already be inside that call and would wait for this rank, so every rank's error
 *   then names this rank and its input first ("rank 2 failed on bad input at allreduce #5
 *   (invalid argument): ..."), with the refusal's code. A communicator of one rank, braidRecvAny
 *   and a mismatch that BRAID_CHECK finds (every rank finds it at once; the message leads with
 *   the odd rank out) stay usable. A failure with data in flight (a lost peer:
 *   braidRemoteError; a deadline: braidTimeout; braidCommAbort: braidAborted) breaks the
 *   communicator: no buffer is written after the failing call returns, braidCommGetAsyncError
 *   reports the error, and every later operation on it fails at once with the same code and
 *   message. Destroy it (and, with the other ranks, make a new one).
 *   The message leads with the root cause, the rank that failed first, on every rank (also those
 *   that only lost a link to a neighbour that gave up because of it): "rank 2 is gone (seen by
 *   rank 1); rank 0's own view: ...", "rank 3 aborted (braidCommAbort called by the
 *   application); ...", "rank 1 did not answer at allreduce #7 (frozen or gone?) ...". The code
 *   follows the root cause: braidRemoteError for a rank that is gone, braidAborted for one whose
 *   application aborted, braidTimeout for a stall, the refusal's code for bad input
 *   (docs/FAILURES.md). */
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
  int shmSingleCopyBytes; /* BRAID_SHM_SINGLE_COPY_BYTES: messages of at least this many bytes
                            between ranks of one host in different processes are copied once,
                            straight out of the sender's buffer (process_vm_readv), instead of
                            twice through the shared ring; 0 = never. Undefined: the environment,
                            else the calibration file's measured choice (docs/ALGORITHMS.md). */
  int deviceChunkBytes;  /* BRAID_DEVICE_CHUNK_BYTES: device buffers are staged through pinned host
                            memory in steps of at most this many bytes, pipelined so copies
                            overlap the wire; 0 = the whole message in one step. Must be the same
                            on every rank (docs/CUDA.md). */
  const char* deviceAlgo; /* BRAID_DEVICE_ALGO: "direct" (the default) runs device-buffer allreduce,
                            reduce, allgather, broadcast and reducescatter in device memory end to
                            end where all ranks are on one host and cuda_ipc is allowed; "staged"
                            stages them through pinned host memory like the rest (docs/CUDA.md).
                            Must be the same on every rank. */
} braidConfig_t;

#define BRAID_CONFIG_INITIALIZER                                                          \
  {                                                                                       \
    sizeof(braidConfig_t), BRAID_CONFIG_MAGIC, BRAID_VERSION_CODE, BRAID_CONFIG_UNDEF_INT, \
        BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_PTR, BRAID_CONFIG_UNDEF_PTR,           \
        BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_PTR,           \
        BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_INT, BRAID_CONFIG_UNDEF_PTR            \
  }

/* *version = BRAID_VERSION_CODE of the library (compare with the header's to catch a mismatch). */
braidResult_t braidGetVersion(int* version);
/* A fixed description of `result` (not of the failure: see braidGetLastError). The string is
 * static: valid for the life of the process. Unknown codes give "unknown result code". */
const char* braidGetErrorString(braidResult_t result);
/* The message of the last failure, naming the argument, rank, peer or operation. Never NULL;
 * "" before any failure. Successful calls do not clear it (as NCCL).
 * - comm live: the last failure of a call on `comm`, from whichever thread made it. The pointer
 *   stays valid until the next failing call on `comm` (from any thread) or braidCommDestroy(comm).
 * - comm NULL, destroyed or never created: the last failure of any braid call on this thread
 *   (calls without a communicator, such as braidCommInitRank, report here only). The pointer
 *   stays valid until this thread's next failing braid call, or until the thread exits.
 * Copy the text if other threads may fail on the same communicator meanwhile. */
const char* braidGetLastError(braidComm_t comm);

/* Rank 0 calls it (it starts a store server in this process) and shares the bytes with the
 * other ranks by any means (they are plain bytes: a file, MPI_Bcast, an environment variable).
 * Keep that process alive while communicators made from the id are in use: their
 * initialization, braidCommSplit and hang diagnosis go through its store. */
braidResult_t braidGetUniqueId(braidUniqueId* uniqueId);
/* Every rank calls it once with the same nranks and commId and its own rank in [0, nranks).
 * Blocks until all nranks ranks have arrived (or the deadline, BRAID_TIMEOUT_MS / config
 * timeoutMs, expires: braidTimeout naming the missing ranks). On failure *comm is NULL. The
 * calls of different ranks may come from different processes or from threads of one process. */
braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId commId, int rank);
/* braidCommInitRank with settings; config may be NULL (all defaults). The config is read during
 * the call only. */
braidResult_t braidCommInitRankConfig(braidComm_t* comm, int nranks, braidUniqueId commId,
                                      int rank, braidConfig_t* config);
/* env:// — MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE (torchrun, braidrun), else SLURM_*, else OMPI_*.
 * Rank 0 hosts the store unless the launcher already does. A process may create several env://
 * communicators: the k-th call of each rank joins the k-th of every other rank, so every rank
 * must make them in the same order. config may be NULL. Blocks as braidCommInitRank. */
braidResult_t braidCommInitEnv(braidComm_t* comm, braidConfig_t* config);
/* NCCL's ncclCommSplit: collective over `comm` (every rank of it calls it). Ranks passing the
 * same color >= 0 form a new communicator, ranked by key, then by rank in `comm`; a rank passing
 * BRAID_SPLIT_NOCOLOR takes part and gets *newcomm = NULL. config NULL inherits comm's settings;
 * with splitShare the child uses comm's links and the two take turns (see Threads above). Not
 * allowed between braidGroupStart and braidGroupEnd (braidInvalidUsage). */
braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm,
                             braidConfig_t* config);
/* Completes outstanding work (host operations are complete already) and refuses new operations
 * (braidInvalidUsage). Returns the error that broke the communicator, if one did. The handle
 * stays valid until braidCommDestroy. Local: it does not wait for the other ranks. */
braidResult_t braidCommFinalize(braidComm_t comm);
/* Frees the communicator and its handle. Local: it does not wait for the other ranks. Call it
 * once, after braidCommFinalize or braidCommAbort as with NCCL, with no other call on `comm`
 * running. Afterwards the handle is dead: a call with it returns braidInvalidUsage, and
 * braidGetLastError(comm) gives this thread's message -- until a communicator created later
 * happens to get the same address from the allocator, which makes that value live again. */
braidResult_t braidCommDestroy(braidComm_t comm);
/* Breaks the communicator now, from any thread: every blocked wait of `comm` returns
 * braidAborted at once and later operations fail at once. The handle still needs
 * braidCommDestroy. Local: it waits for no other rank. Before its links close it records "rank R
 * aborted" in the store and says so on each open link, so the other ranks' operations with this
 * one fail with braidAborted and a message that starts "rank R aborted (braidCommAbort called
 * by the application)", not with a lost connection. */
braidResult_t braidCommAbort(braidComm_t comm);
/* *asyncError = braidSuccess while the communicator is healthy; otherwise the code of the error
 * that broke it, the root cause's code (its message, the failing call's: braidGetLastError(comm),
 * which this call leaves as it is). Never blocks; any thread. Host
 * operations complete inside their calls, so braidInProgress is not returned today. */
braidResult_t braidCommGetAsyncError(braidComm_t comm, braidResult_t* asyncError);
/* nranks of the communicator. */
braidResult_t braidCommCount(const braidComm_t comm, int* count);
/* This process's rank in the communicator, in [0, nranks). */
braidResult_t braidCommUserRank(const braidComm_t comm, int* rank);
/* The CUDA device the communicator's device work runs on, from its first call with device
 * buffers on; -1 before that (a host-only communicator). */
braidResult_t braidCommCuDevice(const braidComm_t comm, int* device);

/* ---- Buffer registration (ncclCommRegister / ncclCommDeregister) ----
 * Registers [buff, buff + size) with comm for zero-copy use by peers on this host, and returns an
 * opaque handle in *handle. A device buffer (cudaMalloc memory of the communicator's device) is
 * exported with cudaIpcGetMemHandle of its allocation's base plus the buffer's offset; the export
 * is cached per allocation and communicator, so registering many slices of one allocation asks
 * CUDA once. Host memory, and every buffer in a process without a device, is recorded only (there
 * is nothing to export). Keep the buffer allocated until it is deregistered. Registering the same
 * range twice gives two handles, each deregistered once. Never blocks on other ranks; any thread.
 * Errors: braidInvalidArgument for buff NULL, size 0, handle NULL, a device range that runs past
 * its allocation, or memory CUDA cannot export (e.g. cuMemCreate's or a pool's), naming which;
 * braidInvalidUsage for a destroyed communicator. *handle is NULL after a failure. */
braidResult_t braidCommRegister(const braidComm_t comm, void* buff, size_t size, void** handle);
/* Releases a registration. braidInvalidArgument for NULL, a handle another communicator gave,
 * or one already deregistered. */
braidResult_t braidCommDeregister(const braidComm_t comm, void* handle);

/* ---- Collectives. Every rank of comm calls each one, in the same order (see the head of this
 * file for counts, in-place layouts, streams, threads and errors). ---- */

/* Reduces count elements (each rank's whole sendbuff) with op; every rank gets the result in
 * recvbuff (count elements). In place: sendbuff == recvbuff. */
braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                             braidStream_t stream);
/* Copies root's sendbuff (count elements) into every rank's recvbuff, root's own included.
 * Only the root reads sendbuff: other ranks may pass NULL. In place: sendbuff == recvbuff. */
braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             braidDataType_t datatype, int root, braidComm_t comm,
                             braidStream_t stream);
/* Reduces every rank's sendbuff (count elements) with op into root's recvbuff (count
 * elements). Only the root writes recvbuff: other ranks may pass NULL, and theirs is untouched.
 * In place: sendbuff == recvbuff. */
braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count,
                          braidDataType_t datatype, braidRedOp_t op, int root, braidComm_t comm,
                          braidStream_t stream);
/* Each rank contributes sendcount elements; every rank's recvbuff (nranks * sendcount
 * elements) receives them in rank order, rank r's at offset r * sendcount.
 * In place: sendbuff == recvbuff + rank * sendcount. */
braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             braidDataType_t datatype, braidComm_t comm, braidStream_t stream);
/* sendbuff holds nranks * recvcount elements on every rank. They are reduced with op, and
 * rank r receives block r of the result (elements [r * recvcount, (r + 1) * recvcount)) in its
 * recvbuff (recvcount elements). In place: recvbuff == sendbuff + rank * recvcount. */
braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                 braidStream_t stream);
/* Block j of rank i's sendbuff (count elements at offset j * count) lands as block i of rank
 * j's recvbuff. Both buffers hold nranks * count elements; count is per peer.
 * In place: sendbuff == recvbuff. */
braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count /* per peer */,
                            braidDataType_t datatype, braidComm_t comm, braidStream_t stream);
/* Each rank sends sendcount elements; root's recvbuff (nranks * sendcount elements) receives
 * rank r's at offset r * sendcount. Only the root writes recvbuff: other ranks may pass NULL.
 * In place (on the root): sendbuff == recvbuff + root * sendcount. */
braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                          braidDataType_t datatype, int root, braidComm_t comm,
                          braidStream_t stream);
/* root's sendbuff holds nranks * recvcount elements; rank r receives block r (offset
 * r * recvcount) in its recvbuff (recvcount elements). Only the root reads sendbuff: other
 * ranks may pass NULL. In place (on the root): recvbuff == sendbuff + root * recvcount. */
braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           braidDataType_t datatype, int root, braidComm_t comm,
                           braidStream_t stream);
/* ---- Point to point ----
 * braidSend's count elements go to rank `peer`, which must post a braidRecv from this rank with
 * the same count and datatype (a size mismatch fails both sides). Sends and receives between
 * a pair match in issue order. Outside a group each call returns when its transfer is complete,
 * so a Send may wait for its matching Recv: when two ranks exchange, put both calls in one
 * braidGroupStart/End, which posts them together and never deadlocks. peer may be this rank
 * only inside a group. */
braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype, int peer,
                        braidComm_t comm, braidStream_t stream);
braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                        braidComm_t comm, braidStream_t stream);
/* Returns on each rank once every rank of comm has called it. */
braidResult_t braidBarrier(braidComm_t comm, braidStream_t stream);
/* ---- Groups (NCCL's ncclGroupStart / ncclGroupEnd) ----
 * Between braidGroupStart and the matching braidGroupEnd, collective and point-to-point calls
 * only check their arguments (errors are returned at once) and are queued on this thread; they
 * run at the outermost braidGroupEnd (groups nest). There, for each communicator, all queued
 * Send/Recv are posted together (matched pairs never deadlock, whatever their order) and then
 * its collectives run in issue order; several communicators in one group run at the same time,
 * one thread each. braidGroupEnd returns when everything has completed, with the first error
 * (its message also in braidGetLastError of that communicator). Buffers must stay valid until
 * then. Groups are per thread: calls made on other threads are not part of this one. Device
 * buffers: braidGroupEnd enqueues and returns; one communicator's calls may name several streams,
 * and then (as in NCCL) its work runs after everything queued so far on each of them, and each
 * waits for all of it. */
braidResult_t braidGroupStart(void);
/* braidInvalidUsage without a matching braidGroupStart on this thread. */
braidResult_t braidGroupEnd(void);
/* ---- Receive from any rank (MPI_ANY_SOURCE; c10d's recvAnysource) ---- */
/* Receives `count` elements of `datatype` into `recvbuff` from whichever rank's next
 * point-to-point message arrives first (MPI_ANY_SOURCE); `*peer` is set to the sender's rank.
 * It matches the sender's next braidSend to this rank in that pair's order, like braidRecv
 * would. A message of another size fails with braidInvalidUsage naming both sizes and the
 * sender (as braidRecv's size mismatch does). Host buffers only (stream must be NULL). Not
 * allowed inside braidGroupStart/braidGroupEnd (braidInvalidUsage). Waits up to the
 * communicator's timeout; abort fails it like braidRecv. A rank that exited (or whose link
 * was lost) after sending is still a sender until every message it sent before has been
 * received, as with braidRecv from it; once nothing of it is left it cannot be the sender.
 * More precisely: ranks are polled in turn, starting after the one served last, so no sender
 * starves the others. The message of another size is not received: it stays, and a later
 * braidRecvAny or braidRecv of its size gets it; the communicator stays usable. A rank whose
 * next message to this one belongs to a collective this rank has not entered yet cannot be the
 * sender; if that holds for every other rank the call fails with braidInvalidUsage (it could
 * only wait out the timeout), or with braidRemoteError naming each lost rank if any is lost. `*peer` is -1 after any failure (peer NULL: braidInvalidArgument).
 * A communicator of one rank has nobody to receive from (braidInvalidUsage). */
braidResult_t braidRecvAny(void* recvbuff, size_t count, braidDataType_t datatype, int* peer,
                           braidComm_t comm, braidStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRAID_H_ */

// VerbsApi: braid's own table of exactly the libibverbs functions the verbs transport calls.
//
// Why a table: braid must load and run on hosts without libibverbs (most of them), so the
// library is opened with dlopen at run time instead of being linked (as NCCL's ibvsymbols does),
// and tests can put a software model of these calls in its place (tests/transport/ibverbs/
// verbs_model.h). The transport never calls an ibv_* function directly, and never calls one of
// verbs.h's inline helpers on an object the table made: only through this table.
//
// Contract: every member has the signature and semantics of the libibverbs function of the same
// name (man ibv_post_send, ibv_poll_cq, ...): return values and errno as documented there. The
// table is immutable once made and shared by every thread.
#pragma once

#include <infiniband/verbs.h>

#include "core/base/status.h"

namespace braid::transport::ibverbs {

struct VerbsApi {
  // Where the functions come from, for logs and errors: "libibverbs.so.1", or the model's name.
  const char* source = "";
  ibv_device** (*get_device_list)(int* num_devices) = nullptr;
  void (*free_device_list)(ibv_device** list) = nullptr;
  const char* (*get_device_name)(ibv_device* device) = nullptr;
  ibv_context* (*open_device)(ibv_device* device) = nullptr;
  int (*close_device)(ibv_context* context) = nullptr;
  int (*query_device)(ibv_context* context, ibv_device_attr* device_attr) = nullptr;
  int (*query_port)(ibv_context* context, uint8_t port_num, ibv_port_attr* port_attr) = nullptr;
  int (*query_gid)(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) = nullptr;
  ibv_pd* (*alloc_pd)(ibv_context* context) = nullptr;
  int (*dealloc_pd)(ibv_pd* pd) = nullptr;
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
  int (*dereg_mr)(ibv_mr* mr) = nullptr;
  ibv_cq* (*create_cq)(ibv_context* context, int cqe, void* cq_context,
                       ibv_comp_channel* channel, int comp_vector) = nullptr;
  int (*destroy_cq)(ibv_cq* cq) = nullptr;
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* init_attr) = nullptr;
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) = nullptr;
  int (*destroy_qp)(ibv_qp* qp) = nullptr;
  int (*post_send)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = nullptr;
  int (*post_recv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = nullptr;
  int (*poll_cq)(ibv_cq* cq, int num_entries, ibv_wc* wc) = nullptr;
  const char* (*wc_status_str)(ibv_wc_status status) = nullptr;
};

// The table the transport uses: the one installed by UseVerbsApiForTesting if any, else
// libibverbs.so.1 opened with dlopen (once per process). Errors (kSystemError): the library is
// absent ("libibverbs.so.1 not found: ...") or lacks a function (named). Thread-safe.
Result<const VerbsApi*> ActiveVerbsApi();

// Tests only: makes `api` (a model of the verbs calls) the table every verbs transport created
// from now on uses; nullptr goes back to libibverbs. Production code never calls it, so the
// model is never picked silently. Call before creating transports (not synchronised with them).
void UseVerbsApiForTesting(const VerbsApi* api);

// Whether a table installed by UseVerbsApiForTesting is in use.
bool UsingVerbsApiForTesting();

}  // namespace braid::transport::ibverbs

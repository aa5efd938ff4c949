#include "transport/ibverbs/verbs_api.h"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

namespace braid::transport::ibverbs {
namespace {

std::atomic<const VerbsApi*> testing_api{nullptr};

// ibv_post_send, ibv_post_recv and ibv_poll_cq are inline in verbs.h (they jump through the
// context's provider table, no library symbol), so the real table calls the inline helpers.
int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) {
  return ibv_post_send(qp, wr, bad_wr);
}
int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) {
  return ibv_post_recv(qp, wr, bad_wr);
}
int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) { return ibv_poll_cq(cq, num_entries, wc); }

template <typename Fn>
bool Bind(void* library, const char* symbol, Fn* slot, std::string* missing) {
  void* found = dlsym(library, symbol);
  if (found == nullptr) {
    if (!missing->empty()) *missing += ", ";
    *missing += symbol;
    return false;
  }
  *slot = reinterpret_cast<Fn>(found);
  return true;
}

// Opens libibverbs once; the handle is kept for the life of the process (the provider
// libraries it loads must stay mapped while any verbs object lives).
Result<const VerbsApi*> LoadSystemVerbs() {
  static VerbsApi api;
  static std::string error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* library = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      const char* why = dlerror();
      error = std::string("libibverbs.so.1 could not be loaded: ") + (why ? why : "unknown");
      return;
    }
    std::string missing;
    api.source = "libibverbs.so.1";
    Bind(library, "ibv_get_device_list", &api.get_device_list, &missing);
    Bind(library, "ibv_free_device_list", &api.free_device_list, &missing);
    Bind(library, "ibv_get_device_name", &api.get_device_name, &missing);
    Bind(library, "ibv_open_device", &api.open_device, &missing);
    Bind(library, "ibv_close_device", &api.close_device, &missing);
    Bind(library, "ibv_query_device", &api.query_device, &missing);
    Bind(library, "ibv_query_port", &api.query_port, &missing);
    Bind(library, "ibv_query_gid", &api.query_gid, &missing);
    Bind(library, "ibv_alloc_pd", &api.alloc_pd, &missing);
    Bind(library, "ibv_dealloc_pd", &api.dealloc_pd, &missing);
    Bind(library, "ibv_reg_mr", &api.reg_mr, &missing);
    Bind(library, "ibv_dereg_mr", &api.dereg_mr, &missing);
    Bind(library, "ibv_create_cq", &api.create_cq, &missing);
    Bind(library, "ibv_destroy_cq", &api.destroy_cq, &missing);
    Bind(library, "ibv_create_qp", &api.create_qp, &missing);
    Bind(library, "ibv_modify_qp", &api.modify_qp, &missing);
    Bind(library, "ibv_destroy_qp", &api.destroy_qp, &missing);
    Bind(library, "ibv_wc_status_str", &api.wc_status_str, &missing);
    api.post_send = &PostSend;
    api.post_recv = &PostRecv;
    api.poll_cq = &PollCq;
    if (!missing.empty()) error = "libibverbs.so.1 lacks " + missing;
  });
  if (!error.empty()) return Status::SystemError(error);
  return &api;
}

}  // namespace

Result<const VerbsApi*> ActiveVerbsApi() {
  const VerbsApi* installed = testing_api.load(std::memory_order_acquire);
  if (installed != nullptr) return installed;
  return LoadSystemVerbs();
}

void UseVerbsApiForTesting(const VerbsApi* api) {
  testing_api.store(api, std::memory_order_release);
}

bool UsingVerbsApiForTesting() { return testing_api.load(std::memory_order_acquire) != nullptr; }

}  // namespace braid::transport::ibverbs

// A rank for braidrun_test: joins the store braidrun hosts (MASTER_ADDR, MASTER_PORT,
// BRAID_SECRET), counts itself in, waits for everyone at a barrier, and prints what it saw.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/base/deadline.h"
#include "rendezvous/tcp_store_client.h"

int main() {
  using braid::Deadline;
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  const char* secret = std::getenv("BRAID_SECRET");
  const char* rank = std::getenv("RANK");
  const char* world = std::getenv("WORLD_SIZE");
  if (!addr || !port || !secret || !rank || !world) {
    std::fprintf(stderr, "missing environment\n");
    return 3;
  }
  Deadline deadline = Deadline::AfterMs(20000);
  auto store = braid::rendezvous::TcpStoreClient::Connect(addr, std::atoi(port), secret, deadline);
  if (!store.ok()) {
    std::fprintf(stderr, "connect: %s\n", store.status().ToString().c_str());
    return 4;
  }
  auto joined = (*store)->Add("joined", 1, deadline);
  braid::Status barrier = (*store)->Barrier("start", std::atoi(world), deadline);
  auto total = (*store)->Get("joined", deadline);
  if (!joined.ok() || !barrier.ok() || !total.ok()) {
    std::fprintf(stderr, "store: %s %s\n", barrier.ToString().c_str(),
                 joined.status().ToString().c_str());
    return 5;
  }
  std::printf("rank %s of %s saw %s joined\n", rank, world, total.value().c_str());
  return 0;
}

// RequestPool (transport/request_pool.h): a request comes back only once it is done and nobody
// but the pool holds it, and it comes back as new (pending, OK, completable again).
#include "transport/request_pool.h"

#include <catch2/catch.hpp>

#include <memory>
#include <vector>

using braid::Code;
using braid::Status;
using braid::transport::Request;
using braid::transport::RequestPool;
using braid::transport::RequestPtr;

namespace {

int made = 0;

RequestPtr Make() {
  ++made;
  return std::make_shared<Request>();
}

}  // namespace

TEST_CASE("request pool: a finished, released request is reused and reset", "[transport]") {
  RequestPool pool;
  made = 0;
  RequestPtr first = pool.Acquire(Make);
  Request* const address = first.get();
  first->Complete(Status::RemoteError("peer lost"));
  first.reset();
  RequestPtr again = pool.Acquire(Make);
  CHECK(again.get() == address);
  CHECK(made == 1);
  // Reused after a failure: pending again, without the old status, and completable once more.
  CHECK_FALSE(again->IsDone());
  CHECK(again->status().ok());
  again->Complete(Status::Ok());
  CHECK(again->IsDone());
  CHECK(again->status().ok());
  again->Complete(Status::Timeout("ignored: the first completion wins"));
  CHECK(again->status().ok());
}

TEST_CASE("request pool: a request someone still holds is not reused", "[transport]") {
  RequestPool pool;
  made = 0;
  RequestPtr held = pool.Acquire(Make);
  held->Complete(Status::Aborted("done but still held"));
  RequestPtr other = pool.Acquire(Make);
  CHECK(other.get() != held.get());
  CHECK(made == 2);
  // The held one kept its outcome.
  CHECK(held->IsDone());
  CHECK(held->status().code() == Code::kAborted);
}

TEST_CASE("request pool: a pending request only the pool holds is not reused", "[transport]") {
  // A transport may drop its own reference while the request is still pending elsewhere in its
  // bookkeeping; only done requests are safe to hand out again.
  RequestPool pool;
  made = 0;
  Request* pending = pool.Acquire(Make).get();
  RequestPtr next = pool.Acquire(Make);
  CHECK(next.get() != pending);
  CHECK(made == 2);
}

TEST_CASE("request pool: beyond its capacity requests are made and not kept", "[transport]") {
  RequestPool pool;
  made = 0;
  std::vector<RequestPtr> held;
  for (size_t i = 0; i < RequestPool::kCapacity + 3; ++i) held.push_back(pool.Acquire(Make));
  CHECK(made == static_cast<int>(RequestPool::kCapacity + 3));
  CHECK(pool.size() == RequestPool::kCapacity);
  // An unpooled one is freed when let go (only its holder referenced it).
  std::weak_ptr<Request> unpooled = held.back();
  held.back().reset();
  CHECK(unpooled.expired());
  // Clear drops the pool's references; requests still held live on.
  std::weak_ptr<Request> pooled = held.front();
  pool.Clear();
  CHECK(pool.size() == 0);
  CHECK_FALSE(pooled.expired());
  held.clear();
  CHECK(pooled.expired());
}

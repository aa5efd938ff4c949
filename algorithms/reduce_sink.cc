#include "algorithms/reduce_sink.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/reduce.h"

namespace braid::algorithms {

void ReduceSink::Reduce(size_t offset, const void* message, size_t count) const {
  char* out = dst_ + offset;
  const char* own = own_ + offset;
  if (message_first_) {
    kernels::ReduceInto(type_, op_, out, message, own, count);
  } else {
    kernels::ReduceInto(type_, op_, out, own, message, count);
  }
}

void ReduceSink::Land(size_t offset, const void* data, size_t length) {
  const char* in = static_cast<const char*>(data);
  if (carry_bytes_ > 0) {
    // Complete the element the previous piece split (pieces come in order, so this piece
    // continues it), then reduce it from the carry.
    const size_t take = std::min(elem_ - carry_bytes_, length);
    std::memcpy(carry_ + carry_bytes_, in, take);
    carry_bytes_ += take;
    in += take;
    offset += take;
    length -= take;
    if (carry_bytes_ < elem_) return;
    Reduce(offset - elem_, carry_, 1);
    carry_bytes_ = 0;
  }
  // `offset` is on an element boundary here: everything before it was whole elements or the
  // carried one.
  const size_t count = length / elem_;
  if (count > 0 && reinterpret_cast<uintptr_t>(in) % elem_ == 0) {
    Reduce(offset, in, count);
  } else if (count > 0) {
    // The piece starts inside an element of the transport's buffer (it split the previous one):
    // the kernels' loops may assume element-aligned operands, so go through an aligned copy.
    alignas(64) unsigned char bounce[4096];
    const size_t per_copy = sizeof(bounce) / elem_;
    for (size_t done = 0; done < count;) {
      const size_t n = std::min(per_copy, count - done);
      std::memcpy(bounce, in + done * elem_, n * elem_);
      Reduce(offset + done * elem_, bounce, n);
      done += n;
    }
  }
  const size_t rest = length - count * elem_;
  if (rest > 0) {
    std::memcpy(carry_, in + count * elem_, rest);
    carry_bytes_ = rest;
  }
}

}  // namespace braid::algorithms

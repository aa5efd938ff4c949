// 16-byte packs, and how one thread's share of an element-wise loop splits into them.
//
// Why: a GPU thread moving 16 bytes per load/store (ld.global.v4) needs a quarter of the memory
// instructions of 4-byte accesses and an eighth of 2-byte ones, which is what lets a reduction of
// float16 run at memory speed. A pack needs every pointer 16-byte aligned at the same element;
// buffers from cudaMalloc are, but a chunk at an odd offset is not, so the loop has three parts:
// scalar elements up to the first 16-byte boundary (the head), whole packs, then the scalar tail.
// Pointers whose offsets within 16 bytes differ cannot share a pack at all and run scalar.
//
// The same code runs in the CUDA kernels (worker = global thread index, workers = threads in the
// grid) and in the CPU test, which calls it for every worker index in turn and so checks the
// exact partition of head, packs and tail that the GPU threads use (grid-stride: worker w takes
// items w, w + workers, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/elementwise.h"  // BRAID_HOST_DEVICE

namespace braid::kernels::cuda {

constexpr size_t kPackBytes = 16;

template <typename T>
struct alignas(kPackBytes) Pack {
  static constexpr size_t kCount = kPackBytes / sizeof(T);
  T v[kCount];
};

// Loads / stores the pack at p (16-byte aligned). On the device through uint4, so nvcc emits one
// 128-bit access whatever T is.
template <typename T>
BRAID_HOST_DEVICE Pack<T> LoadPack(const T* p) {
  Pack<T> pack;
#if defined(__CUDA_ARCH__)
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  memcpy(static_cast<void*>(&pack), &raw, kPackBytes);
#else
  std::memcpy(static_cast<void*>(&pack), p, kPackBytes);  // void*: T may be __half, a class
#endif
  return pack;
}

template <typename T>
BRAID_HOST_DEVICE void StorePack(T* p, const Pack<T>& pack) {
#if defined(__CUDA_ARCH__)
  uint4 raw;
  memcpy(&raw, &pack, kPackBytes);
  *reinterpret_cast<uint4*>(p) = raw;
#else
  std::memcpy(static_cast<void*>(p), &pack, kPackBytes);
#endif
}

// Elements [0, head) and [head + packs * kCount, count) go one by one; packs in between.
struct PackSplit {
  size_t head;
  size_t packs;
};

// `offset`: the first pointer's address modulo 16; `same_offset`: whether every pointer of the
// loop has that offset (else nothing can go in packs).
template <typename T>
BRAID_HOST_DEVICE PackSplit SplitIntoPacks(size_t count, uintptr_t offset, bool same_offset) {
  if (!same_offset) return PackSplit{count, 0};
  size_t head = ((kPackBytes - offset) % kPackBytes) / sizeof(T);
  if (head > count) head = count;
  return PackSplit{head, (count - head) / Pack<T>::kCount};
}

BRAID_HOST_DEVICE uintptr_t OffsetIn16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kPackBytes;
}

// Runs scalar(i) for this worker's share of the head and tail elements and vector(i) for its
// share of the packs (i = the pack's first element).
template <typename T, typename Scalar, typename Vector>
BRAID_HOST_DEVICE void ForShare(PackSplit split, size_t count, size_t worker, size_t workers,
                                Scalar&& scalar, Vector&& vector) {
  for (size_t i = worker; i < split.head; i += workers) scalar(i);
  for (size_t p = worker; p < split.packs; p += workers) vector(split.head + p * Pack<T>::kCount);
  for (size_t i = split.head + split.packs * Pack<T>::kCount + worker; i < count; i += workers) {
    scalar(i);
  }
}

// out[i] = op(a[i], b[i]) for i < count, and copy[i] = out[i] too when copy is not null (the
// recv-reduce-copy-send move: the reduced chunk is both kept and forwarded). out may equal a or
// b exactly (each pack is loaded before it is stored); partial overlap is not allowed.
template <typename T, typename Op>
BRAID_HOST_DEVICE void ReduceShare(T* out, T* copy, const T* a, const T* b, size_t count, size_t worker,
                                   size_t workers) {
  const Op op{};
  const uintptr_t offset = OffsetIn16(a);
  const bool same = OffsetIn16(b) == offset && OffsetIn16(out) == offset &&
                    (copy == nullptr || OffsetIn16(copy) == offset);
  const PackSplit split = SplitIntoPacks<T>(count, offset, same);
  ForShare<T>(
      split, count, worker, workers,
      [&](size_t i) {
        const T r = op(a[i], b[i]);
        out[i] = r;
        if (copy != nullptr) copy[i] = r;
      },
      [&](size_t i) {
        const Pack<T> x = LoadPack(a + i);
        const Pack<T> y = LoadPack(b + i);
        Pack<T> r;
        for (size_t k = 0; k < Pack<T>::kCount; ++k) r.v[k] = op(x.v[k], y.v[k]);
        StorePack(out + i, r);
        if (copy != nullptr) StorePack(copy + i, r);
      });
}

// The inputs of a many-input reduction, passed to a kernel by value. Eight: the most ranks that
// share one GPU in braid's tests (1, 2, 4, 8); more inputs reduce in several passes.
constexpr int kMaxInputs = 8;
template <typename T>
struct Inputs {
  const T* ptr[kMaxInputs];
  int count;
};

// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], folded left in input order: the order
// every rank uses, so ranks that each reduce all peers' chunks (one-shot allreduce) get the same
// bits, and the order a chain of two-input reductions gives. out may be exactly one of the
// inputs (each element or pack is read from every input before it is written).
template <typename T, typename Op>
BRAID_HOST_DEVICE void ReduceManyShare(T* out, const Inputs<T>& in, size_t count, size_t worker, size_t workers) {
  const Op op{};
  const uintptr_t offset = OffsetIn16(out);
  bool same = true;
  for (int k = 0; k < in.count; ++k) same = same && OffsetIn16(in.ptr[k]) == offset;
  const PackSplit split = SplitIntoPacks<T>(count, offset, same);
  ForShare<T>(
      split, count, worker, workers,
      [&](size_t i) {
        T acc = in.ptr[0][i];
        for (int k = 1; k < in.count; ++k) acc = op(acc, in.ptr[k][i]);
        out[i] = acc;
      },
      [&](size_t i) {
        Pack<T> acc = LoadPack(in.ptr[0] + i);
        for (int k = 1; k < in.count; ++k) {
          const Pack<T> x = LoadPack(in.ptr[k] + i);
          for (size_t e = 0; e < Pack<T>::kCount; ++e) acc.v[e] = op(acc.v[e], x.v[e]);
        }
        StorePack(out + i, acc);
      });
}

// buf[i] = DivideBy(buf[i], divisor): kAvg's final step.
template <typename T>
BRAID_HOST_DEVICE void DivideShare(T* buf, size_t count, int divisor, size_t worker, size_t workers) {
  const PackSplit split = SplitIntoPacks<T>(count, OffsetIn16(buf), true);
  ForShare<T>(
      split, count, worker, workers, [&](size_t i) { buf[i] = DivideBy(buf[i], divisor); },
      [&](size_t i) {
        Pack<T> x = LoadPack(buf + i);
        for (size_t k = 0; k < Pack<T>::kCount; ++k) x.v[k] = DivideBy(x.v[k], divisor);
        StorePack(buf + i, x);
      });
}

// dst[i] = src[i] for `bytes` bytes; dst and src do not overlap.
BRAID_HOST_DEVICE void CopyShare(void* dst, const void* src, size_t bytes, size_t worker, size_t workers) {
  uint8_t* d = static_cast<uint8_t*>(dst);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  const uintptr_t offset = OffsetIn16(s);
  const PackSplit split = SplitIntoPacks<uint8_t>(bytes, offset, OffsetIn16(d) == offset);
  ForShare<uint8_t>(
      split, bytes, worker, workers, [&](size_t i) { d[i] = s[i]; },
      [&](size_t i) { StorePack(d + i, LoadPack(s + i)); });
}

}  // namespace braid::kernels::cuda

// The CUDA kernels (kernels/cuda/reduce.h) on the GPU against kernels/cpu, for every dtype x op:
// sizes from 1 element to past a million (head, packs, tail, several blocks and the grid-stride
// loop), offsets that do and do not allow 16-byte packs, in place, reduce-copy, divide, copy, and
// the refusals of bad arguments. Run on the GPU machine by tests/gpu/run_on_device.sh (also under
// compute-sanitizer, with --quick); here it only builds. Exit 0 passed, 1 failed, 77 no device.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/base/datatype.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cuda/reduce.h"
#include "tests/gpu/gpu_check.h"
#include "tests/kernels/element_compare.h"

namespace braid {
namespace {

using gpu_test::Checks;

constexpr const char* kName = "kernels_gpu_test";

using kernels::testing::FirstMismatch;
using kernels::testing::MakeInput;

std::string CudaText(cudaError_t err) { return std::string(cudaGetErrorName(err)) + " " + cudaGetErrorString(err); }

// cudaMalloc, checked; a failed allocation is a failed check and a null pointer, which the
// kernels refuse without touching it.
uint8_t* DeviceBytes(Checks& checks, size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  checks.Expect(err == cudaSuccess, "cudaMalloc(" + std::to_string(bytes) + "): " + CudaText(err));
  return static_cast<uint8_t*>(p);
}

constexpr DataType kTypes[] = {
    DataType::kInt8,    DataType::kUint8,   DataType::kInt32,   DataType::kUint32,  DataType::kInt64,
    DataType::kUint64,  DataType::kFloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBfloat16,
};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg};

// quick: sizes up to 4097 only, for runs under compute-sanitizer (tens of times slower).
void CheckReductions(Checks& checks, cudaStream_t stream, bool quick) {
  std::mt19937_64 rng(1);
  std::vector<size_t> kCounts = {1, 7, 8, 9, 33, 1000, 4097};
  if (!quick) kCounts.push_back((size_t{1} << 20) + 3);
  const int kDivisor = 3;
  for (DataType type : kTypes) {
    const size_t size = DataTypeSize(type);
    for (ReduceOp op : kOps) {
      for (size_t count : kCounts) {
        // offset_a == offset_b == offset_out: packs after a head; offset_out differs: all scalar.
        for (int layout = 0; layout < 3; ++layout) {
          const size_t off = layout == 0 ? 0 : size;
          const size_t off_out = layout == 2 ? 0 : off;
          const bool copy = layout == 1;
          const std::vector<uint8_t> a = MakeInput(type, count, rng);
          const std::vector<uint8_t> b = MakeInput(type, count, rng);
          std::vector<uint8_t> expected(count * size);
          kernels::ReduceInto(type, op, expected.data(), a.data(), b.data(), count);
          if (op == ReduceOp::kAvg) kernels::DivideInPlace(type, expected.data(), count, kDivisor);

          const size_t bytes = count * size + 32;
          uint8_t* da = DeviceBytes(checks, bytes);
          uint8_t* db = DeviceBytes(checks, bytes);
          uint8_t* dout = DeviceBytes(checks, bytes);
          uint8_t* dcopy = DeviceBytes(checks, bytes);
          cudaMemcpy(da + off, a.data(), count * size, cudaMemcpyHostToDevice);
          cudaMemcpy(db + off, b.data(), count * size, cudaMemcpyHostToDevice);
          const std::string what = std::string(DataTypeName(type)) + " " + ReduceOpName(op) + " count " +
                                   std::to_string(count) + " layout " + std::to_string(layout);
          Status launched = copy ? kernels::cuda::LaunchReduceCopy(type, op, dout + off_out, dcopy + off_out,
                                                                   da + off, db + off, count, stream)
                                 : kernels::cuda::LaunchReduce(type, op, dout + off_out, da + off, db + off,
                                                               count, stream);
          if (launched.ok() && op == ReduceOp::kAvg) {
            launched = kernels::cuda::LaunchDivide(type, dout + off_out, count, kDivisor, stream);
            if (launched.ok() && copy) {
              launched = kernels::cuda::LaunchDivide(type, dcopy + off_out, count, kDivisor, stream);
            }
          }
          checks.Expect(launched.ok(), what + ": launch: " + launched.ToString());
          const cudaError_t synced = cudaStreamSynchronize(stream);
          checks.Expect(synced == cudaSuccess, what + ": " + CudaText(synced));
          std::vector<uint8_t> got(count * size);
          cudaMemcpy(got.data(), dout + off_out, count * size, cudaMemcpyDeviceToHost);
          const std::string diff = FirstMismatch(type, expected.data(), got.data(), count);
          checks.Expect(diff.empty(), what + ": " + diff);
          if (copy) {
            cudaMemcpy(got.data(), dcopy + off_out, count * size, cudaMemcpyDeviceToHost);
            const std::string copy_diff = FirstMismatch(type, expected.data(), got.data(), count);
            checks.Expect(copy_diff.empty(), what + " (copy output): " + copy_diff);
          }
          // In place: out == a.
          cudaMemcpy(da + off, a.data(), count * size, cudaMemcpyHostToDevice);
          launched = kernels::cuda::LaunchReduce(type, op, da + off, da + off, db + off, count, stream);
          if (launched.ok() && op == ReduceOp::kAvg) {
            launched = kernels::cuda::LaunchDivide(type, da + off, count, kDivisor, stream);
          }
          cudaStreamSynchronize(stream);
          cudaMemcpy(got.data(), da + off, count * size, cudaMemcpyDeviceToHost);
          const std::string in_place_diff = FirstMismatch(type, expected.data(), got.data(), count);
          checks.Expect(launched.ok() && in_place_diff.empty(), what + " in place: " + launched.ToString() + in_place_diff);
          cudaFree(da);
          cudaFree(db);
          cudaFree(dout);
          cudaFree(dcopy);
        }
      }
    }
  }
}

// One-shot's kernel: n device buffers folded left into one, against chained kernels/cpu calls.
void CheckReduceMany(Checks& checks, cudaStream_t stream, bool quick) {
  std::mt19937_64 rng(4);
  const size_t count = quick ? 1001 : (size_t{1} << 20) + 5;
  for (DataType type : kTypes) {
    const size_t size = DataTypeSize(type);
    for (ReduceOp op : kOps) {
      for (int n : {1, 2, 8}) {
        std::vector<std::vector<uint8_t>> data;
        std::vector<uint8_t*> device(n);
        for (int k = 0; k < n; ++k) {
          data.push_back(MakeInput(type, count, rng));
          device[k] = DeviceBytes(checks, count * size);
          cudaMemcpy(device[k], data[k].data(), count * size, cudaMemcpyHostToDevice);
        }
        std::vector<uint8_t> expected = data[0];
        for (int k = 1; k < n; ++k) {
          kernels::ReduceInto(type, op, expected.data(), expected.data(), data[k].data(), count);
        }
        uint8_t* out = DeviceBytes(checks, count * size);
        std::vector<const void*> inputs(device.begin(), device.end());
        const Status launched = kernels::cuda::LaunchReduceMany(type, op, out, inputs.data(), n, count, stream);
        cudaStreamSynchronize(stream);
        std::vector<uint8_t> got(count * size);
        cudaMemcpy(got.data(), out, count * size, cudaMemcpyDeviceToHost);
        const std::string what = std::string(DataTypeName(type)) + " " + ReduceOpName(op) + " of " +
                                 std::to_string(n) + " inputs";
        checks.Expect(launched.ok(), what + ": " + launched.ToString());
        const std::string diff = FirstMismatch(type, expected.data(), got.data(), count);
        checks.Expect(diff.empty(), what + ": " + diff);
        for (uint8_t* p : device) cudaFree(p);
        cudaFree(out);
      }
    }
  }
  const void* none[1] = {nullptr};
  const auto nine = kernels::cuda::LaunchReduceMany(DataType::kFloat32, ReduceOp::kSum, reinterpret_cast<void*>(16),
                                                    none, 9, 4, stream);
  checks.Expect(nine.code() == Code::kInvalidArgument, "9 inputs: " + nine.ToString());
  const auto null_input = kernels::cuda::LaunchReduceMany(DataType::kFloat32, ReduceOp::kSum,
                                                          reinterpret_cast<void*>(16), none, 1, 4, stream);
  checks.Expect(null_input.code() == Code::kInvalidArgument, "a null input: " + null_input.ToString());
}

void CheckCopy(Checks& checks, cudaStream_t stream) {
  std::mt19937_64 rng(2);
  for (size_t bytes : {size_t{1}, size_t{17}, size_t{4096}, size_t{(1 << 22) + 5}}) {
    for (size_t src_off : {size_t{0}, size_t{3}}) {
      for (size_t dst_off : {size_t{0}, size_t{3}, size_t{8}}) {
        std::vector<uint8_t> src(bytes);
        for (auto& v : src) v = static_cast<uint8_t>(rng());
        uint8_t* ds = DeviceBytes(checks, bytes + 16);
        uint8_t* dd = DeviceBytes(checks, bytes + 16);
        cudaMemcpy(ds + src_off, src.data(), bytes, cudaMemcpyHostToDevice);
        const Status launched = kernels::cuda::LaunchCopy(dd + dst_off, ds + src_off, bytes, stream);
        cudaStreamSynchronize(stream);
        std::vector<uint8_t> got(bytes);
        cudaMemcpy(got.data(), dd + dst_off, bytes, cudaMemcpyDeviceToHost);
        checks.Expect(launched.ok() && got == src, "copy " + std::to_string(bytes) + " bytes, offsets " +
                                                       std::to_string(src_off) + " -> " + std::to_string(dst_off));
        cudaFree(ds);
        cudaFree(dd);
      }
    }
  }
}

void CheckRefusals(Checks& checks, cudaStream_t stream) {
  auto* d = reinterpret_cast<float*>(DeviceBytes(checks, 64));
  const auto bad_type = kernels::cuda::LaunchReduce(static_cast<DataType>(10), ReduceOp::kSum, d, d, d, 4, stream);
  checks.Expect(bad_type.code() == Code::kInvalidArgument, "invalid dtype: " + bad_type.ToString());
  const auto bad_op = kernels::cuda::LaunchReduce(DataType::kFloat32, static_cast<ReduceOp>(9), d, d, d, 4, stream);
  checks.Expect(bad_op.code() == Code::kInvalidArgument, "invalid op: " + bad_op.ToString());
  const auto misaligned = kernels::cuda::LaunchReduce(DataType::kFloat32, ReduceOp::kSum,
                                                      reinterpret_cast<char*>(d) + 1, d, d, 4, stream);
  checks.Expect(misaligned.code() == Code::kInvalidArgument, "misaligned: " + misaligned.ToString());
  const auto null_input = kernels::cuda::LaunchReduce(DataType::kFloat32, ReduceOp::kSum, d, nullptr, d, 4, stream);
  checks.Expect(null_input.code() == Code::kInvalidArgument, "null input: " + null_input.ToString());
  const auto bad_divisor = kernels::cuda::LaunchDivide(DataType::kFloat32, d, 4, 0, stream);
  checks.Expect(bad_divisor.code() == Code::kInvalidArgument, "divisor 0: " + bad_divisor.ToString());
  checks.Expect(kernels::cuda::LaunchReduce(DataType::kFloat32, ReduceOp::kSum, nullptr, nullptr, nullptr, 0, stream).ok(),
                "count 0 with null pointers is a no-op");
  const cudaError_t synced = cudaStreamSynchronize(stream);
  checks.Expect(synced == cudaSuccess, "stream after refusals: " + CudaText(synced));
  cudaFree(d);
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  using namespace braid;
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  if (!gpu_test::HaveDevice(kName)) return gpu_test::kExitSkipped;
  Checks checks(kName);
  cudaStream_t stream = nullptr;
  const cudaError_t created = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (!checks.Expect(created == cudaSuccess, "cudaStreamCreateWithFlags: " + CudaText(created))) return checks.Finish();
  CheckReductions(checks, stream, quick);
  CheckReduceMany(checks, stream, quick);
  CheckCopy(checks, stream);
  CheckRefusals(checks, stream);
  cudaStreamDestroy(stream);
  return checks.Finish();
}

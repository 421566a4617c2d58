// CUDA kernels of the fill family: shape (the input's dims as i64) and fill (constant or range).
#include "engine/cuda/device_util.cuh"
#include "engine/cuda/kernels.h"

namespace kiln::engine::cuda {
namespace {

__global__ void fill_kernel(void* out, DataType dtype, int64_t n, bool range, double value,
                            double start, double delta) {
  const bool floating =
      dtype == DataType::kF32 || dtype == DataType::kF16 || dtype == DataType::kBF16;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double v = range ? start + static_cast<double>(i) * delta : value;
    if (floating) {
      store_as<float>(dtype, out, i, static_cast<float>(v));
    } else {
      store_as<int64_t>(dtype, out, i, static_cast<int64_t>(v));
    }
  }
}

void fill_kernel_fn(KernelArgs& args) {
  const auto& p = std::get<FillParams>(args.layer.params);
  const TensorView& out = args.outputs[0];
  const int64_t n = out.numel();
  fill_kernel<<<grid_for(n), kThreads, 0, args.stream()>>>(
      out.data, out.dtype, n, p.mode == FillMode::kRange, p.value, p.start, p.delta);
  KILN_CUDA_CHECK_LAUNCH(args.layer.name);
}

// Shape outputs are normally written from host-known values by the runtime; this covers the rest.
void shape_kernel(KernelArgs& args) {
  const TensorView& out = args.outputs[0];
  std::vector<int64_t> dims(args.inputs[0].shape.begin(), args.inputs[0].shape.end());
  if (out.dtype == DataType::kI32) {
    std::vector<int32_t> narrow(dims.begin(), dims.end());
    KILN_CUDA_CHECK(cudaMemcpyAsync(out.data, narrow.data(), narrow.size() * 4,
                                    cudaMemcpyHostToDevice, args.stream()));
  } else {
    KILN_CUDA_CHECK(cudaMemcpyAsync(out.data, dims.data(), dims.size() * 8, cudaMemcpyHostToDevice,
                                    args.stream()));
  }
}

constexpr int kMaxKernelValues = 64;
struct Values {
  int64_t v[kMaxKernelValues];
};

__global__ void write_values_kernel(void* out, DataType dtype, Values values, int n) {
  const int i = threadIdx.x;
  if (i >= n) return;
  const bool floating =
      dtype == DataType::kF32 || dtype == DataType::kF16 || dtype == DataType::kBF16;
  if (floating) {
    store_as<float>(dtype, out, i, static_cast<float>(values.v[i]));
  } else {
    store_as<int64_t>(dtype, out, i, values.v[i]);
  }
}

}  // namespace

bool launch_write_values(cudaStream_t stream, const TensorView& dst,
                         const std::vector<int64_t>& values) {
  if (values.empty()) return true;
  if (values.size() > static_cast<size_t>(kMaxKernelValues)) return false;
  Values v{};
  std::copy(values.begin(), values.end(), v.v);
  write_values_kernel<<<1, kMaxKernelValues, 0, stream>>>(dst.data, dst.dtype, v,
                                                          static_cast<int>(values.size()));
  KILN_CUDA_CHECK_LAUNCH("shape values");
  return true;
}

void register_fill(KernelTable& t) {
  t.set<FillParams>(fill_kernel_fn, kAllTypes);
  t.set<ShapeParams>(shape_kernel, dtype_bit(DataType::kI64) | dtype_bit(DataType::kI32));
}

}  // namespace kiln::engine::cuda

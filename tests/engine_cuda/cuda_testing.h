// GPU test helpers: skip without a device, and run one network on the CPU and CUDA backends to
// compare their outputs on random data.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "engine/builder.h"
#include "engine/network.h"
#include "engine/plan.h"
#include "engine/runtime.h"
#include "engine_testing.h"

namespace kiln::engine::cuda_testing {

bool gpu_available();

// Skips the calling test (one line, no failure) on machines without a CUDA device.
#define KILN_REQUIRE_GPU()                                                                \
  do {                                                                                    \
    if (!::kiln::engine::cuda_testing::gpu_available()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

using NetworkBuilder = std::function<std::vector<TensorId>(Network&, const std::vector<TensorId>&)>;

struct BothResults {
  std::vector<HostTensor> cpu, gpu;
  Plan gpu_plan;  // the plan the CUDA backend ran (to check fusions)
};

// Builds a network with one input per tensor (static shapes) plus what `build` adds, for the CPU
// and for cuda:0 with `config`, and runs both once on `inputs`.
BothResults run_both(const std::vector<HostTensor>& inputs, const NetworkBuilder& build,
                     BuilderConfig config = {});
BothResults run_both_layer(const LayerParams& params, const std::vector<HostTensor>& inputs,
                           BuilderConfig config = {});

// Every GPU output matches the CPU's: |gpu - cpu| <= atol + rtol * |cpu| (NaN equals NaN).
void expect_match(const BothResults& r, double rtol = 1e-5, double atol = 1e-6);
// Shortcut: one layer on both backends, compared.
void compare_layer(const LayerParams& params, const std::vector<HostTensor>& inputs,
                   double rtol = 1e-5, double atol = 1e-6);

// A convolution (cuDNN), a GEMM (cuBLASLt) and a 1x1 convolution with a ReLU between, over an
// input [N, 3, H, 8] whose batch and height are dynamic: profile (1, 3, 4, 8), (2, 3, 8, 8),
// (8, 3, 16, 8); output [N, 4, H, 8].
Network conv_gemm_network();

// Number of layers of `kind` in a plan ("fused_elementwise", "convolution", ...).
int count_layers(const Plan& plan, const std::string& kind);

}  // namespace kiln::engine::cuda_testing

// The interface between test_x86_nans_on_device.cc (host compiler) and x86_nans_on_device.cu (nvcc).
#pragma once

namespace polyquant::detail {

// Results per operand pair (a[i], b[k]), in this order.
enum PairResult {
  kX86Add, kX86Sub, kX86Mul, kX86Div,              // core/x86_nan.h
  kDeviceAdd, kDeviceSub, kDeviceMul, kDeviceDiv,  // the device's own operators
  kX86Nearbyint, kDeviceNearbyint,                 // of a
  kX86Neg, kDeviceNeg, kX86Abs, kDeviceAbs,        // of a
  kFloorT, kDeviceFloor,                           // of a (reported, not checked: see the test)
  kMulFirstNan,                                    // core/scalar_math.h
  kLog2T,                                          // of a (reported, not checked: see the test)
  kConvertX86, kConvertDevice,                     // a through the other precision and back
  kPairResults
};

// Runs every pair (a[i], b[k]), i, k < n, on the GPU; out holds n * n * kPairResults values, pair
// (i, k) at (i * n + k) * kPairResults. Returns 0 or a cudaError_t.
int x86_nans_on_device(const float* a, const float* b, int n, float* out);
int x86_nans_on_device(const double* a, const double* b, int n, double* out);

}  // namespace polyquant::detail

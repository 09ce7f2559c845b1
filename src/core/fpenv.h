// TensorFlow's CPU kernels run with denormals flushed: subnormal operands read as zero (DAZ) and
// subnormal results are written as zero (FTZ), on x86 through the MXCSR register, tininess judged
// after rounding. Ops that reproduce TensorFlow's arithmetic (the QKeras family) run their row
// loops inside this scope, so the hardware applies exactly the same rule to every float32
// operation, in the scalar reference and in the vector kernels alike, at no per-element cost.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace polyquant::detail {

class ScopedFlushDenormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned kFlushBits = 0x8040u;  // FTZ (bit 15) | DAZ (bit 6)
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushBits); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }
  static constexpr bool kSupported = true;

 private:
  unsigned saved_;
#elif defined(__aarch64__)
  // FPCR.FZ (bit 24) flushes both operands and results on AArch64.
  ScopedFlushDenormals() {
    __asm__ __volatile__("mrs %0, fpcr" : "=r"(saved_));
    const unsigned long long flushed = saved_ | (1ull << 24);
    __asm__ __volatile__("msr fpcr, %0" : : "r"(flushed));
  }
  ~ScopedFlushDenormals() { __asm__ __volatile__("msr fpcr, %0" : : "r"(saved_)); }
  static constexpr bool kSupported = true;

 private:
  unsigned long long saved_;
#else
  // Other targets: subnormals are computed, not flushed (documented departure).
  static constexpr bool kSupported = false;
#endif
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;
};

}  // namespace polyquant::detail

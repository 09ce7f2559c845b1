// Shared parts of the fuzz harnesses over polyquant's public C++ API (fuzz_qonnx.cc,
// fuzz_qkeras.cc): the random source (a generator or libFuzzer's bytes), element stores, tensors
// with drawn strides (zero, negative, gapped, transposed) and their contiguous copies, bit-exact
// element comparison, the kernel-set list, the failure report with its replay line, and the
// deterministic driver `NAME [--seed N] [--seconds S] [--iterations N] [--start I]`.
// fuzz_onnx.cc (the ONNX and Quark linear Q/DQ ops) uses it as well, with the bit-exact
// compare_bits and check_untouched (no write outside an output view, none by a rejected call).
#pragma once

#include <polyquant/polyquant.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace polyquant::fuzz {

namespace pq = polyquant;

// ---- randomness: a generator or the fuzzer's bytes --------------------------------------------

struct Source {
  // Generator mode: splitmix64 from a seed.
  std::uint64_t state = 0;
  // Byte mode (libFuzzer): read from data; zeros once exhausted.
  const std::uint8_t* data = nullptr;
  std::size_t size = 0, pos = 0;

  std::uint64_t u64() {
    if (data != nullptr) {
      std::uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v = (v << 8) | (pos < size ? data[pos++] : 0);
      return v;
    }
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform-ish in [0, n).
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : u64() % n; }
  bool chance(int percent) { return static_cast<int>(below(100)) < percent; }
  template <class T, std::size_t N>
  T pick(const T (&a)[N]) {
    return a[below(N)];
  }
};

// ---- element types ----------------------------------------------------------------------------

using f16 = _Float16;

inline constexpr pq::DType kFloatTypes[] = {pq::DType::kFloat16, pq::DType::kFloat32, pq::DType::kFloat64};
inline constexpr pq::DType kAllTypes[] = {
    pq::DType::kFloat16, pq::DType::kFloat32, pq::DType::kFloat64, pq::DType::kInt8,   pq::DType::kInt16,
    pq::DType::kInt32,   pq::DType::kInt64,   pq::DType::kUInt8,   pq::DType::kUInt16, pq::DType::kUInt32,
    pq::DType::kUInt64,  pq::DType::kBool};

// Writes `v` as element `i` of a buffer of `dtype` (integer types wrap, as a numpy cast would not
// necessarily, but any value is a legal input).
inline void store(void* buf, pq::DType dtype, std::int64_t i, double v) {
  auto* b = static_cast<unsigned char*>(buf);
  auto as_int = [&]() -> std::int64_t {
    if (!std::isfinite(v)) return 0;
    if (v > 9.2e18) return std::numeric_limits<std::int64_t>::max();
    if (v < -9.2e18) return std::numeric_limits<std::int64_t>::min();
    return static_cast<std::int64_t>(v);
  };
  switch (dtype) {
    case pq::DType::kFloat16: reinterpret_cast<f16*>(b)[i] = static_cast<f16>(v); break;
    case pq::DType::kFloat32: reinterpret_cast<float*>(b)[i] = static_cast<float>(v); break;
    case pq::DType::kFloat64: reinterpret_cast<double*>(b)[i] = v; break;
    case pq::DType::kInt8: reinterpret_cast<std::int8_t*>(b)[i] = static_cast<std::int8_t>(as_int()); break;
    case pq::DType::kInt16: reinterpret_cast<std::int16_t*>(b)[i] = static_cast<std::int16_t>(as_int()); break;
    case pq::DType::kInt32: reinterpret_cast<std::int32_t*>(b)[i] = static_cast<std::int32_t>(as_int()); break;
    case pq::DType::kInt64: reinterpret_cast<std::int64_t*>(b)[i] = as_int(); break;
    case pq::DType::kUInt8: reinterpret_cast<std::uint8_t*>(b)[i] = static_cast<std::uint8_t>(as_int()); break;
    case pq::DType::kUInt16: reinterpret_cast<std::uint16_t*>(b)[i] = static_cast<std::uint16_t>(as_int()); break;
    case pq::DType::kUInt32: reinterpret_cast<std::uint32_t*>(b)[i] = static_cast<std::uint32_t>(as_int()); break;
    case pq::DType::kUInt64:
      reinterpret_cast<std::uint64_t*>(b)[i] = static_cast<std::uint64_t>(as_int());
      break;
    case pq::DType::kBool: reinterpret_cast<bool*>(b)[i] = v != 0.0; break;
    default: break;  // the ONNX-only dtypes are not drawn by these harnesses
  }
}

// Raw random bits of one element (floats: any pattern, NaN payloads and subnormals included).
inline void store_bits(void* buf, pq::DType dtype, std::int64_t i, std::uint64_t bits) {
  const std::size_t size = pq::dtype_size(dtype);
  if (dtype == pq::DType::kBool) bits &= 1;
  std::memcpy(static_cast<unsigned char*>(buf) + static_cast<std::size_t>(i) * size, &bits, size);
}

inline const double kInf = std::numeric_limits<double>::infinity();
inline const double kNaN = std::numeric_limits<double>::quiet_NaN();

inline double data_value(Source& s) {
  static const double specials[] = {0.0,     -0.0,    kNaN,     -kNaN,        kInf,       -kInf,
                                    0.5,     -0.5,    1.5,      2.5,          -2.5,       0.49999997,
                                    1e-45,   1e-40,   1e-310,   5e-324,       1.1754942e-38,
                                    65504.0, 65520.0, 8388609.0, 16777215.0, 3.4028235e38, 1e300,
                                    -1e300,  6e-8,    2.0e-7,   1.7014118e38, 2.5521178e38};
  switch (s.below(5)) {
    case 0: return s.pick(specials);
    case 1: return static_cast<double>(static_cast<std::int64_t>(s.below(601)) - 300) / 2.0;  // ties
    case 2: return (static_cast<double>(s.below(2001)) - 1000.0) * 0.37;
    case 3: return std::ldexp(static_cast<double>(s.below(1 << 20)) / (1 << 20) + 1.0,
                              static_cast<int>(s.below(300)) - 150) * (s.chance(50) ? -1 : 1);
    default: return (static_cast<double>(s.below(1u << 24)) / (1u << 20) - 8.0);
  }
}

// ---- tensors ----------------------------------------------------------------------------------

struct Tensor {
  pq::DType dtype = pq::DType::kFloat32;
  pq::Dims shape, strides;
  std::vector<std::uint64_t> storage;  // 8-byte aligned backing store
  std::int64_t offset = 0;             // element offset of element 0 inside storage

  void* base() { return storage.data(); }
  void* data() { return static_cast<unsigned char*>(base()) + offset * static_cast<std::int64_t>(pq::dtype_size(dtype)); }
  pq::TensorView view() { return pq::TensorView(data(), dtype, shape, strides); }
  pq::MutableTensorView mutable_view() { return pq::MutableTensorView(data(), dtype, shape, strides); }
};

inline std::int64_t checked_numel(const pq::Dims& d) {
  // numel without overflow: saturates at 2^62.
  std::int64_t n = 1;
  for (int i = 0; i < d.rank; ++i) {
    if (d[i] == 0) return 0;
  }
  for (int i = 0; i < d.rank; ++i) {
    if (n > (std::int64_t{1} << 62) / std::max<std::int64_t>(d[i], 1)) return std::int64_t{1} << 62;
    n *= d[i];
  }
  return n;
}

// Allocates a tensor of `shape` with drawn strides; the memory the strides reach is filled by `fill`
// (every element of the span, including gaps, so uninitialised reads cannot happen).
template <class Fill>
inline Tensor make_tensor(Source& s, pq::DType dtype, const pq::Dims& shape, bool allow_zero_stride, Fill fill) {
  Tensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.strides.rank = shape.rank;
  const int kind = static_cast<int>(s.below(6));  // 0,1: contiguous; 2: negative; 3: odd; 4: transposed; 5: mixed
  std::int64_t step = 1;
  std::vector<int> order(static_cast<std::size_t>(shape.rank));
  for (int i = 0; i < shape.rank; ++i) order[static_cast<std::size_t>(i)] = shape.rank - 1 - i;  // innermost first
  if (kind == 4 || kind == 5) {
    for (int i = shape.rank - 1; i > 0; --i) std::swap(order[static_cast<std::size_t>(i)], order[s.below(static_cast<std::uint64_t>(i) + 1)]);
  }
  for (int k : order) {
    std::int64_t mult = 1;
    static const std::int64_t mults[] = {1, 2, 3, 5};
    if (kind == 3 || kind == 5) mult = s.pick(mults);
    std::int64_t stride = step * mult;
    if ((kind == 2 || kind == 5) && s.chance(50)) stride = -stride;
    if (allow_zero_stride && shape[k] != 1 && s.chance(kind == 5 ? 40 : 15)) stride = 0;  // broadcast view
    if (shape[k] == 1 && s.chance(30)) stride = static_cast<std::int64_t>(s.below(7)) - 3;  // any stride is legal
    t.strides[k] = stride;
    step *= std::max<std::int64_t>(shape[k], 1) * mult;
  }
  // Span reached by the strides.
  std::int64_t lo = 0, hi = 0;
  if (checked_numel(shape) > 0) {
    for (int k = 0; k < shape.rank; ++k) {
      const std::int64_t reach = (shape[k] - 1) * t.strides[k];
      (reach < 0 ? lo : hi) += reach;
    }
  }
  const std::int64_t span = hi - lo + 1;
  const std::size_t bytes = static_cast<std::size_t>(span) * pq::dtype_size(dtype);
  t.storage.assign((bytes + 7) / 8, 0);
  t.offset = -lo;
  for (std::int64_t i = 0; i < span; ++i) fill(t.base(), i);
  return t;
}

// A contiguous copy with the same values (read through the strides).
inline Tensor contiguous_copy(const Tensor& t) {
  Tensor c;
  c.dtype = t.dtype;
  c.shape = t.shape;
  c.strides = pq::contiguous_strides(t.shape);
  const std::size_t size = pq::dtype_size(t.dtype);
  const std::int64_t n = checked_numel(t.shape);
  c.storage.assign((static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size + 7) / 8, 0);
  const auto* src = reinterpret_cast<const unsigned char*>(t.storage.data()) + t.offset * static_cast<std::int64_t>(size);
  auto* dst = reinterpret_cast<unsigned char*>(c.storage.data());
  std::int64_t idx[pq::kMaxRank] = {};
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (int k = 0; k < t.shape.rank; ++k) off += idx[k] * t.strides[k];
    std::memcpy(dst + i * static_cast<std::int64_t>(size), src + off * static_cast<std::int64_t>(size), size);
    for (int k = t.shape.rank - 1; k >= 0; --k) {
      if (++idx[k] < t.shape[k]) break;
      idx[k] = 0;
    }
  }
  return c;
}

// Element i (C order) of a tensor, as raw bits, for the comparison.
inline bool same_element(const Tensor& a, const Tensor& b, std::int64_t i, std::string* what) {
  auto at = [](const Tensor& t, std::int64_t flat) {
    std::int64_t off = 0, rem = flat;
    for (int k = t.shape.rank - 1; k >= 0; --k) {
      off += (rem % t.shape[k]) * t.strides[k];
      rem /= t.shape[k];
    }
    const std::size_t size = pq::dtype_size(t.dtype);
    const auto* p = reinterpret_cast<const unsigned char*>(t.storage.data()) + (t.offset + off) * static_cast<std::int64_t>(size);
    double v = 0;
    std::uint64_t bits = 0;
    std::memcpy(&bits, p, size);
    switch (t.dtype) {
      case pq::DType::kFloat16: v = static_cast<double>(*reinterpret_cast<const f16*>(p)); break;
      case pq::DType::kFloat32: v = static_cast<double>(*reinterpret_cast<const float*>(p)); break;
      case pq::DType::kFloat64: v = *reinterpret_cast<const double*>(p); break;
      default: break;
    }
    return std::pair<double, std::uint64_t>(v, bits);
  };
  const auto [va, ba] = at(a, i);
  const auto [vb, bb] = at(b, i);
  if (std::isnan(va) && std::isnan(vb)) return true;
  if (ba == bb) return true;
  char buf[160];
  std::snprintf(buf, sizeof buf, "element %lld: %.17g (0x%llx) vs %.17g (0x%llx)", static_cast<long long>(i), va,
                static_cast<unsigned long long>(ba), vb, static_cast<unsigned long long>(bb));
  *what = buf;
  return false;
}

// A shape that broadcasts to `out` (a suffix of its dims, each kept or 1), or rarely an
// incompatible one, or a single element.
inline pq::Dims operand_shape(Source& s, const pq::Dims& out, bool single) {
  pq::Dims d;
  if (single) {
    d.rank = static_cast<int>(s.below(3));
    for (int i = 0; i < d.rank; ++i) d[i] = 1;
    return d;
  }
  d.rank = static_cast<int>(s.below(static_cast<std::uint64_t>(out.rank) + 1));
  for (int i = 0; i < d.rank; ++i) {
    const std::int64_t o = out[out.rank - d.rank + i];
    d[i] = s.chance(50) ? o : 1;
  }
  if (s.chance(2) && d.rank > 0) d[0] = d[0] + 1 + static_cast<std::int64_t>(s.below(3));  // incompatible
  return d;
}

// ---- the run ----------------------------------------------------------------------------------

struct Stats {
  std::uint64_t cases = 0, rejected = 0, executions = 0, compared_elements = 0;
  std::vector<std::uint64_t> per_op;  // one counter per entry of the driver's op names
};

inline std::vector<std::string> g_sets;  // kernel sets to compare, scalar first

inline void select_set(const std::string& name) { pq::set_kernel_set(name); }

inline const char* g_name = "polyquant_fuzz_qonnx";        // the binary, in messages
inline std::uint64_t g_seed = 0, g_case = 0;  // for the replay line of a failure

[[noreturn]] inline void fail(const std::string& case_description, const std::string& why) {
  std::fprintf(stderr, "%s: FAILED: %s\n  case: %s\n  replay: --seed %llu --start %llu --iterations 1\n", g_name,
               why.c_str(), case_description.c_str(), static_cast<unsigned long long>(g_seed),
               static_cast<unsigned long long>(g_case));
  std::fflush(stderr);
  std::abort();
}

// An output of `spec`, filled with a pattern; reversed on every axis when `strided`.
inline Tensor output_for(const pq::TensorSpec& spec, bool strided) {
  Tensor o;
  o.dtype = spec.dtype;
  o.shape = spec.shape;
  o.strides = pq::contiguous_strides(spec.shape);
  const std::int64_t n = checked_numel(spec.shape);
  const std::size_t size = pq::dtype_size(spec.dtype);
  o.storage.assign((static_cast<std::size_t>(std::max<std::int64_t>(n, 1)) * size + 7) / 8, 0x5A5A5A5A5A5A5A5Aull);
  if (strided && n > 0) {  // reversed on every axis
    std::int64_t off = 0;
    for (int k = 0; k < o.shape.rank; ++k) {
      off += (o.shape[k] - 1) * o.strides[k];
      o.strides[k] = -o.strides[k];
    }
    o.offset = off;
  }
  return o;
}

inline void compare(const std::string& case_description, const Tensor& got, const Tensor& want, const std::string& what,
                    Stats& st) {
  if (!(got.shape == want.shape)) fail(case_description, what + ": shape " + got.shape.str() + " vs " + want.shape.str());
  const std::int64_t n = checked_numel(want.shape);
  std::string detail;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!same_element(got, want, i, &detail)) fail(case_description, what + ": " + detail);
  }
  st.compared_elements += static_cast<std::uint64_t>(n);
}

// The raw bits of element i (C order) of a tensor (any dtype, read through its strides).
inline std::uint64_t element_bits(const Tensor& t, std::int64_t flat) {
  std::int64_t off = 0, rem = flat;
  for (int k = t.shape.rank - 1; k >= 0; --k) {
    off += (rem % t.shape[k]) * t.strides[k];
    rem /= t.shape[k];
  }
  const std::size_t size = pq::dtype_size(t.dtype);
  std::uint64_t bits = 0;
  std::memcpy(&bits, reinterpret_cast<const unsigned char*>(t.storage.data()) + (t.offset + off) * static_cast<std::int64_t>(size),
              size);
  return bits;
}

// Bit-exact comparison of every element (no NaN relaxation: NaN payloads and signs must agree too),
// for ops whose every output bit is specified (the linear Q/DQ ops).
inline void compare_bits(const std::string& case_description, const Tensor& got, const Tensor& want, const std::string& what,
                         Stats& st) {
  if (!(got.shape == want.shape) || got.dtype != want.dtype) {
    fail(case_description, what + ": " + pq::dtype_name(got.dtype) + got.shape.str() + " vs " + pq::dtype_name(want.dtype) +
                               want.shape.str());
  }
  const std::int64_t n = checked_numel(want.shape);
  const std::size_t size = pq::dtype_size(want.dtype);
  const auto* pa = reinterpret_cast<const unsigned char*>(got.storage.data());
  const auto* pb = reinterpret_cast<const unsigned char*>(want.storage.data());
  std::int64_t idx[pq::kMaxRank] = {};
  std::int64_t oa = got.offset, ob = want.offset;  // element offsets of element i, walked in C order
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint64_t a = 0, b = 0;
    std::memcpy(&a, pa + oa * static_cast<std::int64_t>(size), size);
    std::memcpy(&b, pb + ob * static_cast<std::int64_t>(size), size);
    for (int k = want.shape.rank - 1; k >= 0; --k) {
      oa += got.strides[k];
      ob += want.strides[k];
      if (++idx[k] < want.shape[k]) break;
      oa -= idx[k] * got.strides[k];
      ob -= idx[k] * want.strides[k];
      idx[k] = 0;
    }
    if (a != b) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "element %lld (C order) of %s%s: got bits 0x%llx, want 0x%llx", static_cast<long long>(i),
                    pq::dtype_name(want.dtype), want.shape.str().c_str(), static_cast<unsigned long long>(a),
                    static_cast<unsigned long long>(b));
      fail(case_description, what + ": " + buf);
    }
  }
  st.compared_elements += static_cast<std::uint64_t>(n);
}

// Fails unless every byte of `t`'s storage that is not part of an element (the gaps of a strided
// view, the padding around it) still holds `fill`; with `elements_too`, the elements' bytes as well
// (an output an op rejected must be left untouched).
inline void check_untouched(const std::string& case_description, const Tensor& t, unsigned char fill, bool elements_too,
                            const std::string& what) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(t.storage.data());
  const std::size_t total = t.storage.size() * sizeof(std::uint64_t);
  const std::size_t size = pq::dtype_size(t.dtype);
  const std::int64_t n = elements_too ? 0 : checked_numel(t.shape);
  // The bytes the elements own: [first, last) when the view is dense (no gaps, no zero strides),
  // else marked one element at a time.
  std::size_t first = total, last = total;
  std::vector<unsigned char> owned;
  if (n > 0) {
    std::int64_t lo = 0, hi = 0;
    bool zero = false;
    for (int k = 0; k < t.shape.rank; ++k) {
      if (t.shape[k] <= 1) continue;
      const std::int64_t reach = (t.shape[k] - 1) * t.strides[k];
      (reach < 0 ? lo : hi) += reach;
      zero = zero || t.strides[k] == 0;
    }
    if (!zero && hi - lo + 1 == n) {
      first = static_cast<std::size_t>(t.offset + lo) * size;
      last = static_cast<std::size_t>(t.offset + hi + 1) * size;
    } else {
      owned.assign(total, 0);
      std::int64_t idx[pq::kMaxRank] = {};
      std::int64_t off = t.offset;
      for (std::int64_t i = 0; i < n; ++i) {
        std::memset(owned.data() + static_cast<std::size_t>(off) * size, 1, size);
        for (int k = t.shape.rank - 1; k >= 0; --k) {
          off += t.strides[k];
          if (++idx[k] < t.shape[k]) break;
          off -= idx[k] * t.strides[k];
          idx[k] = 0;
        }
      }
    }
  }
  for (std::size_t b = 0; b < total; ++b) {
    if (b == first) b = last;
    if (b >= total) break;
    if (bytes[b] != fill && (owned.empty() || !owned[b])) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "byte %zu of the output's storage (element offset %lld) changed to 0x%02x", b,
                    static_cast<long long>(t.offset), bytes[b]);
      fail(case_description, what + ": " + buf + (elements_too ? " (the call was rejected)" : " (outside the view)"));
    }
  }
}

inline std::uint64_t case_seed(std::uint64_t seed, std::uint64_t i) {
  Source s;
  s.state = seed ^ (i * 0xD1B54A32D192ED03ull);
  return s.u64();
}

inline void init_sets() {
  const pq::RuntimeInfo info = pq::runtime_info();
  g_sets.clear();
  // scalar first (the reference), the active (best) set last.
  for (auto it = info.supported.rbegin(); it != info.supported.rend(); ++it) g_sets.push_back(*it);
}

// ---- libFuzzer's entry (-DPOLYQUANT_LIBFUZZER) --------------------------------------------------
// One case drawn from the fuzzer's bytes: the kernel sets are listed once, on the first call.
inline int run_libfuzzer_case(const std::uint8_t* data, std::size_t size, std::size_t num_ops,
                              const std::function<void(Source&, Stats&)>& run_case) {
  static const bool ready = [] {
    init_sets();
    return true;
  }();
  (void)ready;
  Source s;
  s.data = data;
  s.size = size;
  Stats st;
  st.per_op.assign(num_ops, 0);
  run_case(s, st);
  return 0;
}

// ---- the deterministic driver -----------------------------------------------------------------

struct Driver {
  const char* name;                                  // the binary, in messages
  std::vector<std::string> op_names;                 // Stats::per_op counters
  std::function<void(Source&, Stats&)> run_case;     // draws and checks one case
  std::function<bool(const std::string&)> extra_flag;  // a harness' own flag: true when it took it
  const char* extra_usage = "";
  // Called after a successful run with its duration (a harness' own summary line).
  std::function<void(double seconds)> after_run;
};

// Runs cases start, start + 1, ... (case i drawn from (seed, i) alone) until S seconds or N cases.
inline int run_driver(int argc, char** argv, const Driver& d) {
  g_name = d.name;
  std::uint64_t seed = 1, iterations = 0, start = 0;
  double seconds = 10.0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seed") {
      seed = std::strtoull(next(), nullptr, 10);
    } else if (a == "--seconds") {
      seconds = std::strtod(next(), nullptr);
    } else if (a == "--iterations") {
      iterations = std::strtoull(next(), nullptr, 10);
    } else if (a == "--start") {
      start = std::strtoull(next(), nullptr, 10);
    } else if (!d.extra_flag || !d.extra_flag(a)) {
      std::fprintf(stderr,
                   "usage: %s [--seed N] [--seconds S] [--iterations N] [--start I]%s\n"
                   "  runs cases start, start+1, ... until S seconds or N cases (whichever first)\n",
                   argv[0], d.extra_usage);
      return 2;
    }
  }
  init_sets();
  const pq::RuntimeInfo info = pq::runtime_info();
  std::string sets;
  for (const auto& x : info.supported) sets += (sets.empty() ? "" : ", ") + x;
  std::printf("%s: polyquant %s; kernel sets compared: %s (each against scalar); threads %d\n", d.name,
              info.version.c_str(), sets.c_str(), info.num_threads);
  std::printf("%s: seed %llu, start %llu, %s\n", d.name, static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(start), iterations ? "iteration limit set" : "time limit only");
  std::fflush(stdout);
  Stats st;
  st.per_op.assign(d.op_names.size(), 0);
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  std::uint64_t i = start;
  for (;; ++i) {
    if (iterations && i - start >= iterations) break;
    if (((i - start) & 15) == 0) {
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (elapsed >= seconds) break;
    }
    Source s;
    s.state = case_seed(seed, i);
    g_seed = seed;
    g_case = i;
    try {
      d.run_case(s, st);
    } catch (...) {
      std::fprintf(stderr, "%s: unexpected exception in case %llu (seed %llu)\n", d.name, static_cast<unsigned long long>(i),
                   static_cast<unsigned long long>(seed));
      throw;
    }
  }
  elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "%s: %llu cases (%llu rejected with polyquant::Error), %llu executions, %llu elements compared "
      "in %.1f s: %.0f cases/s, %.0f executions/s\n",
      d.name, static_cast<unsigned long long>(st.cases), static_cast<unsigned long long>(st.rejected),
      static_cast<unsigned long long>(st.executions), static_cast<unsigned long long>(st.compared_elements), elapsed,
      static_cast<double>(st.cases) / std::max(elapsed, 1e-9), static_cast<double>(st.executions) / std::max(elapsed, 1e-9));
  std::printf("%s: per op:", d.name);
  for (std::size_t k = 0; k < d.op_names.size(); ++k) {
    std::printf(" %s=%llu", d.op_names[k].c_str(), static_cast<unsigned long long>(st.per_op[k]));
  }
  std::printf("\n%s: OK (replay one case: --seed %llu --start I --iterations 1)\n", d.name,
              static_cast<unsigned long long>(seed));
  if (d.after_run) d.after_run(elapsed);
  return 0;
}

// A harness' entry point from its `Driver make_driver()`: libFuzzer's callback with
// -DPOLYQUANT_LIBFUZZER (the driver's cases drawn from the fuzzer's bytes), the deterministic
// driver's main otherwise. Used once per harness, at global scope.
#if defined(POLYQUANT_LIBFUZZER)
#define POLYQUANT_FUZZ_ENTRY_POINT(make_driver)                                                      \
  extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {               \
    static const polyquant::fuzz::Driver driver = make_driver();                                     \
    return polyquant::fuzz::run_libfuzzer_case(data, size, driver.op_names.size(), driver.run_case); \
  }
#else
#define POLYQUANT_FUZZ_ENTRY_POINT(make_driver) \
  int main(int argc, char** argv) { return polyquant::fuzz::run_driver(argc, argv, make_driver()); }
#endif

}  // namespace polyquant::fuzz

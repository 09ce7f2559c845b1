// The AIMET analyzers' shared internals (common.h): dtype checks, the reduced view, x's data in C
// order, the encoding range.
#include "core/device_elementwise.h"
#include "families/aimet/analyzers/common.h"

#include <array>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace polyquant::aimet::analyzers_detail {

namespace {

std::string dims_list(std::span<const std::int64_t> d) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i];
  os << "]";
  return os.str();
}

std::vector<std::int64_t> concretize_block_size(const Dims& x_shape, const Dims& shape, const std::vector<std::int64_t>& block) {
  if (x_shape.rank < shape.rank)
    fail(ErrorKind::kValue, "Input shape " + x_shape.str() + " must have at least as many dimensions as scale shape " + shape.str() + ".");
  if (shape.rank < static_cast<int>(block.size()))
    fail(ErrorKind::kValue, "Scale shape " + shape.str() + " must have at least as many dimensions as block size " + dims_list(block) + ".");
  const int k = shape.rank - static_cast<int>(block.size());
  std::vector<std::int64_t> full;
  for (int d = 0; d < k; ++d) full.push_back(shape[d] > 1 ? 1 : -1);
  full.insert(full.end(), block.begin(), block.end());
  std::vector<std::int64_t> out;
  for (int d = 0; d < shape.rank; ++d) {
    const std::int64_t xd = x_shape[x_shape.rank - shape.rank + d];
    out.push_back(full[static_cast<std::size_t>(d)] != -1 ? full[static_cast<std::size_t>(d)] : (shape[d] == 0 ? 0 : xd / shape[d]));
  }
  return out;
}

template <class Load>
void gather(const TensorView& x, const Load& load) {
  const int r = x.shape.rank;
  const std::int64_t n = x.numel();
  if (n == 0) return;
  std::array<std::int64_t, kMaxRank> idx{};
  std::int64_t off = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    load(i, off);
    for (int d = r - 1; d >= 0; --d) {
      if (++idx[static_cast<std::size_t>(d)] < x.shape[d]) {
        off += x.strides[d];
        break;
      }
      off -= (x.shape[d] - 1) * x.strides[d];
      idx[static_cast<std::size_t>(d)] = 0;
    }
  }
}

}  // namespace

void check_dtype(DType t) {
  if (!is_analyzer_dtype(t))
    fail(ErrorKind::kType, std::string("x: dtype ") + dtype_name(t) + " is not supported (float16, bfloat16, float32, float64)");
}

ReducedView reduced_view(const Dims& x_shape, const AnalyzerShape& a, bool histogram) {
  ReducedView r;
  const Dims& shape = a.shape;
  for (int d = 0; d < shape.rank; ++d)
    if (shape[d] < 1) fail(ErrorKind::kValue, "shape: every entry must be >= 1, got " + shape.str());
  r.num_elements = shape.numel();
  if (a.block_size) {
    const auto block = concretize_block_size(x_shape, shape, *a.block_size);
    std::int64_t per = 1;
    for (int d = 0; d < shape.rank; ++d) per *= shape[d] * block[static_cast<std::size_t>(d)];
    const std::int64_t n = x_shape.numel();
    if (per <= 0 || n % per != 0) {
      std::vector<std::int64_t> want{-1};
      for (int d = 0; d < shape.rank; ++d) want.push_back(shape[d]), want.push_back(block[static_cast<std::size_t>(d)]);
      fail(ErrorKind::kRuntime, "shape '" + dims_list(want) + "' is invalid for input of size " + std::to_string(n) +
                                      " (block_size must divide the input's dimensions)");
    }
    if (1 + 2 * shape.rank > kMaxRank * 2) fail(ErrorKind::kValue, "shape: too many dimensions");
    r.view.rank = 0;
    std::vector<std::int64_t> v{n / per};
    r.keep.push_back(false);
    for (int d = 0; d < shape.rank; ++d) {
      v.push_back(shape[d]);
      r.keep.push_back(shape[d] > 1);
      v.push_back(block[static_cast<std::size_t>(d)]);
      r.keep.push_back(false);
    }
    // Dims holds kMaxRank entries: merge the leading reduced dimension with the next reduced
    // ones is not needed for correctness of grouping, so collapse runs of reduced dims instead.
    std::vector<std::int64_t> cv;
    std::vector<bool> ck;
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!cv.empty() && !ck.back() && !r.keep[i]) {
        cv.back() *= v[i];
      } else {
        cv.push_back(v[i]);
        ck.push_back(r.keep[i]);
      }
    }
    if (static_cast<int>(cv.size()) > kMaxRank) fail(ErrorKind::kValue, "block_size: the blocked view has more than 8 dimensions");
    r.view = Dims(std::span<const std::int64_t>(cv));
    r.keep = ck;
    return r;
  }
  bool ok = shape.rank <= x_shape.rank;
  for (int i = 1; ok && i <= shape.rank; ++i) {
    const std::int64_t s = shape[shape.rank - i], xd = x_shape[x_shape.rank - i];
    if (s != 1 && s != xd) ok = false;
  }
  if (!ok) {
    if (histogram)
      fail(ErrorKind::kRuntime, "Shape " + shape.str() + " is incompatible with input of shape " + x_shape.str());
    fail(ErrorKind::kRuntime, "Input of shape " + dims_list(x_shape.span()) + " can't be reduced to shape " + dims_list(shape.span()));
  }
  r.view = x_shape;
  r.keep.assign(static_cast<std::size_t>(x_shape.rank), false);
  for (int i = 1; i <= shape.rank; ++i) r.keep[static_cast<std::size_t>(x_shape.rank - i)] = shape[shape.rank - i] > 1;
  return r;
}

void check_not_empty(const TensorView& x) {
  if (x.numel() == 0)
    fail(ErrorKind::kValue, "x: the batch is empty (shape " + x.shape.str() + "); the analyzers need at least one value per batch");
}

Data read_data(const TensorView& x) {
  const polyquant::detail::NamedView operands[] = {{&x, "x"}};
  polyquant::detail::require_host(operands, "the AIMET encoding analyzers");
  check_dtype(x.dtype);
  Data data;
  data.dtype = x.dtype;
  data.n = x.numel();
  if (x.dtype == DType::kFloat32 && x.is_contiguous()) {
    data.f = static_cast<const float*>(x.data);
    return data;
  }
  if (x.dtype == DType::kFloat64 && x.is_contiguous()) {
    data.d = static_cast<const double*>(x.data);
    return data;
  }
  if (x.dtype == DType::kFloat64) {
    data.d_own.resize(static_cast<std::size_t>(data.n));
    const auto* p = static_cast<const double*>(x.data);
    gather(x, [&](std::int64_t i, std::int64_t off) { data.d_own[static_cast<std::size_t>(i)] = p[off]; });
    data.d = data.d_own.data();
    return data;
  }
  data.f_own.resize(static_cast<std::size_t>(data.n));
  float* out = data.f_own.data();
  if (x.dtype == DType::kFloat32) {
    const auto* p = static_cast<const float*>(x.data);
    gather(x, [&](std::int64_t i, std::int64_t off) { out[i] = p[off]; });
  } else {
    const auto* p = static_cast<const std::uint16_t*>(x.data);
    if (x.dtype == DType::kFloat16)
      gather(x, [&](std::int64_t i, std::int64_t off) { out[i] = detail::half_bits_to_float(p[off]); });
    else
      gather(x, [&](std::int64_t i, std::int64_t off) { out[i] = detail::bfloat16_bits_to_float(p[off]); });
  }
  data.f = out;
  return data;
}

EncodingRange make_range(DType dtype, const Dims& shape, std::int64_t n) {
  EncodingRange r;
  r.dtype = dtype;
  r.shape = shape;
  r.min.resize(static_cast<std::size_t>(n));
  r.max.resize(static_cast<std::size_t>(n));
  return r;
}

void check_num_steps(double num_steps) {
  if (!(num_steps > 0)) fail(ErrorKind::kValue, "The number of quantization bins cannot be less than or equal to 0 (num_steps must be > 0).");
}

}  // namespace polyquant::aimet::analyzers_detail

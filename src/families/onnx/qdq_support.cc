#include "families/onnx/qdq_support.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "polyquant/error.h"

namespace polyquant::detail {
namespace {

[[noreturn]] void fail(const std::string& message) { throw Error(ErrorKind::kValue, message); }

int normalize_axis(std::int64_t axis, int rank, const QdqNames& names) {
  if (axis < -rank || axis >= rank) {
    fail(std::string(names.op) + ": axis " + std::to_string(axis) + " is out of range for x of rank " +
         std::to_string(rank) + " (allowed: " + std::to_string(-rank) + " to " + std::to_string(rank - 1) + ")");
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// The view of `v` restricted to [start, start + len) along dimension d.
template <class View>
View slice(View v, int d, std::int64_t start, std::int64_t len) {
  if (len > 0 && start > 0) {
    using Byte = std::conditional_t<std::is_const_v<std::remove_pointer_t<decltype(v.data)>>, const char, char>;
    v.data = static_cast<Byte*>(v.data) + start * v.strides[d] * static_cast<std::int64_t>(dtype_size(v.dtype));
  }
  v.shape[d] = len;
  return v;
}

// Dimension d of extent nb * B split into (nb, B): for x and out (data runs on), and for a
// parameter whose dimension d has extent nb (one value per block, repeated B times: stride 0).
template <class View>
View split(View v, int d, std::int64_t nb, std::int64_t b, bool parameter) {
  View r = v;
  r.shape.rank = v.shape.rank + 1;
  r.strides.rank = v.strides.rank + 1;
  for (int i = v.shape.rank; i > d + 1; --i) {
    r.shape[i] = v.shape[i - 1];
    r.strides[i] = v.strides[i - 1];
  }
  r.shape[d] = nb;
  r.strides[d] = parameter ? v.strides[d] : v.strides[d] * b;
  r.shape[d + 1] = parameter ? 1 : b;
  r.strides[d + 1] = parameter ? 0 : v.strides[d];
  return r;
}

// A contiguous copy of parameter `v` in dtype t (the engine converts). Parameters are small (a
// per-axis vector, one value per block), and in the kernel's dtype they are read in place, so
// per-channel and blocked rows can be fused (core/elementwise.cc).
template <class S>
void widen_to_float(const void* src, unsigned char* dst, std::int64_t n) {
  const S* s = static_cast<const S*>(src);
  float* d = reinterpret_cast<float*>(dst);
  for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(s[i]);  // exact: 8/16-bit integers
}

TensorView converted(const TensorView& v, DType t, std::vector<unsigned char>& storage) {
  storage.assign(static_cast<std::size_t>(std::max<std::int64_t>(v.numel(), 1)) * dtype_size(t), 0);
  if (t == DType::kFloat32 && v.is_contiguous()) {
    // The common case (an 8/16-bit zero point of a blocked layout, millions of values for a large
    // weight): a plain widening loop instead of the engine's general conversion.
    switch (v.dtype) {
      case DType::kInt8: widen_to_float<std::int8_t>(v.data, storage.data(), v.numel()); return TensorView(storage.data(), t, v.shape);
      case DType::kUInt8: widen_to_float<std::uint8_t>(v.data, storage.data(), v.numel()); return TensorView(storage.data(), t, v.shape);
      case DType::kInt16: widen_to_float<std::int16_t>(v.data, storage.data(), v.numel()); return TensorView(storage.data(), t, v.shape);
      case DType::kUInt16: widen_to_float<std::uint16_t>(v.data, storage.data(), v.numel()); return TensorView(storage.data(), t, v.shape);
      default: break;
    }
  }
  const TensorView inputs[1] = {v};
  const DType kernel_dtypes[1] = {t};
  const std::size_t size = dtype_size(t);
  ElementwiseCall c;
  c.inputs = inputs;
  c.kernel_dtypes = kernel_dtypes;
  c.out = MutableTensorView(storage.data(), t, v.shape);
  c.kernel_out_dtype = t;
  c.params = &size;
  c.kernel = [](const void* params, const RowArgs& a) {
    const std::size_t n = *static_cast<const std::size_t*>(params);
    const auto* in = static_cast<const unsigned char*>(a.in[0]);
    auto* out = static_cast<unsigned char*>(a.out);
    for (std::int64_t j = 0; j < a.n; ++j) std::memcpy(out + static_cast<std::size_t>(j) * n, in + (a.is_broadcast(0) ? 0 : static_cast<std::size_t>(j) * n), n);
  };
  run_elementwise(c);
  return TensorView(storage.data(), t, v.shape);
}

// The output is x itself, element for element (in place): each element is read before it is
// written, whatever the split of the work.
bool in_place(const TensorView& x, const MutableTensorView& out) {
  if (x.data != out.data || dtype_size(x.dtype) != dtype_size(out.dtype)) return false;
  for (int d = 0; d < out.shape.rank; ++d) {
    if (out.shape[d] > 1 && x.strides[d] != out.strides[d]) return false;
  }
  return true;
}

}  // namespace

ParamLayout check_param_layout(const TensorView& x, const TensorView& scale, const TensorView* zero_point,
                               std::int64_t axis, std::int64_t block_size, const QdqNames& names,
                               bool one_element_is_tensor) {
  if (block_size < 0) {
    fail(std::string(names.op) + ": block_size must be a positive integer, or 0 for per-tensor / per-axis "
                                 "parameters (got " + std::to_string(block_size) + ")");
  }
  ParamLayout layout;
  const bool one = scale.numel() == 1;
  if (one && (one_element_is_tensor || scale.shape.rank == 0 || scale.shape.rank == 1)) {
    // Per-tensor: a zero point of one element too, of any rank (0-d with (1,) is common).
    if (zero_point != nullptr && (zero_point->numel() != 1 || (!one_element_is_tensor && zero_point->shape.rank > 1))) {
      fail(std::string(names.op) + ": " + names.zero_point + " must have one element like the per-tensor " +
           names.scale + (one_element_is_tensor ? "" : ", as a scalar or of shape (1,)") + " (got shape " +
           zero_point->shape.str() + ")");
    }
    return layout;
  }
  if (zero_point != nullptr && !(zero_point->shape == scale.shape)) {
    fail(std::string(names.op) + ": " + names.zero_point + " must have the shape of " + names.scale + " " +
         scale.shape.str() + " (got " + zero_point->shape.str() + ")");
  }
  const int rank = x.shape.rank;
  if (block_size == 0) {
    if (scale.shape.rank != 1) {
      fail(std::string(names.op) + ": " + names.scale + " must be a scalar (per-tensor) or 1-D (per-axis) without "
                                   "block_size (got shape " + scale.shape.str() + ")");
    }
    layout.granularity = ParamGranularity::kAxis;
    layout.axis = normalize_axis(axis, rank, names);
    if (scale.shape[0] != x.shape[layout.axis]) {
      fail(std::string(names.op) + ": per-axis " + names.scale + " of length " + std::to_string(scale.shape[0]) +
           " does not match x.shape[" + std::to_string(layout.axis) + "] = " + std::to_string(x.shape[layout.axis]) +
           " (x shape " + x.shape.str() + ", axis " + std::to_string(axis) + ")");
    }
    return layout;
  }
  layout.granularity = ParamGranularity::kBlocked;
  layout.axis = normalize_axis(axis, rank, names);
  layout.block_size = block_size;
  const std::int64_t d = x.shape[layout.axis];
  const std::int64_t blocks = d / block_size + (d % block_size != 0 ? 1 : 0);
  bool ok = scale.shape.rank == rank;
  for (int i = 0; ok && i < rank; ++i) ok = scale.shape[i] == (i == layout.axis ? blocks : x.shape[i]);
  if (!ok) {
    Dims want = x.shape;
    want[layout.axis] = blocks;
    fail(std::string(names.op) + ": blocked " + names.scale + " must have shape " + want.str() + " for x of shape " +
         x.shape.str() + ", axis " + std::to_string(axis) + " and block_size " + std::to_string(block_size) +
         " (ceil(" + std::to_string(d) + " / " + std::to_string(block_size) + ") blocks; got " + scale.shape.str() + ")");
  }
  return layout;
}

void run_with_layout(const ElementwiseCall& call, const TensorView& x, const TensorView& scale,
                     const TensorView* zero_point, const ParamLayout& layout) {
  const int nparams = zero_point ? 2 : 1;
  TensorView params[2] = {scale, zero_point ? *zero_point : scale};
  std::vector<unsigned char> storage[2];
  for (int k = 0; k < nparams; ++k) {
    const DType want = call.kernel_dtypes[static_cast<std::size_t>(1 + k)];
    // On a device the engine converts parameters itself (core/device_elementwise.h).
    if (params[k].dtype != want && layout.granularity != ParamGranularity::kTensor && params[k].device.is_cpu()) {
      params[k] = converted(params[k], want, storage[k]);
    }
  }
  auto run = [&](const TensorView& xv, const TensorView* pv, const MutableTensorView& out) {
    TensorView inputs[3] = {xv, pv[0], pv[1]};
    ElementwiseCall c = call;
    c.per_row_operands = true;       // the Q/DQ kernels read blocked parameters compact
    c.repeated_row_operands = true;  // and a last-axis parameter as one row
    c.inputs = std::span<const TensorView>(inputs, static_cast<std::size_t>(1 + nparams));
    c.kernel_dtypes = call.kernel_dtypes.first(static_cast<std::size_t>(1 + nparams));
    c.out = out;
    run_elementwise(c);
  };
  const int rank = x.shape.rank;
  switch (layout.granularity) {
    case ParamGranularity::kTensor: {
      TensorView pv[2];
      for (int k = 0; k < nparams; ++k) {
        pv[k] = TensorView(params[k].data, params[k].dtype, Dims{});
        pv[k].device = params[k].device;
      }
      return run(x, pv, call.out);
    }
    case ParamGranularity::kAxis: {
      TensorView pv[2];
      for (int k = 0; k < nparams; ++k) {
        pv[k] = params[k];
        pv[k].shape.rank = pv[k].strides.rank = rank;
        for (int i = 0; i < rank; ++i) {
          pv[k].shape[i] = i == layout.axis ? params[k].shape[0] : 1;
          pv[k].strides[i] = i == layout.axis ? params[k].strides[0] : 0;
        }
      }
      return run(x, pv, call.out);
    }
    case ParamGranularity::kBlocked:
      break;
  }
  // A blocked layout runs as several engine calls, each buffering its own overlap: an output that
  // overlaps an input (other than in place) would overwrite elements a later call still reads.
  // Compute into a private buffer then, and copy it over the output once.
  bool shared = !in_place(x, call.out) && views_overlap(call.out.data, call.out, x.data, x);
  for (int k = 0; k < nparams; ++k) shared = shared || views_overlap(call.out.data, call.out, params[k].data, params[k]);
  if (shared && !call.out.device.is_cpu()) {
    throw Error(ErrorKind::kValue, "out: on a device, the output of a blocked quantize / dequantize may not overlap "
                                   "its inputs other than in place; pass a separate output");
  }
  if (shared) {
    std::vector<unsigned char> buffer(static_cast<std::size_t>(std::max<std::int64_t>(call.out.numel(), 1)) * dtype_size(call.out.dtype));
    ElementwiseCall private_call = call;
    private_call.out = MutableTensorView(buffer.data(), call.out.dtype, call.out.shape);
    run_with_layout(private_call, x, params[0], nparams == 2 ? &params[1] : nullptr, layout);
    copy_into(buffer.data(), call.out);
    return;
  }
  const int a = layout.axis;
  const std::int64_t b = layout.block_size;
  const std::int64_t d = x.shape[a];
  const std::int64_t whole = d / b, rest = d % b;
  if (whole > 0) {
    if (rank < kMaxRank) {
      TensorView pv[2];
      for (int k = 0; k < nparams; ++k) pv[k] = split(slice(params[k], a, 0, whole), a, whole, b, true);
      run(split(slice(x, a, 0, whole * b), a, whole, b, false), pv,
          split(slice(call.out, a, 0, whole * b), a, whole, b, false));
    } else {
      // No room for the extra dimension: one call per block.
      for (std::int64_t i = 0; i < whole; ++i) {
        TensorView pv[2];
        for (int k = 0; k < nparams; ++k) pv[k] = slice(params[k], a, i, 1);
        run(slice(x, a, i * b, b), pv, slice(call.out, a, i * b, b));
      }
    }
  }
  if (rest > 0) {
    TensorView pv[2];
    for (int k = 0; k < nparams; ++k) pv[k] = slice(params[k], a, whole, 1);
    run(slice(x, a, whole * b, rest), pv, slice(call.out, a, whole * b, rest));
  }
}

void require_exact_output(const MutableTensorView& out, const TensorSpec& spec, const char* op) {
  if (!(out.shape == spec.shape) || out.dtype != spec.dtype) {
    throw Error(ErrorKind::kValue, std::string(op) + ": out must have shape " + spec.shape.str() + " and dtype " +
                                       dtype_name(spec.dtype) + " (got " + out.shape.str() + " " +
                                       dtype_name(out.dtype) + ")");
  }
}

}  // namespace polyquant::detail

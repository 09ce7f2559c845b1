// The elementwise engine shared by every op: numpy broadcasting of the operands onto the output
// shape, dimension coalescing, dtype conversion of operands into the kernel's working types,
// strided gathers and scatters, and the split of the work over threads. Kernels only ever see
// contiguous or broadcast runs (kernels/row.h).
#pragma once

#include <optional>
#include <span>

#include "kernels/row.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

struct ElementwiseCall {
  std::span<const TensorView> inputs;   // each broadcastable to out.shape
  std::span<const DType> kernel_dtypes; // dtype the kernel reads for each input (converted if needed)
  MutableTensorView out;                // exactly the broadcast shape
  DType kernel_out_dtype = DType::kFloat32;  // dtype the kernel writes (converted to out.dtype)
  RowKernel kernel = nullptr;
  const void* params = nullptr;
  // The op and working precision `kernel` computes: the device backend's launcher of the same
  // per-element row (core/device_elementwise.h). A call without them runs on the host only.
  std::optional<KernelOp> op;
  WorkType work = WorkType::kF32;
  // The kernel reads per-row operands (RowArgs::per_row_mask): short rows whose operand holds one
  // value per row are then fused with that operand passed compact instead of expanded.
  bool per_row_operands = false;
  // The kernel reads repeated-row operands (RowArgs::repeated_row_mask): short rows that all reuse
  // one row of an operand (a per-channel parameter, channels last) are then fused into long calls
  // with that row passed once, instead of calls of a few thousand elements reading a copy tiled
  // over the fused rows (such copies share the L1 cache with the streams of x and the output).
  bool repeated_row_operands = false;
};

void run_elementwise(const ElementwiseCall& call);

// Converts n values between dtypes as numpy's astype does (float64 -> float32 -> float16 round
// to nearest even; integer -> float round to nearest). Strides in elements. Contiguous runs go
// through the conversion kernel of the kernel set in use; convert_values_scalar
// (kernels/convert/kernels.h) is the spec every kernel equals. `stream`: dst is part of an output
// far larger than the caches (RowArgs::stream: the kernel may store it non-temporally).
void convert_values(const void* src, DType src_dtype, std::int64_t src_stride, void* dst, DType dst_dtype,
                    std::int64_t dst_stride, std::int64_t n, bool stream = false);

// Writes `from` (any dtype and layout, broadcast to out's shape) into `out` (any layout), values
// converted as convert_values does.
void convert_into(const TensorView& from, const MutableTensorView& out);

// Copies a C-contiguous `src` of out's shape and dtype into the strided `out` (any layout).
void copy_into(const unsigned char* src, const MutableTensorView& out);

// Whether two views share any byte (strides of any sign; empty views share none).
bool views_overlap(const void* a_data, const Layout& a, const void* b_data, const Layout& b);

// The element offset (in elements, from view's data) of flat row-major index `index` of `view`.
std::int64_t element_offset(const Layout& view, std::int64_t index);

// Reads element `index` (flat, row-major over view.shape) of any view as a double.
double read_as_double(const TensorView& view, std::int64_t index);

}  // namespace polyquant::detail

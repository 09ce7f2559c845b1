// Grouped reductions: per-channel / per-block statistics of a C-contiguous float32 tensor, the
// reductions behind data-dependent scales (QKeras' auto/auto_po2 scales) and statistics (AIMET's
// MinMax encoding analyzer).
//
// A GroupedLayout maps every element of a tensor to a group: each dimension either keeps its
// index (it selects the group) or is reduced over; a kept dimension of length N may be split into
// [N / e, e] with the inner e reduced, so e consecutive channels share a group (blocks). An
// optional auxiliary operand (the current scale of an iterative search) is read through its own
// broadcast strides.
//
// Determinism: no result depends on the thread count. When some outer dimension is kept, threads
// split the first kept dimension (groups are disjoint across threads, each accumulated in the C
// order of its elements by one thread); when only the innermost dimension is kept (channels last)
// or everything is reduced into one group, the rows (or, for one group, x as one flat run) are cut
// into chunks whose size depends only on the shape, and the chunks' partial results are combined
// in chunk order.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "polyquant/tensor.h"

namespace polyquant::detail {

inline constexpr int kMaxGroupedRank = 2 * kMaxRank;

struct GroupedLayout {
  int rank = 0;
  std::array<std::int64_t, kMaxGroupedRank> shape{};
  std::array<std::int64_t, kMaxGroupedRank> x_stride{};      // C-contiguous strides of x
  std::array<std::int64_t, kMaxGroupedRank> group_stride{};  // 0 for reduced dimensions
  std::array<std::int64_t, kMaxGroupedRank> aux_stride{};    // 0 where the auxiliary operand broadcasts
  std::int64_t num_groups = 1;
  std::int64_t group_size = 1;  // elements per group
  std::int64_t numel = 1;
};

// The layout of a tensor of `shape` whose dimension d is kept when keep[d], split into blocks of
// block[d] (> 0; 1 = no split) when kept. Groups are numbered in C order of the kept (blocked)
// indices. `aux_shape`/`aux` describe the auxiliary operand's broadcast shape (rank <= shape.rank,
// right-aligned, numpy rules); pass an empty Dims for none.
inline GroupedLayout make_grouped_layout(const Dims& shape, const std::vector<bool>& keep, const std::vector<std::int64_t>& block,
                                         const Dims& aux_shape) {
  GroupedLayout L;
  const int r = shape.rank;
  const Dims aux_strides = contiguous_strides(aux_shape);
  std::int64_t x_stride = 1;
  std::array<std::int64_t, kMaxGroupedRank> shape_rev{}, xs_rev{}, kept_rev{}, aux_rev{};
  std::array<bool, kMaxGroupedRank> kept_flag{};
  int n = 0;
  // Build from the innermost dimension outwards, then reverse.
  for (int d = r - 1; d >= 0; --d) {
    const std::int64_t len = shape[d];
    const int ad = d - (r - aux_shape.rank);
    const std::int64_t as = (ad < 0 || aux_shape[ad] == 1) ? 0 : aux_strides[ad];
    const std::int64_t b = keep[static_cast<std::size_t>(d)] ? block[static_cast<std::size_t>(d)] : 1;
    if (keep[static_cast<std::size_t>(d)] && b > 1) {
      // [len / b (kept), b (reduced)]: inner first (reversed order)
      shape_rev[n] = b; xs_rev[n] = x_stride; kept_flag[n] = false; aux_rev[n] = as; ++n;
      shape_rev[n] = len / b; xs_rev[n] = x_stride * b; kept_flag[n] = true; aux_rev[n] = as * b; ++n;
    } else {
      shape_rev[n] = len; xs_rev[n] = x_stride; kept_flag[n] = keep[static_cast<std::size_t>(d)]; aux_rev[n] = as; ++n;
    }
    x_stride *= len;
  }
  std::int64_t g = 1;
  for (int i = 0; i < n; ++i) {
    kept_rev[i] = kept_flag[i] ? g : 0;
    if (kept_flag[i]) g *= shape_rev[i];
  }
  L.rank = n;
  L.num_groups = g;
  L.numel = x_stride;
  for (int i = 0; i < n; ++i) {
    L.shape[n - 1 - i] = shape_rev[i];
    L.x_stride[n - 1 - i] = xs_rev[i];
    L.group_stride[n - 1 - i] = kept_rev[i];
    L.aux_stride[n - 1 - i] = aux_rev[i];
  }
  L.group_size = g == 0 ? 0 : x_stride / g;
  if (n == 0) {  // a 0-d tensor: one element, one group
    L.rank = 1;
    L.shape[0] = 1;
    L.x_stride[0] = 1;
    L.group_stride[0] = 0;
    L.aux_stride[0] = 0;
    L.group_size = 1;
    L.numel = 1;
  }
  return L;
}

// Calls visit(i, group) for every element i of x in C order (i = 0 .. numel - 1) with the group it
// belongs to: an odometer over the layout's dimensions that steps the group index by group_stride.
// For the plain loops (float64 data, index building) that do not go through grouped_reduce.
template <class Visit>
void for_each_element_group(const GroupedLayout& L, Visit&& visit) {
  std::array<std::int64_t, kMaxGroupedRank> idx{};
  std::int64_t group = 0;
  for (std::int64_t i = 0; i < L.numel; ++i) {
    visit(i, group);
    for (int d = L.rank - 1; d >= 0; --d) {
      const auto ud = static_cast<std::size_t>(d);
      if (++idx[ud] < L.shape[ud]) {
        group += L.group_stride[ud];
        break;
      }
      group -= (L.shape[ud] - 1) * L.group_stride[ud];
      idx[ud] = 0;
    }
  }
}

// Runs `reducer` over every element: reducer.row(acc + g0, group_stride, x + x0, aux + a0,
// aux_stride, n) folds a run of n elements along the innermost dimension (x stride 1) into the
// accumulators of its groups; optionally reducer.rows(acc, group_stride, x, x_row_stride, aux,
// aux_stride, n, rows) folds several such runs into the same accumulators (channels last), in row
// order; reducer.merge(into, from) folds partial results.
// Each thread holds a Reducer::ThreadEnv (a scoped floating-point environment) over its share. `acc` holds num_groups accumulators, initialised by the caller.
template <class Reducer>
void grouped_reduce(const float* x, const float* aux, const GroupedLayout& L, const Reducer& reducer,
                    typename Reducer::Acc* acc) {
  using Acc = typename Reducer::Acc;
  if (L.numel == 0) return;
  const int r = L.rank;
  const int inner = r - 1;
  // Walks dims [0, inner) as an odometer with dimension `split` limited to [lo, hi), calling the
  // row fold on each innermost run.
  // A reducer with runs() takes the runs along dimension inner - 1 in one call when the innermost
  // dimension is reduced: reducer.runs(acc, group_stride, x, x_stride, aux, aux_stride,
  // aux_inner_stride, n, count) folds `count` runs of n elements (run r at x + r * x_stride, into
  // acc + r * group_stride, its scale at aux + r * aux_stride, stepping aux_inner_stride) in run
  // order, as `count` row() calls would: many short groups (a tall, narrow tensor reduced along
  // its rows) without a call per row.
  constexpr bool has_runs = requires(const Reducer& rd, Acc* ac, const float* p) { rd.runs(ac, std::int64_t{}, p, std::int64_t{}, p, std::int64_t{}, std::int64_t{}, std::int64_t{}, std::int64_t{}); };
  const bool batch_runs = has_runs && r >= 2 && L.group_stride[static_cast<std::size_t>(inner)] == 0;
  auto walk_runs = [&](int split, std::int64_t lo, std::int64_t hi, Acc* accs) {
    if constexpr (has_runs) {
      const int mid = inner - 1;
      const auto um = static_cast<std::size_t>(mid);
      std::array<std::int64_t, kMaxGroupedRank> idx{};
      for (int d = 0; d < mid; ++d) idx[static_cast<std::size_t>(d)] = d == split ? lo : 0;
      const std::int64_t mid_lo = split == mid ? lo : 0;
      const std::int64_t mid_hi = split == mid ? hi : L.shape[um];
      if (mid_hi <= mid_lo) return;
      for (;;) {
        std::int64_t xo = mid_lo * L.x_stride[um], go = mid_lo * L.group_stride[um], ao = mid_lo * L.aux_stride[um];
        for (int d = 0; d < mid; ++d) {
          xo += idx[static_cast<std::size_t>(d)] * L.x_stride[static_cast<std::size_t>(d)];
          go += idx[static_cast<std::size_t>(d)] * L.group_stride[static_cast<std::size_t>(d)];
          ao += idx[static_cast<std::size_t>(d)] * L.aux_stride[static_cast<std::size_t>(d)];
        }
        reducer.runs(accs + go, L.group_stride[um], x + xo, L.x_stride[um], aux == nullptr ? nullptr : aux + ao, L.aux_stride[um],
                     L.aux_stride[static_cast<std::size_t>(inner)], L.shape[static_cast<std::size_t>(inner)], mid_hi - mid_lo);
        int d = mid - 1;
        for (; d >= 0; --d) {
          const std::int64_t end = d == split ? hi : L.shape[static_cast<std::size_t>(d)];
          if (++idx[static_cast<std::size_t>(d)] < end) break;
          idx[static_cast<std::size_t>(d)] = d == split ? lo : 0;
        }
        if (d < 0) return;
      }
    }
  };
  auto walk = [&](int split, std::int64_t lo, std::int64_t hi, Acc* accs) {
    if (batch_runs) {
      walk_runs(split, lo, hi, accs);
      return;
    }
    std::array<std::int64_t, kMaxGroupedRank> idx{};
    for (int d = 0; d < r; ++d) idx[static_cast<std::size_t>(d)] = d == split ? lo : 0;
    const std::int64_t inner_lo = split == inner ? lo : 0;
    const std::int64_t inner_hi = split == inner ? hi : L.shape[static_cast<std::size_t>(inner)];
    if (inner_hi <= inner_lo) return;
    for (;;) {
      std::int64_t xo = inner_lo * L.x_stride[static_cast<std::size_t>(inner)];
      std::int64_t go = inner_lo * L.group_stride[static_cast<std::size_t>(inner)];
      std::int64_t ao = inner_lo * L.aux_stride[static_cast<std::size_t>(inner)];
      for (int d = 0; d < inner; ++d) {
        xo += idx[static_cast<std::size_t>(d)] * L.x_stride[static_cast<std::size_t>(d)];
        go += idx[static_cast<std::size_t>(d)] * L.group_stride[static_cast<std::size_t>(d)];
        ao += idx[static_cast<std::size_t>(d)] * L.aux_stride[static_cast<std::size_t>(d)];
      }
      reducer.row(accs + go, L.group_stride[static_cast<std::size_t>(inner)], x + xo, aux == nullptr ? nullptr : aux + ao,
                  L.aux_stride[static_cast<std::size_t>(inner)], inner_hi - inner_lo);
      int d = inner - 1;
      for (; d >= 0; --d) {
        const std::int64_t end = d == split ? hi : L.shape[static_cast<std::size_t>(d)];
        if (++idx[static_cast<std::size_t>(d)] < end) break;
        idx[static_cast<std::size_t>(d)] = d == split ? lo : 0;
      }
      if (d < 0) return;
    }
  };
  int split = -1;
  for (int d = 0; d < r; ++d) {
    if (L.group_stride[static_cast<std::size_t>(d)] != 0 && L.shape[static_cast<std::size_t>(d)] > 1) {
      split = d;
      break;
    }
  }
  const std::int64_t cols = split == inner ? L.shape[static_cast<std::size_t>(inner)] : 0;
  const std::int64_t rows = split == inner ? L.numel / cols : 0;
  const std::int64_t row_bytes = cols * static_cast<std::int64_t>(sizeof(Acc));
  if (split >= 0 && split == inner && rows >= 2 && row_bytes <= (std::int64_t{8} << 20)) {
    // Only the innermost dimension selects the group (channels last): x is rows of `cols` groups.
    // Splitting the columns would have each thread read a narrow strip of every row; instead
    // chunks of whole rows, sized from the shape alone, each fold into their own partial row of
    // accumulators, combined in chunk order (so no result depends on the thread count). The
    // partials are bounded to ~8 MiB (wider rows: the columns are split, in wide strips).
    const std::int64_t max_chunks = std::max<std::int64_t>(1, (std::int64_t{8} << 20) / std::max<std::int64_t>(row_bytes, 1));
    std::int64_t chunk_rows = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / cols);
    chunk_rows = std::max(chunk_rows, (rows + max_chunks - 1) / max_chunks);
    const std::int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    std::vector<Acc> partials(static_cast<std::size_t>(chunks * L.num_groups), acc[0]);
    const std::int64_t group_stride = L.group_stride[static_cast<std::size_t>(inner)];
    const std::int64_t aux_stride = L.aux_stride[static_cast<std::size_t>(inner)];
    parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      const typename Reducer::ThreadEnv env;
      for (std::int64_t c = c0; c < c1; ++c) {
        Acc* part = partials.data() + c * L.num_groups;
        const std::int64_t r0 = c * chunk_rows, r1 = std::min(rows, (c + 1) * chunk_rows);
        // Outer dimensions are reduced (aux broadcasts over them) or of extent 1. A reducer with
        // rows() takes the chunk's rows at once (to fold a few rows per pass over its
        // accumulators); each accumulator still receives its rows in order.
        if constexpr (requires { reducer.rows(part, group_stride, x, cols, aux, aux_stride, cols, r1 - r0); }) {
          reducer.rows(part, group_stride, x + r0 * cols, cols, aux, aux_stride, cols, r1 - r0);
        } else {
          for (std::int64_t r = r0; r < r1; ++r) reducer.row(part, group_stride, x + r * cols, aux, aux_stride, cols);
        }
      }
    });
    for (std::int64_t c = 0; c < chunks; ++c) {
      for (std::int64_t g = 0; g < L.num_groups; ++g) reducer.merge(acc[g], partials[static_cast<std::size_t>(c * L.num_groups + g)]);
    }
    return;
  }
  if (split >= 0) {
    // Elements per index of the split dimension: the grain keeps each task at >= 64 Ki elements.
    const std::int64_t per_index = L.numel / L.shape[static_cast<std::size_t>(split)];
    const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(per_index, 1));
    parallel_for(L.shape[static_cast<std::size_t>(split)], grain, [&](std::int64_t lo, std::int64_t hi) {
      const typename Reducer::ThreadEnv env;
      walk(split, lo, hi, acc);
    });
    return;
  }
  std::int64_t aux_strides = 0;
  for (int d = 0; d < r; ++d) aux_strides |= L.aux_stride[static_cast<std::size_t>(d)];
  if (L.num_groups == 1 && aux_strides == 0) {
    // One group and one auxiliary value: x is one contiguous run of numel elements, cut into
    // chunks of 64 Ki elements (so a (1, n) or (2, n) tensor still splits across threads), each
    // folded by one row() call into its own partial, combined in chunk order.
    constexpr std::int64_t kChunk = std::int64_t{1} << 16;
    const std::int64_t chunks = (L.numel + kChunk - 1) / kChunk;
    std::vector<Acc> partials(static_cast<std::size_t>(chunks), acc[0]);
    parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
      const typename Reducer::ThreadEnv env;
      for (std::int64_t c = c0; c < c1; ++c) {
        const std::int64_t lo = c * kChunk;
        reducer.row(partials.data() + c, 0, x + lo, aux, 0, std::min(L.numel, lo + kChunk) - lo);
      }
    });
    for (const Acc& part : partials) reducer.merge(acc[0], part);
    return;
  }
  // One group whose auxiliary operand varies over the reduced dimensions: chunks of the outermost
  // dimension, sized from the shape alone, each folded into its own partial, combined in chunk order.
  const std::int64_t outer = L.shape[0];
  const std::int64_t per_index = L.numel / std::max<std::int64_t>(outer, 1);
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 16) / std::max<std::int64_t>(per_index, 1));
  const std::int64_t chunks = (outer + chunk - 1) / chunk;
  std::vector<Acc> partials(static_cast<std::size_t>(chunks * L.num_groups), acc[0]);
  parallel_for(chunks, 1, [&](std::int64_t c0, std::int64_t c1) {
    const typename Reducer::ThreadEnv env;
    for (std::int64_t c = c0; c < c1; ++c) {
      walk(0, c * chunk, std::min(outer, (c + 1) * chunk), partials.data() + c * L.num_groups);
    }
  });
  for (std::int64_t c = 0; c < chunks; ++c) {
    for (std::int64_t g = 0; g < L.num_groups; ++g) reducer.merge(acc[g], partials[static_cast<std::size_t>(c * L.num_groups + g)]);
  }
}

}  // namespace polyquant::detail

// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), the generator TensorFlow's random ops use. A draw is a pure function of
// (key, counter), so a stochastic result depends on the user's seed and the element's index only:
// never on thread count, kernel set or call order.
#pragma once

#include <array>
#include <cstdint>

#include "core/target.h"

namespace polyquant::detail {

POLYQUANT_HD inline std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter, std::array<std::uint32_t, 2> key) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * counter[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * counter[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

// The uniform U in [0, 1) of element `index` in random stream `stream` under `seed`: 23 random
// bits on the lattice k * 2^-23, TensorFlow's float32 uniform (its mantissa-fill construction
// gives exactly these values).
POLYQUANT_HD inline float uniform_on_2pow23_lattice(std::uint64_t seed, std::uint32_t stream, std::uint64_t index) {
  const auto words = philox4x32_10({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), stream, 0x51ed270bu},
                                   {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
  return static_cast<float>(words[0] & 0x7fffffu) * 0x1p-23f;
}

}  // namespace polyquant::detail

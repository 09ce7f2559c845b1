// ONNX's packed storage of sub-byte types (polyquant/onnx_qdq.h: pack_sub_byte, unpack_sub_byte).
// Bit shuffling only, no numerics. The loops read and write whole 16- / 32-bit little-endian words
// of codes (two or four elements) so the compiler turns them into plain vector shifts and masks;
// the ragged end goes element by element.
#include <cstring>
#include <string>

#include "polyquant/error.h"
#include "polyquant/onnx_qdq.h"

namespace polyquant::onnx {
namespace {

void check_bits(int bits, const char* what) {
  if (bits != 2 && bits != 4) {
    throw Error(ErrorKind::kValue, std::string(what) + ": bits must be 2 or 4 (int2/uint2 or int4/uint4/float4e2m1), got " +
                                       std::to_string(bits));
  }
}

void check_n(std::int64_t n, const char* what) {
  if (n < 0) throw Error(ErrorKind::kValue, std::string(what) + ": n must be >= 0, got " + std::to_string(n));
}

// Codes c0..c(k-1) (k = 8 / kBits) of one little-endian word -> their packed byte.
template <int kBits>
std::uint8_t pack_word(const std::uint8_t* codes) {
  constexpr unsigned mask = (1u << kBits) - 1;
  if constexpr (kBits == 4) {
    std::uint16_t w;
    std::memcpy(&w, codes, 2);
    return static_cast<std::uint8_t>((w & mask) | ((w >> 8 & mask) << 4));
  } else {
    std::uint32_t w;
    std::memcpy(&w, codes, 4);
    return static_cast<std::uint8_t>((w & mask) | ((w >> 8 & mask) << 2) | ((w >> 16 & mask) << 4) | ((w >> 24 & mask) << 6));
  }
}

template <int kBits>
void unpack_word(std::uint8_t byte, std::uint8_t* codes) {
  constexpr unsigned mask = (1u << kBits) - 1;
  if constexpr (kBits == 4) {
    const std::uint16_t w = static_cast<std::uint16_t>((byte & mask) | ((byte >> 4) << 8));
    std::memcpy(codes, &w, 2);
  } else {
    const std::uint32_t w = (byte & mask) | ((byte >> 2 & mask) << 8) | ((byte >> 4 & mask) << 16) |
                            (static_cast<std::uint32_t>(byte >> 6) << 24);
    std::memcpy(codes, &w, 4);
  }
}

template <int kBits>
void pack_all(const std::uint8_t* codes, std::int64_t n, std::uint8_t* packed) {
  constexpr int per = 8 / kBits;
  const std::int64_t full = n / per;
  for (std::int64_t b = 0; b < full; ++b) packed[b] = pack_word<kBits>(codes + b * per);
  if (full * per < n) {  // the last byte's unused high bits stay zero
    unsigned byte = 0;
    for (std::int64_t i = full * per; i < n; ++i) byte |= (codes[i] & ((1u << kBits) - 1)) << (kBits * (i - full * per));
    packed[full] = static_cast<std::uint8_t>(byte);
  }
}

template <int kBits>
void unpack_all(const std::uint8_t* packed, std::int64_t n, std::uint8_t* codes) {
  constexpr int per = 8 / kBits;
  const std::int64_t full = n / per;
  for (std::int64_t b = 0; b < full; ++b) unpack_word<kBits>(packed[b], codes + b * per);
  for (std::int64_t i = full * per; i < n; ++i) {
    codes[i] = static_cast<std::uint8_t>((packed[full] >> (kBits * (i - full * per))) & ((1u << kBits) - 1));
  }
}

}  // namespace

std::int64_t packed_size(std::int64_t n, int bits) {
  check_bits(bits, "packed_size");
  check_n(n, "packed_size");
  const std::int64_t per = 8 / bits;
  return n / per + (n % per != 0);
}

void pack_sub_byte(const std::uint8_t* codes, std::int64_t n, int bits, std::uint8_t* packed) {
  check_bits(bits, "pack_sub_byte");
  check_n(n, "pack_sub_byte");
  if (bits == 4) pack_all<4>(codes, n, packed);
  else pack_all<2>(codes, n, packed);
}

void unpack_sub_byte(const std::uint8_t* packed, std::int64_t n, int bits, std::uint8_t* codes) {
  check_bits(bits, "unpack_sub_byte");
  check_n(n, "unpack_sub_byte");
  if (bits == 4) unpack_all<4>(packed, n, codes);
  else unpack_all<2>(packed, n, codes);
}

}  // namespace polyquant::onnx

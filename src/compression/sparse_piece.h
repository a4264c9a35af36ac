// Sparse pieces: one rank's (index, value) pairs of a dense fp32 vector of n elements, in the
// form the sparse allgather (collectives/sparse_allgather.cc) puts on the wire, and the
// densification every rank runs on the same pieces in the same order.
//
//   off size field
//     0    2 magic       "GS" (0x5347 little-endian)
//     2    1 bits        value width: 32 (fp32), 8, 4 or 2 (sign + magnitude codes)
//     3    1 version     kSparseVersion
//     4    8 n           dense length (<= kMaxElements)
//    12    8 m           pairs (<= n)
//    20    8 index_bytes length of the index stream
//    28      index stream: the m indices in strictly ascending order as LEB128 varints, the first
//            as is, each next one as (index - previous - 1); at most 10 bytes each, no
//            overlong forms (a last byte of 0 after the first)
//            values in index order: fp32 each, or per block of kSparseBlock values an f32 min,
//            an f32 step and the block's codes packed as affine.h packs them
//
// The quantized widths code each value as its sign (the top bit, exact) and its magnitude
// fitted affinely over the block (round to nearest, L = 2^(bits-1) - 1 levels: 127, 7, 1), as
// top-k's quantized values do (topk.h). At 1 % density the index stream costs about a byte per
// pair (a gap of < 128 is one byte), so a piece with 2-bit values is about 1.3 bytes per pair:
// some 300x fewer bytes than the dense fp32 vector.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace geoccl::compression {

inline constexpr uint16_t kSparseMagic = 0x5347;  // "GS"
inline constexpr uint8_t kSparseVersion = 1;
inline constexpr size_t kSparseHeaderSize = 28;
inline constexpr size_t kSparseBlock = 4096;

// Whether `bits` is a value width a piece can carry (32, 8, 4, 2).
bool sparse_bits_valid(uint32_t bits);

// Encodes the pairs (indices[i], values[i]), i < m, of a vector of n elements with `bits`-wide
// values. The pairs may come in any order; the piece holds them in index order. Writes to
// `decoded` (m values, may alias `values`), in the caller's order, the value every rank decodes
// for each pair: the value itself for 32 bits, its quantization otherwise. Error(kInvalidArgument)
// for a bad width, an index outside [0, n), a repeated index, n above kMaxElements, or m
// different from values.size() or decoded.size(); nothing is written then.
std::vector<uint8_t> sparse_encode(uint32_t bits, uint64_t n, std::span<const int64_t> indices,
                                   std::span<const float> values, std::span<float> decoded);

// What a piece's header says, checked against its length and the expected dense length.
struct SparseInfo {
  uint32_t bits = 0;
  uint64_t n = 0, m = 0, index_bytes = 0;
};
// Reads and checks a piece's header and total length. Error(kProtocol) for a malformed piece
// (magic, version, width, m > n, a length that disagrees with m and index_bytes),
// Error(kMismatch) when its n differs from `n`.
SparseInfo sparse_info(std::span<const uint8_t> piece, uint64_t n);

// dst[index] += value for every pair of `piece`, in index order (dst.size() is the dense
// length). Error(kProtocol) for a malformed piece (as sparse_info, plus a bad or overlong varint,
// an index stream of the wrong length, an index out of range or not ascending, non-zero padding
// bits), Error(kMismatch) for another dense length; dst is untouched on either.
void sparse_add(std::span<const uint8_t> piece, std::span<float> dst);

// dst = the sum of the pieces' pairs, added piece by piece in the order given (a zero where no
// piece has a pair). Every rank that densifies the same pieces in the same order gets the same
// bits. Errors as sparse_add; dst is zeroed first, so a failure leaves it partly summed.
void sparse_densify(std::span<const std::span<const uint8_t>> pieces, std::span<float> dst);

}  // namespace geoccl::compression

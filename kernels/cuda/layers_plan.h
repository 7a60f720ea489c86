// The index arithmetic of DecodeLayers (decode_layers.cu), shared with a
// host test (kernels/layers_plan_test.cpp): how a block's share of a
// matrix splits into the ring's stages, and how a computing warp walks a
// stage's 16-byte pieces. Compiles as CUDA (host and device) and as C++.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define BRAID_HD __host__ __device__ __forceinline__
#else
#define BRAID_HD inline
#endif

namespace braid::kernels::cuda::layers {

constexpr int kConsumerWarps = 8;  // the warps that compute; one more loads
constexpr int kChunk = 32768;      // bytes a stage

BRAID_HD int Min(int a, int b) { return a < b ? a : b; }
BRAID_HD int Max(int a, int b) { return a > b ? a : b; }

// A block's share of a matrix w [rows, k] (bf16): rows [row0, row1), in
// `chunks` stages of rows_per_chunk whole rows, or, with pieces > 1, of
// an equal part of one row each.
struct Share {
  const uint16_t* w = nullptr;
  int k = 0, row0 = 0, row1 = 0, pieces = 1, rows_per_chunk = 1, chunks = 0;
};
// Rows of `rows` taken `unit` at a time, split evenly over G blocks.
BRAID_HD Share ShareOf(const uint16_t* w, int rows, int k, int unit, int pieces, int b, int G) {
  Share s;
  s.w = w;
  s.k = k;
  s.pieces = pieces;
  const int units = rows / unit;
  s.row0 = unit * static_cast<int>(static_cast<int64_t>(units) * b / G);
  s.row1 = unit * static_cast<int>(static_cast<int64_t>(units) * (b + 1) / G);
  if (pieces == 1) {
    s.rows_per_chunk = Max(1, kChunk / (2 * k));
    s.chunks = (s.row1 - s.row0 + s.rows_per_chunk - 1) / s.rows_per_chunk;
  } else {
    s.chunks = (s.row1 - s.row0) * pieces;
  }
  return s;
}
// Stage c of a share: rows [r0, r0 + nr), columns [k0, k0 + kk).
struct Chunk {
  int r0 = 0, nr = 0, k0 = 0, kk = 0;
};
BRAID_HD Chunk ChunkOf(const Share& s, int c) {
  Chunk ch;
  if (s.pieces == 1) {
    ch.r0 = s.row0 + c * s.rows_per_chunk;
    ch.nr = Min(s.rows_per_chunk, s.row1 - ch.r0);
    ch.kk = s.k;
  } else {
    ch.r0 = s.row0 + c / s.pieces;
    ch.nr = 1;
    ch.kk = s.k / s.pieces;
    ch.k0 = (c % s.pieces) * ch.kk;
  }
  return ch;
}
// A place in the loader's walk over every stage of every phase of every
// layer: stage c of phase p (of 4) of layer l, whose share is s.
struct Cursor {
  int l = 0, p = -1, c = 0;
  Share s;  // no chunks: Advance moves to the first stage
};
// The next stage, past phases whose share has none; l == n_layer past the
// last. share(l, p) is the block's share of phase p of layer l.
template <typename ShareFn>
BRAID_HD void Advance(Cursor& q, int n_layer, ShareFn&& share) {
  if (++q.c < q.s.chunks) return;
  q.c = 0;
  do {
    if (++q.p == 4) q.p = 0, ++q.l;
    if (q.l >= n_layer) return;
    q.s = share(q.l, q.p);
  } while (q.s.chunks == 0);
}

// The fewest equal parts of a row of k (bf16) that each fit a stage and
// hold a multiple of 256 elements (so that a warp's 32 pieces lie in one
// row); 0 if there are none.
inline int PiecesOf(int k) {
  for (int p = Max(1, (2 * k + kChunk - 1) / kChunk); 256 * p <= k; ++p)
    if (k % (256 * p) == 0) return p;
  return 0;
}
// Warp `warp`'s part of stage ch, whose rows hold per_row pieces each (a
// multiple of 32): a contiguous run of the stage's runs of 32 pieces, in
// segments that each lie in one row: fn(row, col, u, n) for each, with
// row counted from ch.r0, col the segment's first piece within that row's
// part of the stage, u its first run (its pieces start at piece 32 u of
// the stage) and n its runs.
template <typename Fn>
BRAID_HD void WarpRuns(const Chunk& ch, int per_row, int warp, Fn&& fn) {
  const int runs = ch.nr * per_row / 32;
  const int u0 = warp * runs / kConsumerWarps, u1 = (warp + 1) * runs / kConsumerWarps;
  int row = u0 * 32 / per_row, col = u0 * 32 - row * per_row;
  for (int u = u0; u < u1;) {
    const int n = Min(u1 - u, (per_row - col) / 32);  // runs left in this row
    fn(row, col, u, n);
    u += n;
    col += 32 * n;
    if (col == per_row) col = 0, ++row;
  }
}

}  // namespace braid::kernels::cuda::layers

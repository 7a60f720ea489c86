// DecodeLayers' index arithmetic (cuda/layers_plan.h), on the host: the
// blocks' shares cover a matrix's rows once, a share's stages cover its
// rows and columns once and fit a stage, and the computing warps' row
// segments cover a stage's pieces once, each segment in the row and at the
// column its pieces lie in, for the shapes the kernel runs.
#include "cuda/layers_plan.h"

#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

namespace braid::kernels::cuda::layers {
namespace {

// One matrix [rows, k] taken `unit` rows at a time over G blocks.
void CheckMatrix(int rows, int k, int unit, int G) {
  const int pieces = PiecesOf(k);
  const std::string what = "rows " + std::to_string(rows) + ", k " + std::to_string(k) + ", unit " +
                           std::to_string(unit) + ", blocks " + std::to_string(G);
  INFO(what);
  REQUIRE(pieces > 0);
  CHECK(k % (256 * pieces) == 0);
  CHECK(2 * (k / pieces) <= kChunk);
  const int per_row = k / pieces / 8;  // pieces of a row in a stage
  REQUIRE(per_row % 32 == 0);
  std::vector<int> seen(static_cast<size_t>(rows) * pieces, 0);  // (row, part of the row)
  int next_row = 0;
  for (int b = 0; b < G; ++b) {
    const Share s = ShareOf(nullptr, rows, k, unit, pieces, b, G);
    CHECK(s.row0 == next_row);  // the shares follow one another
    CHECK((s.row1 - s.row0) % unit == 0);
    next_row = s.row1;
    for (int c = 0; c < s.chunks; ++c) {
      const Chunk ch = ChunkOf(s, c);
      REQUIRE(ch.nr >= 1);
      REQUIRE(ch.r0 >= s.row0);
      REQUIRE(ch.r0 + ch.nr <= s.row1);
      CHECK(2 * ch.nr * ch.kk <= kChunk);
      CHECK(ch.kk == k / pieces);
      CHECK(ch.k0 % ch.kk == 0);
      for (int r = ch.r0; r < ch.r0 + ch.nr; ++r)
        ++seen[static_cast<size_t>(r) * pieces + ch.k0 / ch.kk];
      // The warps' segments: runs [0, nr * per_row / 32) once each, in order
      // within a warp, each segment inside one row at its own columns.
      const int runs = ch.nr * per_row / 32;
      std::vector<int> taken(runs, 0);
      for (int w = 0; w < kConsumerWarps; ++w) {
        int last = -1;
        WarpRuns(ch, per_row, w, [&](int row, int col, int u, int n) {
          CHECK(n >= 1);
          CHECK(u > last);
          last = u + n - 1;
          CHECK(row >= 0);
          CHECK(row < ch.nr);
          CHECK(col % 32 == 0);
          CHECK(col + 32 * n <= per_row);
          CHECK(u * 32 == row * per_row + col);  // where the stage holds those pieces
          for (int i = u; i < u + n && i < runs; ++i) ++taken[i];
        });
      }
      for (int i = 0; i < runs; ++i) REQUIRE(taken[i] == 1);
    }
  }
  CHECK(next_row == rows);
  for (int v : seen) REQUIRE(v == 1);
}

TEST_CASE("DecodeLayers' stages and warps cover each matrix once") {
  struct Shape {
    int d, n_head, n_kv, hd, n_ff;
  };
  // Llama-3.2-1B, Llama-3-8B and the kernel tests' shapes.
  const Shape shapes[] = {{2048, 32, 8, 64, 8192},
                          {4096, 32, 8, 128, 14336},
                          {512, 8, 2, 64, 1024},
                          {1024, 8, 2, 128, 18432},
                          {2048, 16, 2, 128, 2048}};
  for (const Shape& s : shapes)
    for (int G : {132, 114, 78}) {  // H100 SXM and H200, H100 PCIe, a part of a GPU
      const int q_dim = s.n_head * s.hd;
      CheckMatrix(q_dim + 2 * s.n_kv * s.hd, s.d, 1, G);  // Q/K/V
      CheckMatrix(s.d, q_dim, 1, G);                      // Wo
      CheckMatrix(2 * s.n_ff, s.d, 2, G);                 // gate/up, in pairs
      CheckMatrix(s.d, s.n_ff, 1, G);                     // down
    }
}

TEST_CASE("the loader's walk takes every stage of every phase in order") {
  // Shares of 3 layers x 4 phases, some with no stages (a matrix with
  // fewer rows than blocks leaves some blocks none).
  const int n_layer = 3, G = 132;
  for (int b : {0, 1, 64, 131}) {
    auto share = [&](int l, int p) {
      const int rows = (l + p) % 3 == 0 ? 40 : 300 + 100 * p;  // 40 rows: most blocks none
      return ShareOf(nullptr, rows, 2048, 1, 1, b, G);
    };
    std::vector<std::pair<int, int>> want, got;  // (l * 4 + p, c)
    for (int l = 0; l < n_layer; ++l)
      for (int p = 0; p < 4; ++p)
        for (int c = 0; c < share(l, p).chunks; ++c) want.emplace_back(l * 4 + p, c);
    Cursor q;
    for (Advance(q, n_layer, share); q.l < n_layer; Advance(q, n_layer, share)) {
      REQUIRE(got.size() < want.size() + 1);
      got.emplace_back(q.l * 4 + q.p, q.c);
    }
    CHECK(got == want);
  }
}

TEST_CASE("a row splits into the fewest equal parts of 256 that fit a stage") {
  CHECK(PiecesOf(2048) == 1);
  CHECK(PiecesOf(16384) == 1);        // exactly a stage
  CHECK(PiecesOf(18432) == 2);        // 36 KB: two parts of 9,216
  CHECK(PiecesOf(16384 + 256) == 5);  // 65 x 256: 5 parts of 13 x 256
  CHECK(PiecesOf(1000) == 0);         // not a multiple of 256
}

}  // namespace
}  // namespace braid::kernels::cuda::layers

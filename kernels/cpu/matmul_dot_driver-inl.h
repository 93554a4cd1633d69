// The loop that walks a packed matrix in register tiles, passes of rows and chunks of the input,
// for the dot-product kernels (kernels/cpu only). Included by each instruction set's code inside its
// own namespace, after defining STEADY_DRIVER_TARGET, so that the loop is compiled for that target
// and the Op's Tile is inlined into it (a call per tile, from code compiled for the baseline, cost
// the AVX-512 kernels 10-45%). No include guard, on purpose.
//
// An Op (Bf16Op, Q8Op, ...) has steps (of the input), kChunk (steps whose weights stay in L1 while
// every row of a pass uses them), kTileRows and kTileGroups (its register tile), Shift(groups), and
// Tile<R, C>(r, s0, s1, acc), which adds rows r..r+R-1 of x times C groups of 16 columns over steps
// [s0, s1) into fp32 sums acc[R][C][16], one lane per output, in the order of the steps; with `ahead`
// it also prefetches (PrefetchGroups) the weights of the same steps one chunk later. Whatever
// the tile shape, the pass or the thread, every output is then the same arithmetic, so a 256-bit Op
// with the AVX-512 one's per-lane arithmetic gives the same bits.
//
// Why `ahead`: where a pass has more rows than one tile, the first tile of a chunk reads its weights
// from memory and the others re-read them from L1, so the weight streams go quiet for most of the
// chunk and the hardware prefetchers stop running ahead of them: at 16 rows the AVX-512 q8 kernel took
// one row's memory time plus its arithmetic, one after the other (12.5 ms for a 2048 x 128256 matrix,
// against 6.1 ms at one row; 8.4 ms with `ahead`). So the first kAheadTiles tiles of a pass ask for
// the next chunk's weights as they go: a request for a line already on its way costs little, while one
// tile asking for all of them came out slower, as did a share of the lines per tile or two chunks
// ahead; with every tile of a 32-row pass asking, the 4-bit kernels lost 4-7% at 64 rows. At one tile
// per chunk the reads stream and the hardware keeps up, so no tile asks (asking there cost up to 5%),
// except for an Op with kAheadAlone (the AVX2 4- to 6-bit kernels, whose reads at one row fell
// behind: matmul_dot256.cc). kAheadTiles is in matmul_dot_tiles.h.

// Whether Op's tiles prefetch the next chunk where a pass is one tile (Op::kAheadAlone; else no).
template <class Op>
constexpr bool AheadAlone() {
  if constexpr (requires { Op::kAheadAlone; }) {
    return Op::kAheadAlone;
  } else {
    return false;
  }
}

// y[r, c * 16 + l] (row stride `out`; only the first `valid` columns) for every row of x and the C
// groups at op. Each output is one lane's running sum over the steps in order, whatever the tile.
template <int C, class Op>
STEADY_DRIVER_TARGET void Columns(const Op& op, int rows, float* y, int64_t out, int64_t valid) {
  constexpr int kRows = Op::kTileRows;
  alignas(64) float acc[kPassRows * C * kGroup];
  for (int r0 = 0; r0 < rows; r0 += kPassRows) {
    const int n = std::min(kPassRows, rows - r0);
    const bool ahead = n > kRows || AheadAlone<Op>();
    auto asks = [&](int r) { return ahead && r < kAheadTiles * kRows; };  // the first kAheadTiles tiles
    std::memset(acc, 0, sizeof(float) * n * C * kGroup);
    for (int64_t s0 = 0; s0 < op.steps; s0 += Op::kChunk) {
      const int64_t s1 = std::min(op.steps, s0 + Op::kChunk);
      int r = 0;
      for (; r + kRows <= n; r += kRows) op.template Tile<kRows, C>(r0 + r, s0, s1, acc + r * C * kGroup, asks(r));
      float* a = acc + r * C * kGroup;
      switch (n - r) {
        case 3: if constexpr (kRows > 3) op.template Tile<3, C>(r0 + r, s0, s1, a, asks(r)); break;
        case 2: if constexpr (kRows > 2) op.template Tile<2, C>(r0 + r, s0, s1, a, asks(r)); break;
        case 1: if constexpr (kRows > 1) op.template Tile<1, C>(r0 + r, s0, s1, a, asks(r)); break;
        default: break;
      }
    }
    const int64_t cols = std::min<int64_t>(C * kGroup, valid);
    for (int r = 0; r < n; ++r) std::memcpy(y + (r0 + r) * out, acc + r * C * kGroup, sizeof(float) * cols);
  }
}

// Groups [g0, g1) of y's columns.
template <class Op>
STEADY_DRIVER_TARGET void GroupRange(const Op& op, int rows, int64_t out, int64_t g0, int64_t g1, float* y) {
  int64_t g = g0;
  for (; g + Op::kTileGroups <= g1; g += Op::kTileGroups) {
    Columns<Op::kTileGroups>(op.Shift(g), rows, y + g * kGroup, out, out - g * kGroup);
  }
  for (; g < g1; ++g) Columns<1>(op.Shift(g), rows, y + g * kGroup, out, out - g * kGroup);
}

// Several products of the same rows of x (DotProducts, matmul_dot.h), make(packed) giving each one's
// Op: their column groups split over the compute threads in runs of whole tiles (SplitGroups).
template <class MakeOp>
void Run(const MakeOp& make, int rows, int in, const DotProduct* products, int count) {
  using Op = std::decay_t<decltype(make(nullptr))>;
  SplitGroups(Op::kTileGroups, rows, in, products, count, [&](int i, int64_t g0, int64_t g1) {
    const DotProduct& p = products[i];
    GroupRange(make(p.packed), rows, p.out, g0, g1, p.y);
  });
}

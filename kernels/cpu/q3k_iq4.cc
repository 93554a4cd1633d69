// q3k's, iq4_nl's and iq4_xs's plain readers and their copies in q6k and q8 (q3k_iq4.h); the
// widening kernels are in matmul.cc. Each value is ggml's: (d * scale) * q, or d * value.
#include "kernels/cpu/q3k_iq4.h"

#include <cstring>

#include "kernels/cpu/q6k.h"

namespace steady::cpu {
namespace {

const uint8_t* Q3KBlock(Q3KWeights w, int64_t in, int64_t j, int64_t b) {
  return w.blocks + (j * (in / kQ3KBlock) + b) * kQ3KBlockBytes;
}
const uint8_t* Iq4NlBlock(Iq4NlWeights w, int64_t in, int64_t j, int64_t b) {
  return w.blocks + (j * (in / kQ8Block) + b) * kIq4NlBlockBytes;
}
const uint8_t* Iq4XsBlock(Iq4XsWeights w, int64_t in, int64_t j, int64_t b) {
  return w.blocks + (j * (in / kIq4XsBlock) + b) * kIq4XsBlockBytes;
}

// fn(k, run scale, the run's 16 bytes of indices) for each run of 32 weights of row j: d for IQ4_NL,
// d * scale for IQ4_XS (exact).
template <typename Fn>
void ForEachIq4NlRun(Iq4NlWeights w, int64_t in, int64_t j, const Fn& fn) {
  for (int64_t b = 0; b < in / kQ8Block; ++b) {
    const uint8_t* block = Iq4NlBlock(w, in, j, b);
    fn(b * kQ8Block, F16At(block), block + 2);
  }
}
template <typename Fn>
void ForEachIq4XsRun(Iq4XsWeights w, int64_t in, int64_t j, const Fn& fn) {
  for (int64_t b = 0; b < in / kIq4XsBlock; ++b) {
    const uint8_t* block = Iq4XsBlock(w, in, j, b);
    const float d = F16At(block);
    for (int r = 0; r < kIq4XsBlock / kQ8Block; ++r) {
      fn(b * kIq4XsBlock + r * kQ8Block, d * float(Iq4XsScale(block, r)), block + 8 + 16 * r);
    }
  }
}

}  // namespace

float Q3KWeightValue(Q3KWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = Q3KBlock(w, in, j, k / kQ3KBlock);
  const int v = int(k % kQ3KBlock);
  return Q3KBlockD(block) * float(Q3KScale(block, v / 16)) * float(Q3KBlockQ(block, v));
}

float Iq4NlWeightValue(Iq4NlWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = Iq4NlBlock(w, in, j, k / kQ8Block);
  return F16At(block) * float(Iq4RunValue(block + 2, int(k % kQ8Block)));
}

float Iq4XsWeightValue(Iq4XsWeights w, int64_t in, int64_t j, int64_t k) {
  const uint8_t* block = Iq4XsBlock(w, in, j, k / kIq4XsBlock);
  const int r = int(k % kIq4XsBlock) / kQ8Block;
  return F16At(block) * float(Iq4XsScale(block, r)) * float(Iq4RunValue(block + 8 + 16 * r, int(k % kQ8Block)));
}

void DequantizeQ3K(Q3KWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < in / kQ3KBlock; ++b) {
      const uint8_t* block = Q3KBlock(w, in, j, b);
      const float d = Q3KBlockD(block);
      float* y = out + (j - r0) * in + b * kQ3KBlock;
      for (int s = 0; s < kQ3KBlock / 16; ++s) {
        const float dl = d * float(Q3KScale(block, s));
        for (int v = 16 * s; v < 16 * s + 16; ++v) y[v] = dl * float(Q3KBlockQ(block, v));
      }
    }
  }
}

void DequantizeIq4Nl(Iq4NlWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = r0; j < r1; ++j) {
    ForEachIq4NlRun(w, in, j, [&](int64_t k, float dl, const uint8_t* qs) {
      for (int i = 0; i < kQ8Block; ++i) out[(j - r0) * in + k + i] = dl * float(Iq4RunValue(qs, i));
    });
  }
}

void DequantizeIq4Xs(Iq4XsWeights w, int64_t in, int64_t r0, int64_t r1, float* out) {
  for (int64_t j = r0; j < r1; ++j) {
    ForEachIq4XsRun(w, in, j, [&](int64_t k, float dl, const uint8_t* qs) {
      for (int i = 0; i < kQ8Block; ++i) out[(j - r0) * in + k + i] = dl * float(Iq4RunValue(qs, i));
    });
  }
}

void Q3KToQ6K(Q3KWeights w, int64_t in, int64_t r0, int64_t r1, uint8_t* out) {
  for (int64_t j = r0; j < r1; ++j) {
    for (int64_t b = 0; b < in / kQ3KBlock; ++b) {
      const uint8_t* block = Q3KBlock(w, in, j, b);
      uint8_t* q6k = out + (j - r0) * Q6KBytes(1, in) + b * kQ6KBlockBytes;
      // Q6_K's places (q6k.h): value v = 128 h + 32 t + l has its low 4 bits in ql[64 h + l + 32 (t % 2)]
      // (the high nibble for t >= 2), its high 2 bits at bit 2t of qh[32 h + l], its scale in sc[v / 16].
      std::memset(q6k, 0, size_t(kQ6KBlockBytes));
      for (int v = 0; v < kQ3KBlock; ++v) {
        const int q = Q3KBlockQ(block, v) + 32, h = v / 128, t = (v % 128) / 32, l = v % 32;
        q6k[64 * h + l + 32 * (t % 2)] |= uint8_t((q & 0x0f) << (t >= 2 ? 4 : 0));
        q6k[128 + 32 * h + l] |= uint8_t((q >> 4) << (2 * t));
      }
      for (int s = 0; s < kQ3KBlock / kQ6KSub; ++s) q6k[192 + s] = uint8_t(int8_t(Q3KScale(block, s)));
      std::memcpy(q6k + 208, block + 108, 2);  // d
    }
  }
}

void Iq4NlToQ8(Iq4NlWeights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales) {
  for (int64_t j = r0; j < r1; ++j) {
    ForEachIq4NlRun(w, in, j, [&](int64_t k, float dl, const uint8_t* qs) {
      scales[(j - r0) * (in / kQ8Block) + k / kQ8Block] = dl;
      for (int i = 0; i < kQ8Block; ++i) q[(j - r0) * in + k + i] = int8_t(Iq4RunValue(qs, i));
    });
  }
}

void Iq4XsToQ8(Iq4XsWeights w, int64_t in, int64_t r0, int64_t r1, int8_t* q, float* scales) {
  for (int64_t j = r0; j < r1; ++j) {
    ForEachIq4XsRun(w, in, j, [&](int64_t k, float dl, const uint8_t* qs) {
      scales[(j - r0) * (in / kQ8Block) + k / kQ8Block] = dl;
      for (int i = 0; i < kQ8Block; ++i) q[(j - r0) * in + k + i] = int8_t(Iq4RunValue(qs, i));
    });
  }
}

}  // namespace steady::cpu

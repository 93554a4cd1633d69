// q2k, q3k, iq4_nl and iq4_xs (kernels/cpu/q2k.h, q3k_iq4.h): GGUF's Q2_K, Q3_K, IQ4_NL and IQ4_XS
// blocks read in place. Their fields against a reading written out here from ggml's block layouts,
// the copies of q3k and the IQ4s in q6k and q8 (what the int8 kernels pack) holding the same values
// bit for bit, and the widening kernels giving the fp32 kernel's bits on the dequantized weights. ggml's own dequantization of such blocks
// is compared with Steady's in tests/cli/gguf_llamacpp.sh (libggml through ctypes).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q2k.h"
#include "kernels/cpu/q3k_iq4.h"
#include "kernels/cpu/q6k.h"
#include "tests/random.h"

namespace steady {
namespace {

// Random blocks: every byte random but d, a small fp16 value of either sign (for IQ4_NL a fifth of
// the blocks get d = 0, and for the others some sub-block scales come out 0 by chance).
std::vector<uint8_t> RandomBlocks(int64_t bytes_per_block, int64_t blocks, int d_offset, float unit, std::mt19937_64& rng,
                                  int dmin_offset = -1) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> out(size_t(bytes_per_block * blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    uint8_t* block = out.data() + b * bytes_per_block;
    for (int64_t i = 0; i < bytes_per_block; ++i) block[i] = uint8_t(byte(rng));
    const float d = byte(rng) % 5 == 0 && unit < 1e-3f ? 0.0f : unit * float(1 + byte(rng) % 8) * (byte(rng) % 2 ? 1.0f : -1.0f);
    const uint16_t h = cpu::FloatToF16(d);
    std::memcpy(block + d_offset, &h, 2);
    if (dmin_offset >= 0) {  // Q2_K's dmin: small, of either sign
      const uint16_t m = cpu::FloatToF16(unit * float(byte(rng) % 8) * (byte(rng) % 2 ? 1.0f : -1.0f));
      std::memcpy(block + dmin_offset, &m, 2);
    }
  }
  return out;
}

// ggml's block_q3_K read bit by bit (dequantize_row_q3_K's loops: for each half of 128 values and
// each of four shifts, two runs of 16 with a scale each; the scales unpacked as ggml's kmask code
// does, a 32-bit word at a time).
std::vector<float> GgmlQ3K(const uint8_t* block) {
  const uint8_t* hm = block;
  const uint8_t* q = block + 32;
  uint32_t aux[4];
  std::memcpy(aux, block + 96, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  const int8_t* scales = reinterpret_cast<const int8_t*>(aux);
  uint16_t h;
  std::memcpy(&h, block + 108, 2);
  const float d_all = cpu::F16ToFloat(h);
  std::vector<float> y;
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * float(scales[is++] - 32);
        for (int l = 16 * half; l < 16 * half + 16; ++l) y.push_back(dl * float(((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4)));
      }
    }
  }
  return y;
}

// ggml's block_q2_K read as dequantize_row_q2_K does: per half of 128 values and shift, two runs of
// 16, each with its scale byte's low nibble times d and high nibble times dmin.
std::vector<float> GgmlQ2K(const uint8_t* block) {
  uint16_t h, hm;
  std::memcpy(&h, block + 80, 2);
  std::memcpy(&hm, block + 82, 2);
  const float d = cpu::F16ToFloat(h), min = cpu::F16ToFloat(hm);
  const uint8_t* q = block + 16;
  std::vector<float> y;
  int is = 0;
  for (int n = 0; n < 256; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = block[is++];
        const float dl = d * float(sc & 0xf), ml = min * float(sc >> 4);
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          const float product = dl * float((q[l] >> shift) & 3);  // exact: no fused multiply-add can change it
          y.push_back(product - ml);
        }
      }
    }
  }
  return y;
}

constexpr int8_t kTable[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// ggml's block_iq4_xs and block_iq4_nl read as dequantize_row_iq4_xs and _iq4_nl do.
std::vector<float> GgmlIq4Xs(const uint8_t* block) {
  uint16_t h, scales_h;
  std::memcpy(&h, block, 2);
  std::memcpy(&scales_h, block + 2, 2);
  const float d = cpu::F16ToFloat(h);
  std::vector<float> y(256);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((block[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * float(ls - 32);
    const uint8_t* qs = block + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[32 * ib + j] = dl * float(kTable[qs[j] & 0xf]);
      y[32 * ib + j + 16] = dl * float(kTable[qs[j] >> 4]);
    }
  }
  return y;
}
std::vector<float> GgmlIq4Nl(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  const float d = cpu::F16ToFloat(h);
  std::vector<float> y(32);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kTable[block[2 + j] & 0xf]);
    y[j + 16] = d * float(kTable[block[2 + j] >> 4]);
  }
  return y;
}

// A matrix [out, in] of one of the three types: its bytes and ggml's values.
struct Problem {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};
enum class Type { kQ3K, kIq4Nl, kIq4Xs, kQ2K };
const char* Name(Type t) {
  return t == Type::kQ3K ? "q3k" : t == Type::kIq4Nl ? "iq4_nl" : t == Type::kIq4Xs ? "iq4_xs" : "q2k";
}
int Block(Type t) { return t == Type::kIq4Nl ? 32 : 256; }

Problem Make(Type t, int out, int in, std::mt19937_64& rng) {
  Problem p;
  const int64_t blocks = int64_t(out) * in / Block(t);
  switch (t) {
    case Type::kQ3K: p.bytes = RandomBlocks(cpu::kQ3KBlockBytes, blocks, 108, 0.002f, rng); break;
    case Type::kIq4Nl: p.bytes = RandomBlocks(cpu::kIq4NlBlockBytes, blocks, 0, 0.0005f, rng); break;
    case Type::kIq4Xs: p.bytes = RandomBlocks(cpu::kIq4XsBlockBytes, blocks, 0, 0.00005f, rng); break;
    case Type::kQ2K: p.bytes = RandomBlocks(cpu::kQ2KBlockBytes, blocks, 80, 0.003f, rng, 82); break;
  }
  const int64_t block_bytes = int64_t(p.bytes.size()) / blocks;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = p.bytes.data() + b * block_bytes;
    const std::vector<float> v = t == Type::kQ3K    ? GgmlQ3K(block)
                                 : t == Type::kIq4Nl ? GgmlIq4Nl(block)
                                 : t == Type::kIq4Xs ? GgmlIq4Xs(block)
                                                     : GgmlQ2K(block);
    p.values.insert(p.values.end(), v.begin(), v.end());
  }
  return p;
}

void ExpectSameBits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << what << " at " << i << ": " << got[i] << " against " << want[i];
  }
}

// Every reader gives ggml's values bit for bit (the sign of a zero included): the weight-by-weight
// and row-wise readers, and the copies in q6k (q3k) and q8 (the IQ4s) that the int8 kernels pack
// (q2k has none).
TEST(Q3KIq4Test, ReadersAndTheirCopiesInQ6kAndQ8HoldGgmlsValues) {
  std::mt19937_64 rng(testing::TestSeed());
  for (Type t : {Type::kQ3K, Type::kIq4Nl, Type::kIq4Xs, Type::kQ2K}) {
    for (int in : {256, 512, 1024}) {
      const int out = 7;
      const Problem p = Make(t, out, in, rng);
      std::vector<float> rows(size_t(out) * in), copy(size_t(out) * in), one(size_t(out) * in);
      std::vector<int8_t> q(size_t(out) * in);
      std::vector<float> scales(size_t(out) * in / 32);
      std::vector<uint8_t> q6k(size_t(cpu::Q6KBytes(out, in)));
      switch (t) {
        case Type::kQ2K: {
          const cpu::Q2KWeights w{p.bytes.data()};
          cpu::DequantizeQ2K(w, in, 0, out, rows.data());
          for (int64_t i = 0; i < int64_t(one.size()); ++i) one[size_t(i)] = cpu::Q2KWeightValue(w, in, i / in, i % in);
          break;
        }
        case Type::kQ3K: {
          const cpu::Q3KWeights w{p.bytes.data()};
          cpu::DequantizeQ3K(w, in, 0, out, rows.data());
          for (int64_t i = 0; i < int64_t(one.size()); ++i) one[size_t(i)] = cpu::Q3KWeightValue(w, in, i / in, i % in);
          cpu::Q3KToQ6K(w, in, 0, out, q6k.data());
          cpu::DequantizeQ6K({q6k.data()}, in, 0, out, copy.data());
          break;
        }
        case Type::kIq4Nl:
        case Type::kIq4Xs: {
          if (t == Type::kIq4Nl) {
            const cpu::Iq4NlWeights w{p.bytes.data()};
            cpu::DequantizeIq4Nl(w, in, 0, out, rows.data());
            for (int64_t i = 0; i < int64_t(one.size()); ++i) one[size_t(i)] = cpu::Iq4NlWeightValue(w, in, i / in, i % in);
            cpu::Iq4NlToQ8(w, in, 0, out, q.data(), scales.data());
          } else {
            const cpu::Iq4XsWeights w{p.bytes.data()};
            cpu::DequantizeIq4Xs(w, in, 0, out, rows.data());
            for (int64_t i = 0; i < int64_t(one.size()); ++i) one[size_t(i)] = cpu::Iq4XsWeightValue(w, in, i / in, i % in);
            cpu::Iq4XsToQ8(w, in, 0, out, q.data(), scales.data());
          }
          for (size_t i = 0; i < copy.size(); ++i) copy[i] = float(q[i]) * scales[i / 32];
          break;
        }
      }
      const std::string what = std::string(Name(t)) + " in " + std::to_string(in);
      ExpectSameBits(rows, p.values, what + ", rows");
      ExpectSameBits(one, p.values, what + ", one weight at a time");
      if (t != Type::kQ2K) ExpectSameBits(copy, p.values, what + (t == Type::kQ3K ? ", as q6k" : ", as q8"));
    }
  }
}

// The widening kernels give the fp32 small-row kernel's bits on the dequantized weights (the same
// products in the same order), at row counts across the tiles and passes and at rows not a whole
// chunk (iq4_nl at 96 and 288 inputs).
TEST(Q3KIq4Test, WideningKernelsGiveTheFp32KernelsBitsOnTheirValues) {
  std::mt19937_64 rng(testing::TestSeed() + 1);
  for (Type t : {Type::kQ3K, Type::kIq4Nl, Type::kIq4Xs, Type::kQ2K}) {
    for (int rows : {1, 3, 4, 5, 16, 33}) {
      for (int in : t == Type::kIq4Nl ? std::vector<int>{32, 96, 288, 512} : std::vector<int>{256, 768}) {
        for (int out : {1, 5, 17}) {
          const Problem p = Make(t, out, in, rng);
          const std::vector<float> x = testing::RandomNormal<float>(size_t(rows) * in, rng);
          std::vector<float> got(size_t(rows) * out, NAN), want(size_t(rows) * out, NAN);
          switch (t) {
            case Type::kQ3K: cpu::MatMulNTQ3K(x.data(), rows, in, {p.bytes.data()}, out, got.data()); break;
            case Type::kIq4Nl: cpu::MatMulNTIq4Nl(x.data(), rows, in, {p.bytes.data()}, out, got.data()); break;
            case Type::kIq4Xs: cpu::MatMulNTIq4Xs(x.data(), rows, in, {p.bytes.data()}, out, got.data()); break;
            case Type::kQ2K: cpu::MatMulNTQ2K(x.data(), rows, in, {p.bytes.data()}, out, got.data()); break;
          }
          cpu::MatMulNTSmallRows(x.data(), rows, in, p.values.data(), out, want.data());
          ExpectSameBits(got, want, std::string(Name(t)) + " rows " + std::to_string(rows) + " in " + std::to_string(in) +
                                        " out " + std::to_string(out));
        }
      }
    }
  }
}

}  // namespace
}  // namespace steady

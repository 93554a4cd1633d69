// The AVX-512 helpers the int8 kernels on VPDPBUSD (matmul_dot512.cc) and on AMX tiles
// (matmul_dot_amx.cc) share, so that both do the same arithmetic per output lane. Included inside
// namespace steady::cpu::dot after defining STEADY_DOT_TARGET. No include guard, on purpose.

// sum + s * (ws * xscale) in fp32: a block's int32 sums into the running fp32 sums.
STEADY_DOT_TARGET inline __m512 ScaleOne(__m512i s, __m512 ws, float xscale, __m512 sum) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(ws, _mm512_set1_ps(xscale)), sum);
}

// A q4k/q5k super-block's scales for sub-block s, 16 columns: d * sc and dmin * m (the record's head at
// `head`: fp16 d, fp16 dmin, then the sub-blocks' scales and minimums, a byte each).
STEADY_DOT_TARGET inline void KQuantScales(const uint8_t* head, int64_t s, __m512& scale, __m512& min) {
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head)));
  const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32)));
  scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(head + 64 + 16 * s)))));
  min = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(head + 192 + 16 * s)))));
}
// sum + s * (scale * xscale) - min * (xscale * xsum) in fp32: a K-quant sub-block's int32 sums (and
// its minimum's share, xsum the sub-block's sum of q_x) into the running fp32 sums.
STEADY_DOT_TARGET inline __m512 KQuantOne(__m512i s, __m512 scale, __m512 min, float xscale, int32_t xsum, __m512 sum) {
  sum = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(scale, _mm512_set1_ps(xscale)), sum);
  return _mm512_fnmadd_ps(min, _mm512_set1_ps(xscale * float(xsum)), sum);
}

// Bit m of every byte of q5k's fifth vector moved to bit 4 (the others zero): the fifth bit of the
// low (even m) or high (odd m) nibbles of vector m / 2. 16-bit shifts (by a count the callers' unrolled
// loops make constant): the bits they carry across a byte are masked off.
STEADY_DOT_TARGET inline __m512i FifthBits(__m512i fv, int m) {
  const __m512i moved = m <= 4 ? _mm512_slli_epi16(fv, 4 - m) : _mm512_srli_epi16(fv, m - 4);
  return _mm512_and_si512(moved, _mm512_set1_epi8(0x10));
}

// The low 4 bits of each byte of v (a 4-bit q); with kFifth (q5k, q5_0, q5_1) joined to bit m of the
// fifth vector at `fifth`, (v & low) | its fifth bit in one VPTERNLOGD.
template <bool kFifth>
STEADY_DOT_TARGET inline __m512i Nibbles(__m512i v, __m512i low, const uint8_t* fifth, int m) {
  if constexpr (!kFifth) return _mm512_and_si512(v, low);
  return _mm512_ternarylogic_epi32(v, FifthBits(_mm512_loadu_si512(fifth), m), low, 0xEC);  // (a & c) | b
}

// Bits 2v and 2v + 1 of every byte of q6k's high-bit vector moved to bits 4 and 5 (the others zero):
// the top two bits of a 6-bit q. 16-bit shifts: the bits they carry across a byte are masked off.
STEADY_DOT_TARGET inline __m512i HighBits(__m512i hv, int v) {
  const __m512i moved = v <= 2 ? _mm512_slli_epi16(hv, 4 - 2 * v) : _mm512_srli_epi16(hv, 2 * v - 4);
  return _mm512_and_si512(moved, _mm512_set1_epi8(0x30));
}

// Inputs 4u..4u+3 of a q6k block of 32 (`block`: its 4 nibble vectors, then its 2 high-bit vectors)
// for 16 columns: nibble vector u / 2's low (even u) or high nibbles joined to their two high bits,
// q in 0..63.
STEADY_DOT_TARGET inline __m512i Q6KFour(const uint8_t* block, int u, __m512i low) {
  const __m512i nibbles = _mm512_loadu_si512(block + (u / 2) * 64);
  const __m512i q = _mm512_and_si512(u % 2 == 0 ? nibbles : _mm512_srli_epi16(nibbles, 4), low);
  return _mm512_or_si512(q, HighBits(_mm512_loadu_si512(block + 256 + (u / 4) * 64), u % 4));
}
// A q6k super-block's d * sc of sub-block s (0..15) for 16 columns (the record's head at `head`: fp16
// d, then the sub-blocks' int8 scales), exact.
STEADY_DOT_TARGET inline __m512 Q6KScale(const uint8_t* head, int64_t s) {
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(head)));
  return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(head + 32 + 16 * s)))));
}

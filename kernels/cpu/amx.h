// y = x w^T on Intel AMX tiles (Sapphire Rapids and later): bf16 weights, bf16 activations, fp32
// accumulation (kernels/cpu/amx.cc, docs/cpu.md). One TDPBF16PS instruction multiplies a 16x32 tile
// of activations by a 32x16 tile of weights, 8,192 multiply-adds, about 16 times what the AVX-512
// fp32 kernel does per instruction: with it a decode step's GEMMs cost about one read of the weights
// at 16 or 32 rows as at one.
#ifndef STEADY_KERNELS_CPU_AMX_H_
#define STEADY_KERNELS_CPU_AMX_H_

#include <cstdint>
#include <vector>

namespace steady::cpu {

// Whether this process can run the AMX kernel: the CPU has AMX-TILE, AMX-BF16 and AVX512-BF16, and
// the kernel granted the process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).
bool AmxAvailable();
// Whether it can run the AMX-INT8 kernels (TDPBSUD: kernels/cpu/matmul_dot.h's Int8Path::kAmxInt8):
// AMX-TILE, AMX-INT8 and AVX-512 F/BW/VL, and the tile data state granted.
bool AmxInt8Available();

// Weights in the tile layout: output columns in groups of kAmxGroup (four tiles of 16 columns) and
// inputs in blocks of 32, each 32x16 tile 1 KB with input pairs side by side (what TDPBF16PS reads),
// a group's tiles contiguous so that a thread streams them in order. Padding is zero.
inline constexpr int kAmxGroup = 64;
inline constexpr int kAmxBlock = 32;
int64_t AmxPackedSize(int out, int in);  // in uint16_t values
// w [out, in] in bf16 (kernels/cpu/matmul.h FloatToBf16) -> packed (AmxPackedSize values).
void PackAmxBf16(const uint16_t* w, int out, int in, uint16_t* packed);

// y[rows, out] = bf16(x)[rows, in] w^T, any number of rows (in passes of 16 over each group while
// its weights are in L2), columns split over the compute threads. Each x value is rounded to bf16
// (nearest even); each y[r, j] is the same sum in the same order whatever the number of rows, their
// order or the thread count. Only where AmxAvailable().
void MatMulNTAmxBf16(const float* x, int rows, int in, const uint16_t* packed, int out, float* y);
// The plain reference: x rounded to bf16 as the kernel does, times the row-major bf16 weights, in
// double.
void MatMulNTAmxBf16Reference(const float* x, int rows, int in, const uint16_t* w, int out, float* y);

}  // namespace steady::cpu

#endif  // STEADY_KERNELS_CPU_AMX_H_

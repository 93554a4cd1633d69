// A Model written out as llama.cpp's converter writes a GGUF file (tensor names, q/k rows interleaved
// per head for `llama`), read back by LoadGgufModel: the same logits bit for bit. Also the GGUF
// tokenizers on tiny vocabularies. (The comparison with llama.cpp itself: tests/cli/gguf_llamacpp.sh.)
#include "model/gguf/gguf_model.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/matmul_dot.h"
#include "kernels/cpu/q4k.h"
#include "kernels/cpu/q6k.h"
#include "model/backend/backend.h"
#include "model/checkpoint/safetensors.h"
#include "model/decoder/state_pool.h"
#include "model/gguf/dequantize.h"
#include "model/gguf/gguf_tokenizer.h"
#include "tests/testutil.h"

namespace steady {
namespace {

// A GGUF v3 writer for the test: metadata of a few types, F32 tensors (and others as raw blocks).
class Writer {
 public:
  void Str(const std::string& key, const std::string& v) { Kv(key, 8, [&] { String(v); }); }
  void U32(const std::string& key, uint32_t v) { Kv(key, 4, [&] { Put(v); }); }
  void F32(const std::string& key, float v) { Kv(key, 6, [&] { Put(v); }); }
  void Bool(const std::string& key, bool v) { Kv(key, 7, [&] { Put(uint8_t(v)); }); }
  void Strings(const std::string& key, const std::vector<std::string>& v) {
    Kv(key, 9, [&] {
      Put(uint32_t(8));
      Put(uint64_t(v.size()));
      for (const std::string& s : v) String(s);
    });
  }
  void Floats(const std::string& key, const std::vector<float>& v) {
    Kv(key, 9, [&] {
      Put(uint32_t(6));
      Put(uint64_t(v.size()));
      for (float x : v) Put(x);
    });
  }
  void Ints(const std::string& key, const std::vector<int32_t>& v) {
    Kv(key, 9, [&] {
      Put(uint32_t(5));
      Put(uint64_t(v.size()));
      for (int32_t x : v) Put(x);
    });
  }
  // shape outermost first (PyTorch's order), as the converter's add_tensor takes it.
  void Tensor(const std::string& name, std::vector<int64_t> shape, std::vector<float> values) {
    std::string bytes(values.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), values.data(), bytes.size());
    tensors_.push_back({name, std::move(shape), 0, std::move(bytes)});
  }
  // A tensor of ggml type `type` whose blocks are `bytes`.
  void Raw(const std::string& name, std::vector<int64_t> shape, uint32_t type, std::string bytes) {
    tensors_.push_back({name, std::move(shape), type, std::move(bytes)});
  }
  std::string Bytes() {
    const std::string kvs = std::move(out_);  // the key/value pairs written so far
    out_ = "GGUF";
    Put(uint32_t(3));
    Put(uint64_t(tensors_.size()));
    Put(uint64_t(kvs_));
    out_ += kvs;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      String(t.name);
      Put(uint32_t(t.shape.size()));
      for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put(uint64_t(*it));
      Put(t.type);
      Put(offset);
      offset += (t.bytes.size() + 31) / 32 * 32;
    }
    out_.resize((out_.size() + 31) / 32 * 32, '\0');
    for (const auto& t : tensors_) {
      out_ += t.bytes;
      out_.resize((out_.size() + 31) / 32 * 32, '\0');
    }
    return out_;
  }

 private:
  struct T {
    std::string name;
    std::vector<int64_t> shape;
    uint32_t type;  // ggml's: 0 F32
    std::string bytes;
  };
  template <typename V>
  void Put(V v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void String(const std::string& s) {
    Put(uint64_t(s.size()));
    out_ += s;
  }
  template <typename Fn>
  void Kv(const std::string& key, uint32_t type, Fn value) {
    String(key);
    Put(type);
    value();
    ++kvs_;
  }
  std::string out_;
  size_t kvs_ = 0;
  std::vector<T> tensors_;
};

// The converter's permutation: each head's rows from (first half, second half) to pairs (2i, 2i+1).
std::vector<float> Interleave(const std::vector<float>& w, int heads, int64_t cols) {
  const int64_t rows = int64_t(w.size()) / cols, d = rows / heads;
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int second = 0; second < 2; ++second) {
        const int64_t from = h * d + second * (d / 2) + i, to = h * d + 2 * i + second;
        std::memcpy(&out[to * cols], &w[from * cols], size_t(cols) * sizeof(float));
      }
    }
  }
  return out;
}

ModelConfig Config(const std::string& arch, int hidden = 64, int intermediate = 96) {
  const nlohmann::json j = {{"model_type", arch}, {"vocab_size", 97}, {"hidden_size", hidden}, {"intermediate_size", intermediate},
                            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                            {"head_dim", 16}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
                            {"tie_word_embeddings", false}, {"bos_token_id", 1}, {"eos_token_id", 2},
                            {"attention_bias", arch == "llama"}};
  auto c = ParseModelConfig(j.dump(), "test");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

// A matrix as a test writes it: F32 values by default; `write` may put raw blocks instead.
using MatrixWriter = std::function<void(Writer&, const std::string& name, std::vector<int64_t> shape, std::vector<float>)>;
void WriteF32(Writer& w, const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
  w.Tensor(name, std::move(shape), std::move(v));
}

// `permute`: llama's q/k rows interleaved as the converter does (false: a wrong file, the control).
std::string ToGguf(const Model& m, const std::string& arch, bool permute = true, const MatrixWriter& matrix = WriteF32) {
  const ModelConfig& c = m.config();
  Writer w;
  w.Str("general.architecture", arch);
  const std::string a = arch + ".";
  w.U32(a + "embedding_length", c.hidden_size);
  w.U32(a + "block_count", c.num_layers);
  w.U32(a + "feed_forward_length", c.intermediate_size);
  w.U32(a + "attention.head_count", c.num_heads);
  w.U32(a + "attention.head_count_kv", c.num_kv_heads);
  w.U32(a + "attention.key_length", c.head_dim);
  w.F32(a + "attention.layer_norm_rms_epsilon", float(c.rms_norm_eps));
  w.F32(a + "rope.freq_base", float(c.rope_theta));
  const bool llama = arch == "llama" && permute;
  auto qk = [&](const std::vector<float>& v, int heads, int64_t cols) { return llama ? Interleave(v, heads, cols) : v; };
  const int64_t hidden = c.hidden_size, q_dim = int64_t(c.num_heads) * c.head_dim, kv_dim = int64_t(c.num_kv_heads) * c.head_dim;
  w.Tensor("token_embd.weight", {c.vocab_size, hidden}, m.embed().ToFloat());
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& L = m.layers()[l];
    const std::string b = absl::StrCat("blk.", l, ".");
    w.Tensor(b + "attn_norm.weight", {hidden}, L.attn_norm);
    matrix(w, b + "attn_q.weight", {q_dim, hidden}, qk(L.wq.ToFloat(), c.num_heads, hidden));
    matrix(w, b + "attn_k.weight", {kv_dim, hidden}, qk(L.wk.ToFloat(), c.num_kv_heads, hidden));
    matrix(w, b + "attn_v.weight", {kv_dim, hidden}, L.wv.ToFloat());
    matrix(w, b + "attn_output.weight", {hidden, q_dim}, L.wo.ToFloat());
    if (c.qkv_bias) {
      w.Tensor(b + "attn_q.bias", {q_dim}, qk(L.q_bias, c.num_heads, 1));
      w.Tensor(b + "attn_k.bias", {kv_dim}, qk(L.k_bias, c.num_kv_heads, 1));
      w.Tensor(b + "attn_v.bias", {kv_dim}, L.v_bias);
    }
    if (c.o_bias) w.Tensor(b + "attn_output.bias", {hidden}, L.o_bias);
    if (c.qk_norm) {
      w.Tensor(b + "attn_q_norm.weight", {c.head_dim}, L.q_norm);
      w.Tensor(b + "attn_k_norm.weight", {c.head_dim}, L.k_norm);
    }
    w.Tensor(b + "ffn_norm.weight", {hidden}, L.mlp_norm);
    matrix(w, b + "ffn_gate.weight", {c.intermediate_size, hidden}, L.w_gate.ToFloat());
    matrix(w, b + "ffn_up.weight", {c.intermediate_size, hidden}, L.w_up.ToFloat());
    matrix(w, b + "ffn_down.weight", {hidden, c.intermediate_size}, L.w_down.ToFloat());
  }
  w.Tensor("output_norm.weight", {hidden}, m.final_norm());
  matrix(w, "output.weight", {c.vocab_size, hidden}, m.lm_head().ToFloat());
  return w.Bytes();
}

std::vector<float> Logits(const Model& m, const std::vector<int32_t>& ids) {
  StatePool pool(m, 1);
  ForwardWorkspace ws;
  std::vector<float> logits;
  m.Forward({Segment{0, ids, true}}, pool, ws, &logits);
  return logits;
}

class GgufModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufModelTest, ReadsBackTheModelItWasWrittenFrom) {
  const std::string arch = GetParam();
  auto m = Model::Random(Config(arch), 11);
  ASSERT_TRUE(m.ok()) << m.status();
  auto file = GgufFile::Parse(ToGguf(*m, arch), "test.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto loaded = LoadGgufModel(*file, std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->config().model_type, arch);
  EXPECT_EQ(loaded->config().qkv_bias, m->config().qkv_bias);
  EXPECT_EQ(loaded->config().qk_norm, m->config().qk_norm);
  const std::vector<int32_t> ids = {1, 5, 9, 40, 7, 96, 3};
  EXPECT_EQ(Logits(*loaded, ids), Logits(*m, ids));  // the same fp32 weights, the same arithmetic
}

INSTANTIATE_TEST_SUITE_P(Architectures, GgufModelTest, ::testing::Values("llama", "qwen2", "qwen3"));

TEST(GgufModel, WithoutTheUnpermutationLlamaDiffers) {
  // The control: a llama file written without the converter's permutation is another model.
  auto m = Model::Random(Config("llama"), 11);
  ASSERT_TRUE(m.ok());
  auto unpermuted = LoadGgufModel(*GgufFile::Parse(ToGguf(*m, "llama", /*permute=*/false), "t.gguf"), std::nullopt);
  ASSERT_TRUE(unpermuted.ok()) << unpermuted.status();
  EXPECT_NE(Logits(*unpermuted, {1, 5, 9, 40}), Logits(*m, {1, 5, 9, 40}));
}

// A quantized file's model against its F32 control holding the same values: logits within fp32
// rounding of their spread (the same weights, the widening kernels).
void ExpectSameLogits(const Model& quantized, const Model& control) {
  const std::vector<int32_t> ids = {1, 5, 9, 40, 7, 96, 3};
  const std::vector<float> lq = Logits(quantized, ids), lf = Logits(control, ids);
  ASSERT_EQ(lq.size(), lf.size());
  float spread = 0.0f;
  for (float v : lf) spread = std::max(spread, std::abs(v));
  for (size_t i = 0; i < lq.size(); ++i) ASSERT_NEAR(lq[i], lf[i], 1e-5f * spread) << i;
}

// Q4_K blocks of a matrix [rows, cols] from a seeded generator: random nibbles and 12 random bytes of
// six-bit scales and minimums a super-block, with small d and dmin.
std::string RandomQ4K(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::string bytes;
  for (int64_t b = 0; b < rows * cols / cpu::kQ4KBlock; ++b) {
    const uint16_t d = FloatToHalf(0.002f * float(1 + rng() % 8)), dmin = FloatToHalf(0.001f * float(1 + rng() % 8));
    bytes.append(reinterpret_cast<const char*>(&d), 2);
    bytes.append(reinterpret_cast<const char*>(&dmin), 2);
    for (int i = 0; i < 12 + cpu::kQ4KBlock / 2; ++i) bytes += char(rng() & 0xFF);
  }
  return bytes;
}

// Q5_K blocks: Q4_K's fields with 32 bytes of random fifth bits between the scales and the nibbles.
std::string RandomQ5K(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::string bytes;
  for (int64_t b = 0; b < rows * cols / cpu::kQ5KBlock; ++b) {
    const uint16_t d = FloatToHalf(0.001f * float(1 + rng() % 8)), dmin = FloatToHalf(0.001f * float(1 + rng() % 8));
    bytes.append(reinterpret_cast<const char*>(&d), 2);
    bytes.append(reinterpret_cast<const char*>(&dmin), 2);
    for (int i = 0; i < 12 + 32 + cpu::kQ5KBlock / 2; ++i) bytes += char(rng() & 0xFF);
  }
  return bytes;
}

// Q6_K blocks of a matrix [rows, cols] from a seeded generator: random low and high bits and int8
// scales (every pattern is a valid block), with a small d.
std::string RandomQ6K(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::string bytes;
  for (int64_t b = 0; b < rows * cols / cpu::kQ6KBlock; ++b) {
    for (int i = 0; i < 208; ++i) bytes += char(rng() & 0xFF);
    const uint16_t d = FloatToHalf(0.00002f * float(1 + rng() % 4));
    bytes.append(reinterpret_cast<const char*>(&d), 2);
  }
  return bytes;
}

// A quantized file and its F32 control: blocks(name, shape, &type) gives a matrix's raw blocks of
// `type`, or "" to write its F32 values; the control holds ggml's values of those blocks (Dequantize:
// bit for bit ggml's, tests/cli/gguf_llamacpp.sh) in F32.
struct QuantizedFile {
  std::string quantized, control;
  size_t matrices = 0;  // written as blocks
};
using BlockWriter = std::function<std::string(const std::string& name, const std::vector<int64_t>& shape, GgmlType* type)>;
QuantizedFile QuantizedAndControl(const Model& m, const std::string& arch, const BlockWriter& blocks) {
  std::map<std::string, std::vector<float>> values;
  QuantizedFile file;
  file.quantized = ToGguf(m, arch, true, [&](Writer& w, const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    GgmlType type = GgmlType::kF32;
    const std::string raw = blocks(name, shape, &type);
    if (raw.empty()) return w.Tensor(name, std::move(shape), std::move(v));
    std::vector<float>& x = values[name];
    x.resize(size_t(shape[0] * shape[1]));
    Dequantize(uint32_t(type), raw.data(), shape[0] * shape[1], x.data());
    w.Raw(name, std::move(shape), uint32_t(type), raw);
  });
  file.control = ToGguf(m, arch, true, [&](Writer& w, const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
    w.Tensor(name, std::move(shape), values.count(name) ? values[name] : std::move(v));
  });
  file.matrices = values.size();
  return file;
}

// Blocks of 32 values of a matrix [rows, cols]: a random fp16 d of either sign (a multiple of
// `unit`), with `min` an fp16 m (a negative multiple of 0.02), then `bytes` random bytes: Q4_0's 16
// of nibbles, Q8_0's 32 int8 (-128 included), Q4_1's 16, Q5_0's and Q5_1's 4 of fifth bits and 16.
std::string RandomBlocksOf32(int64_t rows, int64_t cols, float unit, int bytes, std::mt19937& rng, bool min = false) {
  std::string out;
  for (int64_t b = 0; b < rows * cols / cpu::kQ8Block; ++b) {
    const uint16_t d = FloatToHalf(unit * float(1 + rng() % 8) * (rng() % 2 ? 1.0f : -1.0f));
    out.append(reinterpret_cast<const char*>(&d), 2);
    if (min) {
      const uint16_t m = FloatToHalf(-0.02f * float(1 + rng() % 4));
      out.append(reinterpret_cast<const char*>(&m), 2);
    }
    for (int i = 0; i < bytes; ++i) out += char(rng() & 0xFF);
  }
  return out;
}
std::string RandomQ4_0(int64_t rows, int64_t cols, std::mt19937& rng) { return RandomBlocksOf32(rows, cols, 0.01f, 16, rng); }
std::string RandomQ8_0(int64_t rows, int64_t cols, std::mt19937& rng) { return RandomBlocksOf32(rows, cols, 0.0002f, 32, rng); }
std::string RandomQ4_1(int64_t rows, int64_t cols, std::mt19937& rng) { return RandomBlocksOf32(rows, cols, 0.003f, 16, rng, true); }
std::string RandomQ5_0(int64_t rows, int64_t cols, std::mt19937& rng) { return RandomBlocksOf32(rows, cols, 0.003f, 20, rng); }
std::string RandomQ5_1(int64_t rows, int64_t cols, std::mt19937& rng) { return RandomBlocksOf32(rows, cols, 0.003f, 20, rng, true); }
std::string RandomIq4Nl(int64_t rows, int64_t cols, std::mt19937& rng) { return RandomBlocksOf32(rows, cols, 0.0005f, 16, rng); }

// Q3_K super-blocks: 108 random bytes (third bits, low bits, 6-bit scales: every pattern is a valid
// block), then a small fp16 d of either sign.
std::string RandomQ3K(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::string bytes;
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    for (int i = 0; i < 108; ++i) bytes += char(rng() & 0xFF);
    const uint16_t d = FloatToHalf(0.002f * float(1 + rng() % 8) * (rng() % 2 ? 1.0f : -1.0f));
    bytes.append(reinterpret_cast<const char*>(&d), 2);
  }
  return bytes;
}

// Q2_K super-blocks: 80 random bytes (4-bit scales and minimums, 2-bit q), then small fp16 d and dmin.
std::string RandomQ2K(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::string bytes;
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    for (int i = 0; i < 80; ++i) bytes += char(rng() & 0xFF);
    const uint16_t d = FloatToHalf(0.003f * float(1 + rng() % 8)), dmin = FloatToHalf(0.002f * float(rng() % 8));
    bytes.append(reinterpret_cast<const char*>(&d), 2);
    bytes.append(reinterpret_cast<const char*>(&dmin), 2);
  }
  return bytes;
}

// IQ4_XS super-blocks: a small fp16 d of either sign, then 134 random bytes (the eight 6-bit scales
// and the indices).
std::string RandomIq4Xs(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::string bytes;
  for (int64_t b = 0; b < rows * cols / 256; ++b) {
    const uint16_t d = FloatToHalf(0.00005f * float(1 + rng() % 8) * (rng() % 2 ? 1.0f : -1.0f));
    bytes.append(reinterpret_cast<const char*>(&d), 2);
    for (int i = 0; i < 134; ++i) bytes += char(rng() & 0xFF);
  }
  return bytes;
}

// Every matrix whose rows are whole blocks of `block` weights written in `type` by `random`: they
// load as `held`, the file's own blocks (`block_bytes` per block, read in place where no rows are
// permuted), with ggml's values exactly (the control's are Dequantize's, which equals libggml's),
// llama's q and k rows un-permuted alike, the output too (attn_output's [256, 64] rows are a quarter
// super-block: F32 unless the block is q8_0's 32); `check` looks at each (loaded, control) pair
// further. The logits are those of the same values in F32 (the widening kernels).
void ExpectBlocksLoadInPlace(GgmlType type, WeightType held, int block, int64_t block_bytes,
                             std::string (*random)(int64_t rows, int64_t cols, std::mt19937& rng), int intermediate,
                             unsigned seed,
                             const std::function<void(const WeightMatrix&, const WeightMatrix&)>& check = nullptr) {
  for (const std::string arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    auto m = Model::Random(Config(arch, /*hidden=*/256, intermediate), seed);
    ASSERT_TRUE(m.ok()) << m.status();
    std::mt19937 rng(seed + 2);
    const QuantizedFile file = QuantizedAndControl(*m, arch, [&](const std::string&, const std::vector<int64_t>& shape, GgmlType* t) {
      if (shape[1] % block != 0) return std::string();
      *t = type;
      return random(shape[0], shape[1], rng);
    });
    const bool wo = 64 % block == 0;
    ASSERT_EQ(file.matrices, 2u * (wo ? 7u : 6u) + 1u);  // per layer, and the output
    auto q = LoadGgufModel(*GgufFile::Parse(file.quantized, "quantized.gguf"), std::nullopt);
    auto f = LoadGgufModel(*GgufFile::Parse(file.control, "f32.gguf"), std::nullopt);
    ASSERT_TRUE(q.ok()) << q.status();
    ASSERT_TRUE(f.ok()) << f.status();
    for (int l = 0; l < 2; ++l) {
      const LayerWeights& a = q->layers()[l];
      const LayerWeights& b = f->layers()[l];
      for (auto [x, y] : {std::pair{&a.wq, &b.wq}, {&a.wk, &b.wk}, {&a.wv, &b.wv}, {&a.wo, &b.wo}, {&a.w_gate, &b.w_gate},
                          {&a.w_up, &b.w_up}, {&a.w_down, &b.w_down}}) {
        if (x == &a.wo && !wo) {
          EXPECT_EQ(x->type(), WeightType::kF32);
          continue;
        }
        EXPECT_EQ(x->type(), held);
        EXPECT_EQ(x->Bytes() * block, x->Weights() * block_bytes);  // the file's bytes, no fp32 copy
        EXPECT_EQ(x->ToFloat(), y->ToFloat());
        if (check) check(*x, *y);
      }
    }
    EXPECT_EQ(q->lm_head_matrix().type(), held);
    EXPECT_EQ(q->lm_head_matrix().ToFloat(), f->lm_head_matrix().ToFloat());
    ExpectSameLogits(*q, *f);
  }
}

// Q4_K as q4k (4.5 bits a weight), Q5_K as q5k (5.5), Q6_K as q6k (6.5625), Q8_0 as q8_0 (8.5) and
// Q4_0 as q4 (4.5): ggml's blocks are the formats' own. q8_0's conversion to q8 (what --cpu-weights q8 and the int8 kernels read) keeps
// the values, not quantized again.
TEST(GgufModel, Q4_KTensorsLoadAsQ4kWithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ4_K, WeightType::kQ4K, 256, 144, RandomQ4K, /*intermediate=*/256, 5);
}
TEST(GgufModel, Q5_KTensorsLoadAsQ5kWithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ5_K, WeightType::kQ5K, 256, 176, RandomQ5K, /*intermediate=*/256, 25);
}
TEST(GgufModel, Q6_KTensorsLoadAsQ6kWithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ6_K, WeightType::kQ6K, 256, 210, RandomQ6K, /*intermediate=*/512, 15);
}
TEST(GgufModel, Q8_0TensorsLoadAsQ8_0WithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ8_0, WeightType::kQ8_0, 32, 34, RandomQ8_0, /*intermediate=*/256, 13,
                          [](const WeightMatrix& x, const WeightMatrix& y) {
                            EXPECT_EQ(x.ConvertTo(WeightType::kQ8).ToFloat(), y.ToFloat());
                          });
}
TEST(GgufModel, Q4_0TensorsLoadAsQ4WithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ4_0, WeightType::kQ4, 32, 18, RandomQ4_0, /*intermediate=*/256, 6);
}
// Q4_1, Q5_0 and Q5_1 (llama.cpp's fallbacks for rows that are not whole K-quant super-blocks) as
// q4_1, q5_0 and q5_1 (kernels/cpu/q32.h, 5, 5.5 and 6 bits a weight): until 2026-11-28 Q5_0 was a
// q8 copy and Q4_1 and Q5_1 bf16 copies (not exact). q5_0's conversion to q8 keeps the values.
TEST(GgufModel, Q4_1Q5_0AndQ5_1TensorsLoadInPlaceWithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ4_1, WeightType::kQ4_1, 32, 20, RandomQ4_1, /*intermediate=*/256, 7);
  ExpectBlocksLoadInPlace(GgmlType::kQ5_0, WeightType::kQ5_0, 32, 22, RandomQ5_0, /*intermediate=*/256, 8,
                          [](const WeightMatrix& x, const WeightMatrix& y) {
                            EXPECT_EQ(x.ConvertTo(WeightType::kQ8).ToFloat(), y.ToFloat());
                          });
  ExpectBlocksLoadInPlace(GgmlType::kQ5_1, WeightType::kQ5_1, 32, 24, RandomQ5_1, /*intermediate=*/256, 9);
}

// Q3_K as q3k, IQ4_NL and IQ4_XS as iq4_nl and iq4_xs (kernels/cpu/q3k_iq4.h: 3.44, 4.5 and 4.25 bits
// a weight): ggml's blocks read in place. The IQ4s' conversion to q8 (what the int8 kernels pack) keeps
// the values, as q3k's to q6k does (tests/kernels/q3k_iq4_test.cc).
TEST(GgufModel, Q3_KIq4_NLAndIq4_XSTensorsLoadInPlaceWithGgmlsValuesExactly) {
  const auto as_q8 = [](const WeightMatrix& x, const WeightMatrix& y) {
    EXPECT_EQ(x.ConvertTo(WeightType::kQ8).ToFloat(), y.ToFloat());
  };
  ExpectBlocksLoadInPlace(GgmlType::kQ3_K, WeightType::kQ3K, 256, 110, RandomQ3K, /*intermediate=*/256, 31);
  ExpectBlocksLoadInPlace(GgmlType::kIQ4_NL, WeightType::kIq4Nl, 32, 18, RandomIq4Nl, /*intermediate=*/256, 32, as_q8);
  ExpectBlocksLoadInPlace(GgmlType::kIQ4_XS, WeightType::kIq4Xs, 256, 136, RandomIq4Xs, /*intermediate=*/256, 33, as_q8);
}

// Q2_K as q2k (kernels/cpu/q2k.h, 2.625 bits a weight): read in place, with the widening kernel only
// (no int8 kernel reads it, and no format of Steady's holds its values), so auto keeps it there.
TEST(GgufModel, Q2_KTensorsLoadInPlaceWithGgmlsValuesExactly) {
  ExpectBlocksLoadInPlace(GgmlType::kQ2_K, WeightType::kQ2K, 256, 84, RandomQ2K, /*intermediate=*/256, 34);
  auto m = Model::Random(Config("llama", /*hidden=*/256, /*intermediate=*/256), 35);
  ASSERT_TRUE(m.ok()) << m.status();
  std::mt19937 rng(36);
  const QuantizedFile file = QuantizedAndControl(*m, "llama", [&](const std::string&, const std::vector<int64_t>& shape, GgmlType* t) {
    if (shape[1] % 256 != 0) return std::string();
    *t = GgmlType::kQ2_K;
    return RandomQ2K(shape[0], shape[1], rng);
  });
  auto q = LoadGgufModel(*GgufFile::Parse(file.quantized, "q2_k.gguf"), std::nullopt);
  ASSERT_TRUE(q.ok()) << q.status();
  BackendOptions o;
  o.cpu_weights = CpuWeights::kAuto;
  auto backend = MakeBackend(*q, "cpu", o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->Name(), "cpu (f32 and q2k weights)");
}

// A Q4_K_M-like file: Q4_K where the rows are whole super-blocks, Q6_K for ffn_down (as llama.cpp
// gives some layers), Q5_K for ffn_up (a Q5_K_M file's type), Q3_K for ffn_gate (a Q3_K_M file's),
// IQ4_XS for attn_k (an IQ4_XS file's), Q5_1 for attn_v and Q4_1 for attn_output (llama.cpp's
// fallbacks where a row is not whole super-blocks), F32 elsewhere. Q3_K and IQ4_XS have no int8
// kernels of their own and are packed as q6k and q8. --cpu-weights auto
// puts every quantized matrix on the int8 kernels where the CPU has one, and says so; stored keeps
// them all on the widening kernels, whose logits are those of the file's values in fp32 (the F32
// control's); auto's are close to them but not the same bits (the packed matrices, and activations
// rounded to 8 bits, were read).
TEST(GgufModel, AutoPutsAQuantizedFilesMatricesOnTheDotKernels) {
  auto m = Model::Random(Config("llama", /*hidden=*/256, /*intermediate=*/256), 8);
  ASSERT_TRUE(m.ok()) << m.status();
  std::mt19937 rng(3);
  const QuantizedFile file = QuantizedAndControl(*m, "llama", [&](const std::string& name, const std::vector<int64_t>& shape, GgmlType* type) {
    if (name == "output.weight") return std::string();  // F32
    if (name.find("ffn_down") != std::string::npos) {
      *type = GgmlType::kQ6_K;
      return RandomQ6K(shape[0], shape[1], rng);
    }
    if (name.find("ffn_up") != std::string::npos) {
      *type = GgmlType::kQ5_K;
      return RandomQ5K(shape[0], shape[1], rng);
    }
    if (name.find("ffn_gate") != std::string::npos) {
      *type = GgmlType::kQ3_K;
      return RandomQ3K(shape[0], shape[1], rng);
    }
    if (name.find("attn_k") != std::string::npos) {
      *type = GgmlType::kIQ4_XS;
      return RandomIq4Xs(shape[0], shape[1], rng);
    }
    if (name.find("attn_v") != std::string::npos) {
      *type = GgmlType::kQ5_1;
      return RandomQ5_1(shape[0], shape[1], rng);
    }
    if (shape[1] % cpu::kQ4KBlock == 0) {
      *type = GgmlType::kQ4_K;
      return RandomQ4K(shape[0], shape[1], rng);
    }
    *type = GgmlType::kQ4_1;
    return RandomQ4_1(shape[0], shape[1], rng);
  });
  auto q = LoadGgufModel(*GgufFile::Parse(file.quantized, "q4_k_m.gguf"), std::nullopt);
  auto f = LoadGgufModel(*GgufFile::Parse(file.control, "f32.gguf"), std::nullopt);
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(q->layers()[0].wq.type(), WeightType::kQ4K);
  EXPECT_EQ(q->layers()[0].wo.type(), WeightType::kQ4_1);
  EXPECT_EQ(q->layers()[0].wv.type(), WeightType::kQ5_1);
  EXPECT_EQ(q->layers()[0].w_down.type(), WeightType::kQ6K);
  EXPECT_EQ(q->layers()[0].w_up.type(), WeightType::kQ5K);
  EXPECT_EQ(q->layers()[0].w_gate.type(), WeightType::kQ3K);
  EXPECT_EQ(q->layers()[0].wk.type(), WeightType::kIq4Xs);

  auto step = [](const Model& model, CpuWeights weights, std::string* name) {
    BackendOptions o;
    o.slots = 2;
    o.cpu_weights = weights;
    auto backend = MakeBackend(model, "cpu", o);
    EXPECT_TRUE(backend.ok()) << backend.status();
    if (!backend.ok()) return std::vector<double>{};
    *name = (*backend)->Name();
    std::vector<float> logits;
    (*backend)->Forward({{0, {1, 5, 9, 40, 7, 96, 3}, false}, {1, {4, 5, 6}, false}}, &logits);
    return std::vector<double>(logits.begin(), logits.end());
  };
  std::string auto_name, stored_name, control_name;
  const std::vector<double> fast = step(*q, CpuWeights::kAuto, &auto_name);
  const std::vector<double> stored = step(*q, CpuWeights::kStored, &stored_name);
  const std::vector<double> reference = step(*f, CpuWeights::kAuto, &control_name);
  EXPECT_EQ(stored_name, "cpu (f32 and iq4_xs and q3k and q4_1 and q4k and q5_1 and q5k and q6k weights)");
  EXPECT_EQ(control_name, "cpu");  // an F32 file: nothing quantized, nothing packed
  ASSERT_EQ(stored.size(), reference.size());
  ASSERT_EQ(fast.size(), reference.size());
  EXPECT_LT(testing::MaxRelError(stored, reference), 1e-5);
  if (!cpu::Int8DotAvailable()) {
    EXPECT_EQ(auto_name, stored_name);
    EXPECT_EQ(fast, stored);
    GTEST_SKIP() << "no int8 dot-product kernel on this CPU: auto kept the widening kernels";
  }
  EXPECT_EQ(auto_name, std::string("cpu (f32 and q4_1 and q4k and q5_1 and q5k and q6k and q8 weights on ") +
                           cpu::Int8PathExtension(cpu::WidestInt8Path()) + ")");
  EXPECT_GT(testing::MaxRelError(fast, stored), 0.0) << "the packed matrices were not read";
  EXPECT_LT(testing::MaxRelError(fast, reference), 0.05);
}

// A file parsed from bytes (GgufFile::Parse) is no mapping: converting its matrices for the CPU backend
// (--cpu-weights q8) must leave them readable, where releasing a mapping's pages (madvise) would zero
// memory of the process's own. The model's logits are the same before and after.
TEST(GgufModel, ConvertingAParsedFilesMatricesLeavesThemIntact) {
  auto m = Model::Random(Config("llama", /*hidden=*/256, /*intermediate=*/256), 12);
  ASSERT_TRUE(m.ok()) << m.status();
  auto loaded = LoadGgufModel(*GgufFile::Parse(ToGguf(*m, "llama"), "parsed.gguf"), std::nullopt);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const std::vector<int32_t> ids = {1, 5, 9, 40, 7};
  const std::vector<float> before = Logits(*loaded, ids);
  BackendOptions o;
  o.cpu_weights = CpuWeights::kQ8;
  auto backend = MakeBackend(*loaded, "cpu", o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  (*backend)->ReleaseCopiedPages();
  EXPECT_EQ(Logits(*loaded, ids), before);
}

TEST(GgufTokenizer, SentencePieceStyleMergesFollowScores) {
  Writer w;
  w.Str("tokenizer.ggml.model", "llama");
  // "▁ab" is reachable by merging "▁a"+"b" (score -1) or "▁"+"ab"; the merged piece's score decides.
  const std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab",
                                           "\xE2\x96\x81" "ab", "<0x63>"};
  w.Strings("tokenizer.ggml.tokens", tokens);
  w.Floats("tokenizer.ggml.scores", {0, 0, 0, -5, -6, -7, -1, -2, -0.5f, 0});
  w.Ints("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1, 1, 6});
  w.U32("tokenizer.ggml.bos_token_id", 1);
  w.U32("tokenizer.ggml.eos_token_id", 2);
  w.U32("tokenizer.ggml.unknown_token_id", 0);
  auto file = GgufFile::Parse(w.Bytes(), "vocab.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto t = LoadGgufTokenizer(*file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("ab ab"), (std::vector<int32_t>{8, 8}));
  EXPECT_EQ(*(*t)->Encode("ab", true), (std::vector<int32_t>{1, 8}));  // add_bos: llama's default
  EXPECT_EQ(*(*t)->Encode("ac"), (std::vector<int32_t>{6, 9}));        // "c" by byte fallback
  EXPECT_EQ(*(*t)->Decode({1, 8, 8}, {.skip_special_tokens = true}), "ab ab");
  EXPECT_EQ((*t)->eos_id(), 2);
}

TEST(GgufTokenizer, ByteLevelBpeAndItsErrors) {
  Writer w;
  w.Str("tokenizer.ggml.model", "gpt2");
  w.Str("tokenizer.ggml.pre", "llama-bpe");
  w.Strings("tokenizer.ggml.tokens", {"h", "i", "\xC4\xA0", "hi", "\xC4\xA0h", "\xC4\xA0hi", "<|end|>"});
  w.Ints("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 3});
  w.Strings("tokenizer.ggml.merges", {"h i", "\xC4\xA0 h", "\xC4\xA0h i"});
  w.U32("tokenizer.ggml.eos_token_id", 6);
  auto file = GgufFile::Parse(w.Bytes(), "bpe.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto t = LoadGgufTokenizer(*file);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*(*t)->Encode("hi hi<|end|>", true), (std::vector<int32_t>{3, 5, 6}));  // no BOS: gpt2's default
  EXPECT_EQ(*(*t)->Decode({3, 5}), "hi hi");

  Writer bad;
  bad.Str("tokenizer.ggml.model", "gpt2");
  bad.Str("tokenizer.ggml.pre", "falcon-9000");
  bad.Strings("tokenizer.ggml.tokens", {"a"});
  bad.Strings("tokenizer.ggml.merges", {});
  auto refused = LoadGgufTokenizer(*GgufFile::Parse(bad.Bytes(), "bad.gguf"));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("bad.gguf: tokenizer.ggml.pre: \"falcon-9000\""), std::string::npos)
      << refused.status();
}

}  // namespace
}  // namespace steady

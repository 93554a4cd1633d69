// Typed reads of config.json keys, shared by config.cc (the shape and Steady's keys) and
// hf_config.cc (the Hugging Face architecture keys). Internal to model/checkpoint/. Each refusal
// names the file and the key; an absent or null key leaves the output alone.
#ifndef STEADY_MODEL_CHECKPOINT_CONFIG_KEYS_H_
#define STEADY_MODEL_CHECKPOINT_CONFIG_KEYS_H_

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"

namespace steady::config_keys {

// Present and not null.
inline bool Has(const nlohmann::json& j, const char* key) { return j.contains(key) && !j.at(key).is_null(); }

// An integer in [lo, hi]; `required` keys must be present.
absl::Status ReadInt(const nlohmann::json& j, const std::string& file, const char* key, bool required, int64_t lo,
                     int64_t hi, int64_t* out);
absl::Status ReadInt(const nlohmann::json& j, const std::string& file, const char* key, bool required, int64_t lo,
                     int64_t hi, int* out);
// A finite number in [lo, hi].
absl::Status ReadDouble(const nlohmann::json& j, const std::string& file, const char* key, double lo, double hi,
                        double* out);
absl::Status ReadBool(const nlohmann::json& j, const std::string& file, const char* key, bool* out);
// A token id or a list of them (Llama 3's eos_token_id), each in [0, 2^30]; replaces *ids when given.
absl::Status ReadIds(const nlohmann::json& j, const std::string& file, const char* key, std::vector<int>* ids);

}  // namespace steady::config_keys

#endif  // STEADY_MODEL_CHECKPOINT_CONFIG_KEYS_H_

// Generator params shared by the generators: the enum spellings used on the command line and
// in generated/variants.cmake, the schedule tunables, and the estimates the autoschedulers use.
#pragma once

#include <map>
#include <string>

#include "Halide.h"
#include "generator/attention_algorithm.h"

namespace attngen {

inline const std::map<std::string, MaskKind> kMaskKindNames = {{"none", MaskKind::kNone},
                                                               {"causal", MaskKind::kCausal}};

inline const std::map<std::string, MaskTensor> kMaskTensorNames = {
    {"none", MaskTensor::kNone}, {"bool", MaskTensor::kBool}, {"additive", MaskTensor::kAdditive}};

inline const std::map<std::string, Pattern> kPatternNames = {
    {"none", Pattern::kNone},
    {"window", Pattern::kWindow},
    {"strided", Pattern::kStrided},
    {"block_sparse", Pattern::kBlockSparse},
    {"global_local", Pattern::kGlobalLocal}};

// Representative sizes for estimates (BERT-base-like); bounds that are compile-time constants
// (head dims) come from the generator params themselves.
struct Estimates {
  static constexpr int kBatch = 1;
  static constexpr int kHeads = 16;
  static constexpr int kSeq = 1024;
  static constexpr int kEmbed = 768;
};

}  // namespace attngen

// llm_generate: greedy generation with a Llama-architecture model directory (examples/llm).
//
//   llm_generate --model DIR --prompt 1,2,3 [--prompt 4,5 ...] [--new-tokens 32]
//     prints, for each prompt, its generated token ids (comma-separated, one line a prompt);
//   llm_generate --model DIR --prompt P1 --follow F1 [--prompt P2 --follow F2 ...] --logits OUT
//     feeds each prompt in one step, then its follow tokens one at a time (cached decoding along
//     given tokens, as a comparison with a reference needs), and writes the logits after the
//     prompt and after each follow token: OUT.npy, float32 [prompts, F + 1, vocab] (the follows
//     all of one length F).
// Prompts are given as token ids: a tokenizer is the application's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/llm/llama.h"
#include "examples/sentence_embedding/npy.h"

namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    if (item.empty()) continue;
    size_t used = 0;
    const long v = std::stol(item, &used);
    if (used != item.size()) throw std::runtime_error("not a token id: \"" + item + "\"");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

int usage() {
  std::fprintf(
      stderr,
      "usage: llm_generate --model DIR --prompt IDS [--prompt IDS ...] [--new-tokens N]\n"
      "       llm_generate --model DIR --prompt IDS --follow IDS [...] --logits OUT.npy\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, logits_path;
  std::vector<std::vector<int32_t>> prompts, follows;
  long new_tokens = 32;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (i + 1 >= argc) return usage();
      const std::string v = argv[++i];
      if (a == "--model") {
        model_dir = v;
      } else if (a == "--prompt") {
        prompts.push_back(parse_ids(v));
      } else if (a == "--follow") {
        follows.push_back(parse_ids(v));
      } else if (a == "--new-tokens") {
        new_tokens = std::stol(v);
      } else if (a == "--logits") {
        logits_path = v;
      } else {
        return usage();
      }
    }
    if (model_dir.empty() || prompts.empty()) return usage();
    const llm::LlamaModel model = llm::LlamaModel::load_dir(model_dir);
    if (logits_path.empty()) {
      for (const auto& ids : llm::generate_greedy(model, prompts, new_tokens)) {
        for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? ",%d" : "%d", ids[i]);
        std::printf("\n");
      }
      return 0;
    }
    if (follows.size() != prompts.size()) throw std::runtime_error("one --follow per --prompt");
    const size_t f = follows[0].size();
    int64_t longest = 0;
    for (size_t b = 0; b < prompts.size(); ++b) {
      if (follows[b].size() != f) throw std::runtime_error("the follows differ in length");
      longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[b].size()));
    }
    const int64_t batch = static_cast<int64_t>(prompts.size()), V = model.config().vocab_size;
    llm::Session session(model, batch, longest + static_cast<int64_t>(f), longest);
    std::vector<float> out(static_cast<size_t>(batch) * (f + 1) * V);
    std::vector<float> logits = session.step(prompts);
    for (size_t n = 0; n <= f; ++n) {
      const int64_t t = n == 0 ? longest : 1;
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t row = n == 0 ? static_cast<int64_t>(prompts[b].size()) - 1 : 0;
        std::copy_n(logits.begin() + (b * t + row) * V, V, out.begin() + (b * (f + 1) + n) * V);
      }
      if (n == f) break;
      std::vector<std::vector<int32_t>> next(static_cast<size_t>(batch));
      for (int64_t b = 0; b < batch; ++b) next[b] = {follows[b][n]};
      logits = session.step(next);
    }
    embed::write_npy_f32(logits_path, out.data(), {batch, static_cast<int64_t>(f + 1), V});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "llm_generate: %s\n", e.what());
    return 1;
  }
}

// sentence_embedding: sentence embeddings of a BERT sentence-transformers model
// (all-MiniLM-L6-v2) on attngen's kernels. See examples/sentence_embedding/README.md.
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "attngen/attngen.h"
#include "examples/sentence_embedding/bert.h"

namespace {

const char kUsage[] =
    "usage: sentence_embedding --model DIR [options] [SENTENCE ...]\n"
    "  Embeds each sentence (from the arguments, else from --file, else one per line of stdin)\n"
    "  and prints one embedding per line (space-separated floats).\n"
    "  --model DIR        a sentence-transformers model directory (model.safetensors,\n"
    "                     tokenizer.json, config.json, modules.json, ...)\n"
    "  --file PATH        read sentences from PATH, one per line ('-': stdin; blank lines "
    "skipped)\n"
    "  --similarity       print the cosine similarity matrix instead of the embeddings\n"
    "  --tokens           print each sentence's WordPiece tokens instead (one line, "
    "tab-separated)\n"
    "  --max-length N     truncate to N tokens ([CLS] and [SEP] included; default: the model's\n"
    "                     max_seq_length)\n"
    "  --batch N          sentences per forward pass (default 32; padded, masked by kv_len)\n"
    "  --threads N        attngen threads (default: one per core)\n"
    "  --dump-qk OUTDIR   (one sentence) write OUTDIR/layer<L>_q.npy and layer<L>_k.npy, float32\n"
    "                     [tokens, heads, head_dim], the projected Q and K (bias included, before\n"
    "                     scaling), and OUTDIR/tokens.txt (one token per line)\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "sentence_embedding: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

long parse_positive(const std::string& flag, const char* s) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno || end == s || *end || v <= 0) usage_error(flag + " needs a positive integer");
  return v;
}

void read_lines(std::istream& in, std::vector<std::string>& out) {
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) out.push_back(line);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, file, dump_dir;
  bool similarity = false, tokens = false;
  long max_length = 0, batch = 32, threads = 0;
  std::vector<std::string> sentences;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") {
      model_dir = value();
    } else if (a == "--file") {
      file = value();
    } else if (a == "--dump-qk") {
      dump_dir = value();
    } else if (a == "--similarity") {
      similarity = true;
    } else if (a == "--tokens") {
      tokens = true;
    } else if (a == "--max-length") {
      max_length = parse_positive(a, value());
    } else if (a == "--batch") {
      batch = parse_positive(a, value());
    } else if (a == "--threads") {
      threads = parse_positive(a, value());
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--") {
      for (++i; i < argc; ++i) sentences.push_back(argv[i]);
    } else if (a.size() > 1 && a[0] == '-' && a[1] == '-') {
      usage_error("unknown option " + a);
    } else {
      sentences.push_back(a);
    }
  }
  if (model_dir.empty()) usage_error("--model DIR is required");
  if (similarity && tokens) usage_error("--similarity and --tokens exclude each other");
  if (!file.empty() && !sentences.empty()) usage_error("give sentences or --file, not both");
  if (sentences.empty()) {
    if (file.empty() || file == "-") {
      read_lines(std::cin, sentences);
    } else {
      std::ifstream in(file);
      if (!in) usage_error("cannot read " + file);
      read_lines(in, sentences);
    }
  }
  if (sentences.empty()) usage_error("no sentences");
  if (!dump_dir.empty() && sentences.size() != 1) usage_error("--dump-qk takes one sentence");

  try {
    if (threads) {
      const attngen_status st = attngen_set_num_threads(int(threads));
      if (st != ATTNGEN_OK) throw std::runtime_error(attngen_last_error());
    }
    embed::SentenceEncoder enc = embed::SentenceEncoder::load(model_dir);
    if (max_length) {
      if (max_length > enc.model().config().max_positions)
        usage_error("--max-length is past the model's " +
                    std::to_string(enc.model().config().max_positions) + " positions");
      enc.set_max_length(size_t(max_length));
    }
    std::vector<embed::Encoding> encodings;
    for (const std::string& s : sentences) encodings.push_back(enc.tokenize(s));
    if (tokens) {
      for (const auto& e : encodings) {
        for (size_t t = 0; t < e.tokens.size(); ++t)
          std::printf("%s%s", t ? "\t" : "", e.tokens[t].c_str());
        std::printf("\n");
      }
      return 0;
    }

    embed::QkvObserver dump;
    if (!dump_dir.empty()) {
      if (mkdir(dump_dir.c_str(), 0777) != 0 && errno != EEXIST)
        throw std::runtime_error(dump_dir + ": " + std::strerror(errno));
      dump = embed::qk_dump_observer(enc.model().config(), dump_dir);
      embed::write_tokens(dump_dir + "/tokens.txt", encodings[0].tokens);
    }

    const std::vector<float> emb =
        enc.embed(encodings, size_t(batch), dump_dir.empty() ? nullptr : &dump);
    const size_t n = sentences.size(), E = size_t(enc.model().config().hidden);
    if (similarity) {
      for (size_t i = 0; i < n; ++i) {
        for (size_t j = 0; j < n; ++j) {
          double dot = 0, ni = 0, nj = 0;
          for (size_t k = 0; k < E; ++k) {
            dot += double(emb[i * E + k]) * emb[j * E + k];
            ni += double(emb[i * E + k]) * emb[i * E + k];
            nj += double(emb[j * E + k]) * emb[j * E + k];
          }
          std::printf("%s%.6f", j ? " " : "", dot / std::sqrt(ni * nj));
        }
        std::printf("\n");
      }
    } else {
      for (size_t i = 0; i < n; ++i) {
        for (size_t k = 0; k < E; ++k) std::printf("%s%.9g", k ? " " : "", emb[i * E + k]);
        std::printf("\n");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sentence_embedding: %s\n", e.what());
    return 1;
  }
  return 0;
}

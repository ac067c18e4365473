// BERT WordPiece tokenisation as Hugging Face tokenizers does it from a tokenizer.json:
// BertNormalizer (clean text, space around CJK ideographs, strip accents, lowercase),
// BertPreTokenizer (split on whitespace, each punctuation character its own word), greedy
// longest-match-first WordPiece with a continuation prefix ("##") and [UNK] for words it
// cannot split, and the post-processor's template ([CLS] ... [SEP]).
//
// Unicode coverage (there are no Unicode tables here): accents are stripped (NFD, then the
// nonspacing marks dropped) for Latin-1 and Latin Extended-A letters and for combining marks
// U+0300-U+036F written as such; lowercasing covers ASCII, Latin-1, Latin Extended-A, Greek
// and Cyrillic; punctuation is ASCII's, Latin-1's, General Punctuation's (U+2010-U+2027,
// U+2030-U+205E), CJK Symbols' and the fullwidth forms'. Other scripts' accents, case and
// punctuation pass through unchanged (a difference from Hugging Face only where the text has
// them). Added tokens written in the text ("[MASK]") are not recognised as such.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace embed {

class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<std::string> tokens;
};

class WordPieceTokenizer {
 public:
  // From a tokenizer.json file or its text; throws TokenizerError for a schema it does not
  // handle (another model type, normalizer or pre-tokenizer).
  static WordPieceTokenizer from_file(const std::string& path);
  static WordPieceTokenizer from_json_text(const std::string& text, const std::string& name);

  // [CLS] pieces [SEP], the pieces truncated so that the whole is at most max_length tokens.
  Encoding encode(const std::string& text, size_t max_length) const;

  // The stages, exposed for tests.
  std::string normalize(const std::string& text) const;  // UTF-8 in and out
  std::vector<std::string> pre_tokenize(const std::string& normalized) const;
  void word_piece(const std::string& word, Encoding& out) const;  // appends

  int32_t id(const std::string& token) const;  // -1 if not in the vocabulary
  size_t vocab_size() const { return vocab_.size(); }

 private:
  std::unordered_map<std::string, int32_t> vocab_;
  std::string unk_ = "[UNK]";
  int32_t unk_id_ = -1;
  std::string prefix_ = "##";
  size_t max_chars_ = 100;
  bool clean_text_ = true, chinese_chars_ = true, strip_accents_ = true, lowercase_ = true;
  Encoding head_, tail_;  // special tokens around the sequence
};

}  // namespace embed

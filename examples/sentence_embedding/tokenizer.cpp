#include "examples/sentence_embedding/tokenizer.h"

#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

namespace embed {
namespace {

// ---- UTF-8 ----

// Decodes UTF-8; an invalid or truncated sequence becomes U+FFFD (which clean_text drops).
std::u32string decode_utf8(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    char32_t cp = n == 0 ? c : n == 1 ? c & 0x1f : n == 2 ? c & 0x0f : c & 0x07;
    bool ok = n >= 0;
    for (int k = 1; ok && k <= n; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) >> 6) != 2) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    if (ok && ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
               (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF))
      ok = false;
    if (ok) {
      out.push_back(cp);
      i += n + 1;
    } else {
      out.push_back(0xFFFD);
      ++i;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

// ---- Character classes (tokenizers' BertNormalizer and BertPreTokenizer) ----

// Unicode White_Space.
bool is_whitespace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Control (Cc) and format (Cf) characters that clean_text removes (tab, CR and LF are
// whitespace instead); the Cf list is the common ones (soft hyphen, zero-width and
// bidirectional marks, BOM).
bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  return c < 0x20 || (c >= 0x7F && c <= 0x9F) || c == 0xAD || (c >= 0x200B && c <= 0x200F) ||
         (c >= 0x202A && c <= 0x202E) || (c >= 0x2060 && c <= 0x2064) || c == 0xFEFF;
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

// ASCII punctuation (which BERT counts as such, symbols like $ and ^ included) and Unicode
// category P in the blocks listed in tokenizer.h.
bool is_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
      (c >= 123 && c <= 126))
    return true;
  static const char32_t ranges[][2] = {
      {0xA1, 0xA1},     {0xA7, 0xA7},     {0xAB, 0xAB},     {0xB6, 0xB7},     {0xBB, 0xBB},
      {0xBF, 0xBF},     {0x37E, 0x37E},   {0x387, 0x387},   {0x2010, 0x2027}, {0x2030, 0x2043},
      {0x2045, 0x2051}, {0x2053, 0x205E}, {0x3001, 0x3003}, {0x3008, 0x3011}, {0x3014, 0x301F},
      {0x3030, 0x3030}, {0x303D, 0x303D}, {0x30FB, 0x30FB}, {0xFF01, 0xFF03}, {0xFF05, 0xFF0A},
      {0xFF0C, 0xFF0F}, {0xFF1A, 0xFF1B}, {0xFF1F, 0xFF20}, {0xFF3B, 0xFF3D}, {0xFF3F, 0xFF3F},
      {0xFF5B, 0xFF5B}, {0xFF5D, 0xFF5D}, {0xFF5F, 0xFF65}};
  for (const auto& r : ranges)
    if (c >= r[0] && c <= r[1]) return true;
  return false;
}

// Nonspacing combining marks (the part of category Mn that NFD produces for Latin text).
bool is_combining_mark(char32_t c) {
  return (c >= 0x300 && c <= 0x36F) || (c >= 0x1AB0 && c <= 0x1AFF) ||
         (c >= 0x1DC0 && c <= 0x1DFF) || (c >= 0x20D0 && c <= 0x20FF) ||
         (c >= 0xFE20 && c <= 0xFE2F);
}

// The base letter of U+00C0..U+017F under NFD where it is an ASCII letter followed by
// nonspacing marks only ('.' where the character has no such decomposition: Æ, Ø, ß, Đ, Ł,
// ...). Derived with Python's unicodedata.normalize("NFD", ...).
constexpr char kLatinBase[] =
    "AAAAAA.CEEEEIIII.NOOOOO..UUUUY..aaaaaa.ceeeeiiii.nooooo..uuuuy.y"
    "AaAaAaCcCcCcCcDd..EeEeEeEeEeGgGgGgGgHh..IiIiIiIiI...JjKk.LlLlLl."
    "...NnNnNn...OoOoOo..RrRrRrSsSsSsSsTtTt..UuUuUuUuUuUuWwYyYZzZzZz.";
static_assert(sizeof(kLatinBase) == 0x180 - 0xC0 + 1, "one entry per code point");

char32_t strip_accent(char32_t c) {
  if (c >= 0xC0 && c < 0x180 && kLatinBase[c - 0xC0] != '.') return char32_t(kLatinBase[c - 0xC0]);
  return c;
}

// Simple lowercase mapping: ASCII, Latin-1, Latin Extended-A, basic Greek and Cyrillic.
char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if (c <= 0xDE) return c == 0xD7 ? c : c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x178) return 0xFF;
    if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c % 2 ? c + 1 : c;
    if (c == 0x130) return 'i';  // İ: "i̇" in full Unicode; the dot is a mark stripped anyway
    if (c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    return c % 2 ? c : c + 1;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c >= 0x38E && c <= 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw TokenizerError(name + ": " + what);
}

bool get_bool(const nlohmann::json& obj, const char* key, bool dflt) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return dflt;
  return it->get<bool>();
}

}  // namespace

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw TokenizerError(path + ": cannot open");
  std::stringstream ss;
  ss << f.rdbuf();
  return from_json_text(ss.str(), path);
}

WordPieceTokenizer WordPieceTokenizer::from_json_text(const std::string& text,
                                                      const std::string& name) {
  WordPieceTokenizer t;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const nlohmann::json& model = j.at("model");
    if (model.value("type", std::string()) != "WordPiece")
      fail(name, "model.type is \"" + model.value("type", std::string()) +
                     "\", only WordPiece is handled");
    for (const auto& [tok, id] : model.at("vocab").items()) t.vocab_[tok] = id.get<int32_t>();
    t.unk_ = model.value("unk_token", std::string("[UNK]"));
    t.prefix_ = model.value("continuing_subword_prefix", std::string("##"));
    t.max_chars_ = model.value("max_input_chars_per_word", size_t(100));
    t.unk_id_ = t.id(t.unk_);
    if (t.unk_id_ < 0) fail(name, "unk_token \"" + t.unk_ + "\" is not in the vocabulary");

    const auto norm = j.find("normalizer");
    if (norm == j.end() || norm->is_null()) {
      t.clean_text_ = t.chinese_chars_ = t.strip_accents_ = t.lowercase_ = false;
    } else {
      if (norm->value("type", std::string()) != "BertNormalizer")
        fail(name, "normalizer.type is \"" + norm->value("type", std::string()) +
                       "\", only BertNormalizer is handled");
      t.clean_text_ = get_bool(*norm, "clean_text", true);
      t.chinese_chars_ = get_bool(*norm, "handle_chinese_chars", true);
      t.lowercase_ = get_bool(*norm, "lowercase", true);
      // strip_accents null: as lowercase (BERT's uncased models strip them).
      t.strip_accents_ = get_bool(*norm, "strip_accents", t.lowercase_);
    }

    const auto pre = j.find("pre_tokenizer");
    if (pre == j.end() || pre->is_null() || pre->value("type", std::string()) != "BertPreTokenizer")
      fail(name, "pre_tokenizer must be BertPreTokenizer");

    // The single-sequence template: special tokens before and after the sequence.
    const auto post = j.find("post_processor");
    auto special = [&](const std::string& tok, int32_t id) {
      return std::make_pair(tok, id >= 0 ? id : t.id(tok));
    };
    std::vector<std::pair<std::string, int32_t>> head, tail;
    if (post != j.end() && !post->is_null()) {
      const std::string type = post->value("type", std::string());
      if (type == "TemplateProcessing") {
        bool seen_sequence = false;
        for (const auto& piece : post->at("single")) {
          if (piece.contains("Sequence")) {
            seen_sequence = true;
            continue;
          }
          const std::string tok = piece.at("SpecialToken").at("id").get<std::string>();
          const auto& ids = post->at("special_tokens").at(tok).at("ids");
          if (ids.size() != 1) fail(name, "special token \"" + tok + "\" is not one id");
          (seen_sequence ? tail : head).push_back(special(tok, ids[0].get<int32_t>()));
        }
      } else if (type == "BertProcessing") {
        head.push_back(
            special(post->at("cls")[0].get<std::string>(), post->at("cls")[1].get<int32_t>()));
        tail.push_back(
            special(post->at("sep")[0].get<std::string>(), post->at("sep")[1].get<int32_t>()));
      } else {
        fail(name, "post_processor.type \"" + type + "\" is not handled");
      }
    } else {
      head.push_back(special("[CLS]", -1));
      tail.push_back(special("[SEP]", -1));
    }
    for (auto* list : {&head, &tail})
      for (const auto& [tok, id] : *list) {
        if (id < 0) fail(name, "special token \"" + tok + "\" is not in the vocabulary");
        Encoding& e = list == &head ? t.head_ : t.tail_;
        e.tokens.push_back(tok);
        e.ids.push_back(id);
      }
  } catch (const nlohmann::json::exception& e) {
    fail(name, std::string("unexpected tokenizer.json: ") + e.what());
  }
  return t;
}

int32_t WordPieceTokenizer::id(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? -1 : it->second;
}

std::string WordPieceTokenizer::normalize(const std::string& text) const {
  const std::u32string in = decode_utf8(text);
  std::u32string out;
  out.reserve(in.size());
  for (char32_t c : in) {
    if (clean_text_) {
      if (c == 0 || c == 0xFFFD || is_control(c)) continue;
      if (is_whitespace(c)) c = ' ';
    }
    if (chinese_chars_ && is_chinese_char(c)) {
      out += U' ';
      out += c;
      out += U' ';
      continue;
    }
    if (strip_accents_) {
      if (is_combining_mark(c)) continue;
      c = strip_accent(c);
    }
    if (lowercase_) c = to_lower(c);
    out += c;
  }
  return encode_utf8(out);
}

std::vector<std::string> WordPieceTokenizer::pre_tokenize(const std::string& normalized) const {
  std::vector<std::string> words;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) words.push_back(std::move(cur));
    cur.clear();
  };
  for (char32_t c : decode_utf8(normalized)) {
    if (is_whitespace(c)) {
      flush();
    } else if (is_punctuation(c)) {
      flush();
      append_utf8(cur, c);
      flush();
    } else {
      append_utf8(cur, c);
    }
  }
  flush();
  return words;
}

void WordPieceTokenizer::word_piece(const std::string& word, Encoding& out) const {
  const std::u32string chars = decode_utf8(word);
  if (chars.size() > max_chars_) {
    out.tokens.push_back(unk_);
    out.ids.push_back(unk_id_);
    return;
  }
  Encoding pieces;
  size_t start = 0;
  while (start < chars.size()) {
    // Longest match first.
    size_t end = chars.size();
    int32_t found = -1;
    std::string piece;
    for (; end > start; --end) {
      piece = (start > 0 ? prefix_ : std::string()) + encode_utf8(chars.substr(start, end - start));
      found = id(piece);
      if (found >= 0) break;
    }
    if (found < 0) {  // an unsplittable word is one [UNK]
      out.tokens.push_back(unk_);
      out.ids.push_back(unk_id_);
      return;
    }
    pieces.tokens.push_back(piece);
    pieces.ids.push_back(found);
    start = end;
  }
  out.tokens.insert(out.tokens.end(), pieces.tokens.begin(), pieces.tokens.end());
  out.ids.insert(out.ids.end(), pieces.ids.begin(), pieces.ids.end());
}

Encoding WordPieceTokenizer::encode(const std::string& text, size_t max_length) const {
  Encoding body;
  for (const std::string& w : pre_tokenize(normalize(text))) word_piece(w, body);
  const size_t specials = head_.ids.size() + tail_.ids.size();
  const size_t keep = max_length > specials ? max_length - specials : 0;
  if (body.ids.size() > keep) {
    body.ids.resize(keep);
    body.tokens.resize(keep);
  }
  Encoding e = head_;
  e.ids.insert(e.ids.end(), body.ids.begin(), body.ids.end());
  e.tokens.insert(e.tokens.end(), body.tokens.begin(), body.tokens.end());
  e.ids.insert(e.ids.end(), tail_.ids.begin(), tail_.ids.end());
  e.tokens.insert(e.tokens.end(), tail_.tokens.begin(), tail_.tokens.end());
  return e;
}

}  // namespace embed

#include "lua/chunker.h"

#include <utility>

namespace braid::lua {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// A unit of text and the separator that goes before it when it joins the
// previous unit in one chunk.
struct Unit {
  std::string_view text;
  const char* sep;
};

// Paragraphs: runs separated by a line that holds only white space.
std::vector<std::string_view> Paragraphs(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    if (text[i] == '\n') {
      // Is the next line blank?
      size_t j = i + 1;
      while (j < text.size() && text[j] != '\n' && IsSpace(text[j])) ++j;
      if (j < text.size() && text[j] == '\n') {
        std::string_view p = Trim(text.substr(start, i - start));
        if (!p.empty()) out.push_back(p);
        while (j < text.size() && IsSpace(text[j])) ++j;
        start = i = j;
        continue;
      }
    }
    ++i;
  }
  std::string_view p = Trim(text.substr(start));
  if (!p.empty()) out.push_back(p);
  return out;
}

// Sentences: end after '.', '!' or '?' (and closing quotes/brackets) that is
// followed by white space.
std::vector<std::string_view> Sentences(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c != '.' && c != '!' && c != '?') continue;
    size_t end = i + 1;
    while (end < text.size() && (text[end] == '"' || text[end] == '\'' || text[end] == ')')) ++end;
    if (end < text.size() && !IsSpace(text[end])) continue;
    std::string_view s = Trim(text.substr(start, end - start));
    if (!s.empty()) out.push_back(s);
    start = end;
    i = end;
  }
  std::string_view s = Trim(text.substr(start));
  if (!s.empty()) out.push_back(s);
  return out;
}

std::vector<std::string_view> Words(std::string_view text) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && IsSpace(text[i])) ++i;
    size_t start = i;
    while (i < text.size() && !IsSpace(text[i])) ++i;
    if (i > start) out.push_back(text.substr(start, i - start));
  }
  return out;
}

// Cuts a run with no boundary at all into pieces of at most max bytes, never
// inside a UTF-8 sequence (unless one character alone exceeds max).
void HardCut(std::string_view text, size_t max, const char* sep, std::vector<Unit>* out) {
  while (!text.empty()) {
    size_t n = text.size() <= max ? text.size() : max;
    if (n < text.size()) {
      size_t k = n;
      while (k > 0 && (static_cast<unsigned char>(text[k]) & 0xC0) == 0x80) --k;
      if (k > 0) n = k;
    }
    out->push_back({text.substr(0, n), sep});
    sep = "";
    text.remove_prefix(n);
  }
}

void AddWords(std::string_view sentence, size_t max, const char* sep, std::vector<Unit>* out) {
  for (std::string_view w : Words(sentence)) {
    if (w.size() <= max) {
      out->push_back({w, sep});
    } else {
      HardCut(w, max, sep, out);
    }
    sep = " ";
  }
}

void AddSentences(std::string_view para, size_t max, const char* sep, std::vector<Unit>* out) {
  for (std::string_view s : Sentences(para)) {
    if (s.size() <= max) {
      out->push_back({s, sep});
    } else {
      AddWords(s, max, sep, out);
    }
    sep = " ";
  }
}

}  // namespace

std::vector<std::string> SplitChunks(std::string_view text, size_t max_chars) {
  size_t max = max_chars < 1 ? 1 : max_chars;
  std::vector<Unit> units;
  const char* sep = "";
  for (std::string_view p : Paragraphs(text)) {
    if (p.size() <= max) {
      units.push_back({p, sep});
    } else {
      AddSentences(p, max, sep, &units);
    }
    sep = "\n\n";
  }
  std::vector<std::string> chunks;
  std::string cur;
  for (const Unit& u : units) {
    size_t sep_len = std::char_traits<char>::length(u.sep);
    if (!cur.empty() && cur.size() + sep_len + u.text.size() <= max) {
      cur.append(u.sep).append(u.text);
      continue;
    }
    if (!cur.empty()) chunks.push_back(std::move(cur));
    cur.assign(u.text);
  }
  if (!cur.empty()) chunks.push_back(std::move(cur));
  return chunks;
}

}  // namespace braid::lua

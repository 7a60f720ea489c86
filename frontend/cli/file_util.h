// Whole-file reads and writes for the braid subcommands.
#pragma once

#include <cstdio>
#include <string>

namespace braid::cli {

// Appends the file's bytes to *out; false if it cannot be opened or read.
inline bool ReadFile(const std::string& path, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out->append(buf, n);
  const bool ok = !std::ferror(f);
  std::fclose(f);
  return ok;
}

}  // namespace braid::cli

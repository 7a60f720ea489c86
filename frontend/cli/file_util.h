// Whole-file reads for the braid subcommands.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <string>

#include "engine/status.h"

namespace braid::cli {

// What a prompt file or a Lua script may hold: far more than any context
// window, and little enough to read into memory without thinking twice.
inline constexpr size_t kMaxInputFileBytes = size_t{16} << 20;

// Appends the bytes of the regular file at `path` to *out. Refuses what is
// not a regular file (a directory, /dev/zero, a FIFO would never end or never
// start) and a file over `max_bytes`, checked before reading and again while
// reading (the file may grow in between). Errors name the path.
inline Status ReadRegularFile(const std::string& path, size_t max_bytes, std::string* out) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return Status::IoError("cannot open '" + path + "'");
  // fstat on the open file, so the checks are about the file that is read.
  struct stat st {};
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    std::fclose(f);
    return Status::InvalidArgument("'" + path + "' is not a regular file");
  }
  auto too_big = [&](unsigned long long size) {
    return Status::InvalidArgument("'" + path + "' has " + std::to_string(size) +
                                   " bytes, more than the limit of " + std::to_string(max_bytes));
  };
  if (static_cast<unsigned long long>(st.st_size) > max_bytes) {
    std::fclose(f);
    return too_big(static_cast<unsigned long long>(st.st_size));
  }
  char buf[65536];
  size_t n, total = 0;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
    total += n;
    if (total > max_bytes) {
      std::fclose(f);
      return too_big(total);
    }
    out->append(buf, n);
  }
  const bool ok = !std::ferror(f);
  std::fclose(f);
  if (!ok) return Status::IoError("cannot read '" + path + "'");
  return Status::Ok();
}

}  // namespace braid::cli

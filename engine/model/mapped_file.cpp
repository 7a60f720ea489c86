#include "model/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace braid {
namespace {

Status ErrnoStatus(const std::string& path, const char* what, int err) {
  std::string message = path + ": " + what + ": " + std::strerror(err);
  if (err == ENOENT) return Status::NotFound(std::move(message));
  return Status::IoError(std::move(message));
}

// Closes the descriptor on every path out of Open.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(path, "cannot open", errno);
  FdCloser closer(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(path, "cannot stat", errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");

  std::unique_ptr<MappedFile> file(new MappedFile());
  file->name_ = path;
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) return file;  // mmap refuses length 0; an empty view is fine
  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(path, "cannot mmap", errno);
  file->data_ = static_cast<const uint8_t*>(p);
  file->owned_ = true;
  return file;
}

std::unique_ptr<MappedFile> MappedFile::Borrow(std::string name, const uint8_t* data, size_t size) {
  std::unique_ptr<MappedFile> file(new MappedFile());
  file->name_ = std::move(name);
  file->data_ = data;
  file->size_ = size;
  file->owned_ = false;
  return file;
}

MappedFile::~MappedFile() {
  if (owned_ && data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace braid

// Safe creation of report files (see output_file.h).
#include "analyzer/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace stallscope::analyzer {

absl::Status WriteNewFile(const std::string& path, std::string_view data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s: already exists; stallscope never overwrites a file", path));
    }
    return absl::PermissionDeniedError(absl::StrFormat("%s: %s", path, strerror(errno)));
  }
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      close(fd);
      return absl::InternalError(absl::StrFormat("%s: write failed: %s", path, strerror(err)));
    }
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (close(fd) != 0) {
    return absl::InternalError(absl::StrFormat("%s: close failed: %s", path, strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace stallscope::analyzer

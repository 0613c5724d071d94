// Safe creation of report files (see output_file.h).
#include "analyzer/model/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace stallscope::analyzer {

absl::Status WriteThroughTemporary(const std::string& path, std::string_view data, bool replace) {
  // Beside the target (link and rename stay on one file system), never
  // named like it (a reader of PATH's pattern must not see it half-written).
  std::string tmp = path + ".tmp.XXXXXX";
  int fd = mkstemp(tmp.data());
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create a temporary file: %s", path, strerror(errno)));
  }
  auto fail = [&](const char* what, int err) {
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrFormat("%s: %s: %s", path, what, strerror(err)));
  };
  const mode_t mask = umask(0);  // the command is single-threaded here
  umask(mask);
  if (fchmod(fd, 0640 & ~mask) != 0) return fail("chmod failed", errno);
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return fail("write failed", w < 0 ? errno : ENOSPC);
    p += w;
    left -= static_cast<size_t>(w);
  }
  if (fsync(fd) != 0 && errno != EINVAL) return fail("fsync failed", errno);
  const int closed = close(fd);
  fd = -1;
  if (closed != 0) return fail("close failed", errno);
  // A new PATH is made with link(), which fails rather than replace a file
  // created meanwhile; replacing is rename(). File systems without hard
  // links (vfat, some network mounts) get a rename after checking that PATH
  // is still free.
  int rc = replace ? rename(tmp.c_str(), path.c_str()) : link(tmp.c_str(), path.c_str());
  if (rc != 0 && !replace && (errno == EPERM || errno == ENOTSUP || errno == EOPNOTSUPP || errno == EMLINK)) {
    struct stat st;
    rc = lstat(path.c_str(), &st) == 0 ? (errno = EEXIST, -1) : rename(tmp.c_str(), path.c_str());
    if (rc == 0) return absl::OkStatus();
  }
  if (rc != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    if (!replace && err == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s: already exists; stallscope never overwrites a file", path));
    }
    return absl::InternalError(
        absl::StrFormat("%s: %s failed: %s", path, replace ? "rename" : "link", strerror(err)));
  }
  if (!replace) unlink(tmp.c_str());
  return absl::OkStatus();
}

absl::Status WriteNewFile(const std::string& path, std::string_view data) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("%s: already exists; stallscope never overwrites a file", path));
  }
  return WriteThroughTemporary(path, data, /*replace=*/false);
}

}  // namespace stallscope::analyzer

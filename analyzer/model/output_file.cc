// Safe creation of report files (see output_file.h).
#include "analyzer/model/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"

namespace stallscope::analyzer {

absl::StatusOr<TemporaryFile> TemporaryFile::Open(const std::string& path) {
  // Beside the target (link and rename stay on one file system), never
  // named like it (a reader of PATH's pattern must not see it half-written).
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("%s: cannot create a temporary file: %s", path, strerror(errno)));
  }
  TemporaryFile f(path, std::move(tmp), fd);
  const mode_t mask = umask(0);  // the command is single-threaded here
  umask(mask);
  if (fchmod(fd, 0640 & ~mask) != 0) return f.Fail("chmod failed", errno);
  return f;
}

TemporaryFile::TemporaryFile(TemporaryFile&& o) noexcept
    : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_) {
  o.fd_ = -1;
  o.tmp_.clear();
}

TemporaryFile::~TemporaryFile() {
  if (fd_ >= 0) close(fd_);
  if (!tmp_.empty()) unlink(tmp_.c_str());
}

absl::Status TemporaryFile::Fail(const char* what, int err) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) unlink(tmp_.c_str());
  tmp_.clear();
  return absl::InternalError(absl::StrFormat("%s: %s: %s", path_, what, strerror(err)));
}

absl::Status TemporaryFile::Write(std::string_view data) {
  if (fd_ < 0) return absl::InternalError(absl::StrFormat("%s: write after an error", path_));
  const char* p = data.data();
  size_t left = data.size();
  while (left > 0) {
    const ssize_t w = write(fd_, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Fail("write failed", w < 0 ? errno : ENOSPC);
    p += w;
    left -= static_cast<size_t>(w);
  }
  return absl::OkStatus();
}

absl::Status TemporaryFile::Commit(bool replace) {
  if (fd_ < 0) return absl::InternalError(absl::StrFormat("%s: commit after an error", path_));
  if (fsync(fd_) != 0 && errno != EINVAL) return Fail("fsync failed", errno);
  const int closed = close(fd_);
  fd_ = -1;
  if (closed != 0) return Fail("close failed", errno);
  const std::string& path = path_;
  const std::string tmp = std::move(tmp_);
  tmp_.clear();
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

absl::Status WriteThroughTemporary(const std::string& path, std::string_view data, bool replace) {
  auto f = TemporaryFile::Open(path);
  if (!f.ok()) return f.status();
  if (auto st = f->Write(data); !st.ok()) return st;
  return f->Commit(replace);
}

namespace {
absl::Status RefuseExisting(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(
        absl::StrFormat("%s: already exists; stallscope never overwrites a file", path));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status WriteNewFileStreamed(
    const std::string& path,
    const std::function<absl::Status(const std::function<absl::Status(std::string_view)>&)>& produce) {
  if (auto st = RefuseExisting(path); !st.ok()) return st;
  auto f = TemporaryFile::Open(path);
  if (!f.ok()) return f.status();
  if (auto st = produce([&](std::string_view piece) { return f->Write(piece); }); !st.ok()) return st;
  return f->Commit(/*replace=*/false);
}

absl::Status WriteNewFileAt(const std::string& path,
                            const std::function<absl::Status(const std::string& temporary)>& fill) {
  if (auto st = RefuseExisting(path); !st.ok()) return st;
  auto f = TemporaryFile::Open(path);
  if (!f.ok()) return f.status();
  if (auto st = fill(f->temporary_path()); !st.ok()) return st;
  return f->Commit(/*replace=*/false);
}

absl::Status WriteNewFile(const std::string& path, std::string_view data) {
  if (auto st = RefuseExisting(path); !st.ok()) return st;
  return WriteThroughTemporary(path, data, /*replace=*/false);
}

}  // namespace stallscope::analyzer

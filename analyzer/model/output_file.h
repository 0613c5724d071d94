// Writes report files whole or not at all: the data goes to a temporary file
// beside the target, which becomes the target only once it is complete, so
// a full disk or a failed write leaves nothing behind (the error says why).
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace stallscope::analyzer {

// A new file (never overwrites, a symlink at `path` included), mode 0640
// (owner and group only).
absl::Status WriteNewFile(const std::string& path, std::string_view data);

// Writes `data` to a temporary file beside `path` (mode 0640), then links
// it to `path` (fails when `path` exists) or, with `replace`, renames it over
// `path`. On any failure the temporary file is removed.
absl::Status WriteThroughTemporary(const std::string& path, std::string_view data, bool replace);

// The same, a piece at a time, for output too large to hold (the streamed
// timeline export): Open() makes the temporary file, Write() appends to it,
// Commit() makes it `path`. Destroyed uncommitted (an error on the way), the
// temporary file is removed and `path` never appears.
class TemporaryFile {
 public:
  static absl::StatusOr<TemporaryFile> Open(const std::string& path);
  TemporaryFile(TemporaryFile&& o) noexcept;
  TemporaryFile& operator=(TemporaryFile&&) = delete;
  ~TemporaryFile();

  absl::Status Write(std::string_view data);
  // `replace`: over an existing `path`; else fails when `path` exists.
  absl::Status Commit(bool replace);
  // The temporary file's own path, for a writer that opens the file itself
  // (WriteNewFileAt).
  const std::string& temporary_path() const { return tmp_; }

 private:
  TemporaryFile(std::string path, std::string tmp, int fd) : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  absl::Status Fail(const char* what, int err);

  std::string path_, tmp_;
  int fd_ = -1;
};

// A new file as WriteNewFile makes it, written through `produce`, which
// calls its sink with each piece in order (a non-OK sink status stops it
// and is returned).
absl::Status WriteNewFileStreamed(
    const std::string& path,
    const std::function<absl::Status(const std::function<absl::Status(std::string_view)>&)>& produce);

// A new file as WriteNewFile makes it, written by `fill` through the path
// it is given (an empty temporary file beside `path`, mode 0640), for a
// library that writes its own file (a SQLite database). The file becomes
// `path` once `fill` returns OK; else it is removed.
absl::Status WriteNewFileAt(const std::string& path,
                            const std::function<absl::Status(const std::string& temporary)>& fill);

}  // namespace stallscope::analyzer

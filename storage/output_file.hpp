// output_file: the one way troupe opens a file it writes (checkpoints, the export, offload files,
// metrics, traces, timelines, reports, plans). A symbolic link at the path is never followed: one
// planted there (by another user of a shared folder, say) is replaced by the new file instead of
// redirecting the write to wherever it points. Whole files are written beside their final name,
// created exclusively, and renamed into place, so a reader sees the old file or the new one.
#pragma once

#include <sys/types.h>

#include <string>

namespace troupe::storage {

// A descriptor of path opened with `flags` (O_WRONLY or O_RDWR, and O_TRUNC, O_APPEND...), created
// if missing, never through a link: a symbolic link at path is removed first. Throws
// std::runtime_error "<path>: cannot write (<reason>)".
int open_output_file(const std::string& path, int flags, mode_t mode = 0644);

// dir exists (made if missing) and a file can be written in it; throws std::invalid_argument
// "<what> <dir>: cannot write there (<reason>)" otherwise, so a folder a job would save into is
// found unusable before training starts, not at its first save.
void check_writable_folder(const std::string& dir, const std::string& what);

// Writes all of `text` to fd, retrying short writes and EINTR; false with errno set on failure.
bool write_all(int fd, const std::string& text);

// text as the whole content of path: written to a temporary file in path's folder (created with
// O_EXCL, no link followed) and renamed over path. Throws std::runtime_error naming path; path
// keeps its old content then.
void write_output_file(const std::string& path, const std::string& text);

}  // namespace troupe::storage

// output_file: the one way troupe opens a file it writes (checkpoints, the export, offload files,
// metrics, traces, timelines, reports, plans). What is at the path decides how: nothing or a
// regular file gets a new regular file; a FIFO or a character device (/dev/null, /dev/stdout) is
// written in place and never replaced; a folder, socket or block device is refused by name. A
// symbolic link is never followed: one planted there is replaced by the new file. Whole files are
// written beside their final name, created exclusively, and renamed into place, so a reader sees
// the old file or the new one. No folder is ever made for a file: a missing one is an error.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace troupe::storage {

// Throws std::invalid_argument "<what> <path>: <problem>" when path cannot take a file troupe
// writes: a folder, socket or block device there, or its folder missing or not writable. Called
// where a flag names a file, so the job refuses it before training rather than at step 1.
void check_output_path(const std::string& path, const std::string& what);

// A descriptor of path opened with `flags` (O_WRONLY or O_RDWR, and O_TRUNC, O_APPEND...), created
// if missing, never through a link: a symbolic link at path is removed first. A FIFO or character
// device there is opened in place. Throws std::runtime_error "<path>: cannot write (<reason>)".
int open_output_file(const std::string& path, int flags, mode_t mode = 0644);

// dir exists (made if missing) and a file can be written in it; throws std::invalid_argument
// "<what> <dir>: cannot write there (<reason>)" otherwise, so a folder a job would save into is
// found unusable before training starts, not at its first save.
void check_writable_folder(const std::string& dir, const std::string& what);

// Writes all of `text` to fd, retrying short writes and EINTR; false with errno set on failure.
bool write_all(int fd, const std::string& text);

// path's whole content, written by `fill(fd, name)` (name: what errors should call the file) to a
// temporary file in path's folder (created with O_EXCL, no link followed), synced when `sync`, and
// renamed over path; a FIFO or character device at path is written in place. Throws
// std::runtime_error naming path (what `fill` throws passes through); path keeps its old content
// then, and no temporary file is left.
void write_output_file_with(const std::string& path, const std::function<void(int fd, const std::string& name)>& fill,
                            bool sync = false);

// text as the whole content of path, through write_output_file_with.
void write_output_file(const std::string& path, const std::string& text);

}  // namespace troupe::storage

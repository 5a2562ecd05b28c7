#pragma once
// Directories and files that hold conversations and keys are the owner's only: what coagent
// creates is 0700 (directories) or 0600 (files) whatever the umask; what it did not create is
// never chmodded, only warned about (docs/reliability.md "Private files").

#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

namespace coagent {

/// Creates `dir` and every missing parent, each directory it creates with mode 0700 exactly
/// (set with chmod after mkdir, so the umask does not matter). Directories that exist, or that
/// another process creates meanwhile, are left as they are. Returns the error of the first
/// directory that cannot be created (`failed` names it when given).
std::error_code create_private_directories(const std::filesystem::path& dir,
                                           std::filesystem::path* failed = nullptr);

/// The warning for an existing directory of session files that its group or others can read
/// (mode & 044): `<dir>: the session directory can be read by group or others (mode 0755);
/// `chmod 700 <dir>` keeps conversations private`; nullopt when it is private or missing.
std::optional<std::string> readable_session_dir_warning(const std::filesystem::path& dir);

/// Like readable_session_dir_warning, but at most once per directory in this process (the
/// later calls for the same directory return nullopt). Thread-safe.
std::optional<std::string> readable_session_dir_warning_once(const std::filesystem::path& dir);

}  // namespace coagent

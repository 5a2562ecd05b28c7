#pragma once
// Layered, validated settings (docs/architecture.md "Configuration"): schema defaults < global file
// < project file < runtime overrides, merged into a coagent::settings. The schema (known keys,
// types, ranges, defaults) is one table in settings_store.cpp.

#include <coagent/runtime/settings.hpp>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

/// A settings file (or runtime value) that cannot be used. what() reads e.g.
/// `/home/u/.coagent/settings.json: key "retry.maxRetries": expected a non-negative integer,
/// found "three"`, `settings.json:3:7: invalid JSON: syntax error`,
/// `settings.json: empty file, expected a JSON object`.
struct settings_error : std::runtime_error {
    /// what() in the standard form: `<file>: key "<key>": expected <expected>, found <found>`
    /// (`<file>: expected <expected>, found <found>` when key is empty).
    settings_error(std::string file, std::string key, std::string expected, std::string found);
    /// The same fields with a custom what().
    settings_error(std::string file, std::string key, std::string expected, std::string found,
                   const std::string& message);

    std::string file;        // the file's path, "<runtime>" for overrides
    std::string key;         // dotted key ("retry.maxRetries"); empty if about the whole file
    std::string expected;    // "a non-negative integer", "a JSON object", "valid JSON", ...
    std::string found;       // compact JSON of the value found, or what went wrong instead
    std::size_t line = 0;    // 1-based position of a JSON syntax error; 0 if not one
    std::size_t column = 0;  // 1-based, in characters
};

/// A key the schema does not know. It is kept (get(), persist_global) and never fatal.
struct settings_warning {
    std::string file;  // as in settings_error::file
    std::string key;   // dotted, up to the first unknown part: "retry.provider", "quietStartup"
    /// A key of a settings file (not models.json / auth.json): a near miss of the settings
    /// schema gets a guess in message().
    bool settings_file = false;
    /// `<file>: unknown key "<key>" (kept, not used)`, then for a settings file `; did you mean
    /// "<key>"?` when a schema key or group is at most 2 edits away.
    std::string message() const;

    /// The same file and key (the same warning).
    friend bool operator==(const settings_warning& a, const settings_warning& b) {
        return a.file == b.file && a.key == b.key;
    }
};

/// One entry of the schema, for callers that list or document settings.
struct setting_info {
    std::string_view key;   // dotted: "retry.maxRetries"
    std::string_view type;  // "boolean" or "integer"
    std::string expected;   // as written in errors: "a non-negative integer"
    boost::json::value default_value;
};

/// The known keys, in schema order.
std::vector<setting_info> settings_schema();

/// The value of a known key read from a settings struct; nullopt for an unknown key.
std::optional<boost::json::value> setting_value(const settings& s, std::string_view dotted_key);

/// $COAGENT_DIR if set and non-empty, else $HOME/.coagent. Throws settings_error if neither
/// variable is set.
std::filesystem::path coagent_dir();
/// dir/"settings.json"
std::filesystem::path global_settings_path(const std::filesystem::path& dir);
/// cwd/".coagent/settings.json"
std::filesystem::path project_settings_path(const std::filesystem::path& cwd);

/// The settings layers and their merge. Not thread-safe: use it from one thread or strand.
class settings_store {
  public:
    /// Schema defaults only: no files, no warnings.
    static settings_store defaults();

    /// Reads and validates both files. A missing file is an empty layer; a project file that
    /// is the global file is read once. Throws settings_error for a file that cannot be read
    /// or parsed, whose top level is not an object, or whose known keys have wrong types.
    static settings_store load(std::filesystem::path global_file,
                               std::filesystem::path project_file);

    /// The merged, validated settings (recomputed on change, not per read).
    const settings& current() const noexcept { return current_; }

    /// The merged value of any key (known or not; a group gives an object), from the highest
    /// layer that has it, objects merged key by key; nullopt if no layer has it.
    std::optional<boost::json::value> get(std::string_view dotted_key) const;

    /// Where the merged value of `dotted_key` comes from: "<runtime>" for an override, else
    /// the path of the highest file that sets it, else "default" (the schema's value).
    std::string origin(std::string_view dotted_key) const;

    /// Unknown keys of the loaded files, each (file, key) once, in file order.
    const std::vector<settings_warning>& warnings() const noexcept { return warnings_; }

    /// Sets a runtime override of a known key (outranks the files; not persisted). Throws
    /// settings_error (file "<runtime>") for an unknown key or a wrong value; then nothing
    /// changes.
    void set_override(std::string_view dotted_key, const boost::json::value& v);
    /// Removes a runtime override; no effect if there is none.
    void clear_override(std::string_view dotted_key);

    /// Writes a known key to the global file: validates the value, re-reads the file, sets the
    /// key keeping every other key (unknown ones too) as found, writes a temporary file in the
    /// same directory, fsyncs it and renames it over the file (creating the directory and the
    /// file if missing), then updates the global layer. A runtime override of the key still
    /// outranks it. Throws settings_error, writing nothing, if the value or key is invalid, if
    /// the file now fails to parse or is not an object (it is not overwritten), if another
    /// key of the file is now invalid, or on an I/O error.
    void persist_global(std::string_view dotted_key, const boost::json::value& v);

    const std::filesystem::path& global_file() const noexcept { return global_file_; }
    const std::filesystem::path& project_file() const noexcept { return project_file_; }

  private:
    struct layer {
        std::string label;  // file path as text, or "<runtime>"
        boost::json::object data;
        std::vector<settings_warning> warnings;  // its unknown keys
    };

    settings_store() = default;
    void recompute();

    std::filesystem::path global_file_;
    std::filesystem::path project_file_;
    layer global_;
    layer project_;
    layer runtime_;
    boost::json::object merged_;
    settings current_;
    std::vector<settings_warning> warnings_;
};

}  // namespace coagent

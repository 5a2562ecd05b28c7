#pragma once
// $COAGENT_DIR/auth.json: API keys per provider, several per provider, and the usage-limit
// bookkeeping (policy §3 step 7), shared by every coagent process of the user:
//
//   {"openai":[{"type":"api_key","key":"sk-…"},{"type":"api_key","key":"sk-…","blockedUntil":1764450000000}],
//    "anthropic":{"type":"api_key","key":"sk-ant-…"}}
//
// A provider's value is one credential object (the reference agent's shape) or an array of them.
// Only "api_key" credentials are used; other entries and unknown fields are kept as found.
// `blockedUntil` (epoch ms) is coagent's: set by mark_usage_limit_reached, persisted so a
// restart still honours it. Writes replace the file atomically (temporary file, fsync, rename,
// mode 0600) under an exclusive flock on "<file>.lock", after re-reading it, so concurrent
// coagent processes do not lose each other's blocks. Reads pick up changes made by others.

#include <coagent/session/auth_storage.hpp>
#include <coagent/session/settings_store.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spdlog {
class logger;
}

namespace coagent {

class file_auth_storage final : public auth_storage {
  public:
    /// Reads `file` (missing: no credentials). Throws settings_error (file, key, expected,
    /// found) for a file that cannot be read, is larger than 4 MiB, is empty or blank, is not
    /// valid JSON (numbers beyond the double range included) or has a wrong shape. `now_ms`: epoch
    /// ms, injectable for tests. `logger`: where a file broken later (by another writer) is
    /// reported; the last good content is used meanwhile.
    explicit file_auth_storage(std::filesystem::path file,
                               std::function<std::int64_t()> now_ms = {},
                               std::shared_ptr<spdlog::logger> logger = nullptr);

    /// The session keeps the credential it started with (the first unblocked one when it first
    /// asks; with all blocked, the one free soonest) until a usage limit switches it, or, with a
    /// shared store (share_limits), until the store says it is blocked and another is free.
    std::string api_key(std::string_view provider, std::string_view session_id) override;

    /// Blocks the session's credential until now + retry_after_ms (60 s without a hint; an
    /// existing later block is kept), persists it, and switches the session to another
    /// unblocked credential if there is one (returns true; with none free the session keeps its
    /// credential, or, with a shared store, moves to the one free soonest). False when the
    /// session used no stored credential (a key from models.json or the environment) or none
    /// other is free. With a shared store the block is recorded there too.
    bool mark_usage_limit_reached(std::string_view provider, std::string_view session_id,
                                  std::optional<std::int64_t> retry_after_ms) override;
    /// The session ended: its choices are forgotten, its leases released (§11.31).
    void end_session(std::string_view session_id) override;

    /// Stored api_key credentials of `provider` (after re-reading a changed file).
    std::size_t credential_count(std::string_view provider);
    /// blockedUntil of credential `index` (0: not blocked), as the file says now.
    std::int64_t blocked_until(std::string_view provider, std::size_t index);

    /// The blocks the file holds now (after re-reading a changed file), by fingerprint, for
    /// `coagent limits`; ends clamped to 7 days, the ended ones left out.
    std::vector<credential_block> blocks();

    const std::filesystem::path& file() const noexcept { return file_; }

    /// Lifts the usage-limit blocks (removes `blockedUntil`) of `provider`'s credentials, or of
    /// every provider, under the file's lock; the rest of the file is kept. Returns the
    /// providers whose blocks were lifted, with how many, by provider name (`coagent auth
    /// --unblock [provider]`). Throws settings_error for a broken file or a provider without
    /// credentials (`<file>: no credentials for provider <name>`).
    std::vector<std::pair<std::string, std::size_t>> unblock(
        std::optional<std::string_view> provider = std::nullopt);

    /// Unknown fields of the api_key credentials read by the constructor ("openai[1].note"),
    /// each once, in file order: kept (also when the file is rewritten), not used.
    const std::vector<settings_warning>& warnings() const noexcept { return warnings_; }

    static constexpr std::int64_t default_block_ms = default_usage_block_ms;
    /// The longest block stored or honoured: 7 days. A server hint beyond it (Retry-After:
    /// 99999999999) blocks for 7 days; a stored block further away counts as 7 days from now.
    static constexpr std::int64_t max_block_ms = max_usage_block_ms;

  private:
    struct credential {
        std::string key;
        std::string fingerprint;
        std::int64_t blocked_until = 0;
    };
    using table = std::map<std::string, std::vector<credential>, std::less<>>;

    void refresh_locked();  // re-reads the file if it changed (mutex_ held)
    static std::int64_t effective_block(std::int64_t blocked_until, std::int64_t now);

    std::filesystem::path file_;
    std::function<std::int64_t()> now_ms_;
    std::shared_ptr<spdlog::logger> logger_;
    std::mutex mutex_;
    table creds_;
    std::string stamp_;  // identity of the file content last read (inode, size, mtime)
    std::map<std::string, std::string, std::less<>> in_use_;  // provider '\n' session → key
    std::vector<settings_warning> warnings_;
};

}  // namespace coagent

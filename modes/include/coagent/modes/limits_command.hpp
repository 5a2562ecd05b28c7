#pragma once
// `coagent limits [--json]` and `coagent limits --clear [--provider P]` (docs/limits.md): what an
// operator needs to see of the shared limit state — blocked credentials, model cooldowns, the
// retry budget per provider, active sessions per credential — and the way to reset it.

#include <coagent/session/limit_store.hpp>

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace coagent {

/// What `coagent limits` shows, at one moment.
struct limits_report {
    std::string store;  ///< "local" or "redis"
    std::string where;  ///< redis: host:port
    bool connected = true;
    struct block {
        std::string provider, fingerprint, source;  ///< source: "redis" or "auth.json"
        std::int64_t left_ms = 0;
    };
    std::vector<block> blocks;
    std::vector<model_cooldown> cooldowns;  ///< until_ms holds the time left here
    std::vector<budget_level> budgets;
    std::vector<credential_lease_count> sessions;
};

/// The report of `store` (its local copy) and of auth.json's `file_blocks` at `now_ms`.
limits_report make_limits_report(const limit_store& store,
                                 const std::vector<credential_block>& file_blocks,
                                 std::int64_t now_ms);
/// The text `coagent limits` prints (one section per kind, "none" when empty).
std::string format_limits_text(const limits_report& r);
/// `coagent limits --json`: {"store","connected","blockedCredentials":[{"provider",
/// "fingerprint","leftMs","source"}],"modelCooldowns":[{"model","leftMs"}],
/// "budgets":[{"provider","tokens"}],"activeSessions":[{"provider","fingerprint","sessions"}]}
boost::json::object limits_json(const limits_report& r);

/// Runs the command: reads the settings and auth.json of $COAGENT_DIR, connects to Redis when
/// limits.store is "redis". Returns the exit code: 0 done; 1 Redis unreachable; 2 a bad
/// settings file or auth.json.
int run_limits_command(bool json, bool clear, const std::optional<std::string>& provider);

}  // namespace coagent

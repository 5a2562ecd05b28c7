#pragma once
// limit_store: limit state that sessions share, so that a fleet of sessions decides together
// (docs/limits.md): the retry budget per provider (gRFC A6, `retry.budget`), credential blocks
// from the usage-limit path (keyed by provider and a SHA-256 fingerprint of the key, never the
// key), the fallback chain's model cooldowns and the credential pool's leases (retry-policy
// §11.23, §11.29-§11.31) and park probes (§11.27). Embedders may bring their own store: give it to
// every session through session_options::limits (and to the auth storage, share_limits()); a
// session given none keeps blocks in its auth storage and cooldowns to itself, as before.
//
// Every call is synchronous and must not block on I/O: a store that shares its state with other
// processes answers from a local copy and sends its updates in the background. The run policy
// (session/run_policy.hpp) calls it on the session's executor; a store shared by sessions on
// several threads must be thread-safe (local_limit_store is).

#include <coagent/retry/retry_budget.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/session/park_probe.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

/// One provider's retry budget, for `coagent limits`.
struct budget_level {
    std::string provider;
    std::int64_t tokens_milli = 0;  ///< thousandths of a token
};

/// A credential blocked by a usage limit, for `coagent limits`.
struct credential_block {
    std::string provider;
    std::string fingerprint;    ///< credential_fingerprint() of the key
    std::int64_t until_ms = 0;  ///< epoch ms, this process's clock
};

/// A model the fallback chain put aside, for `coagent limits`.
struct model_cooldown {
    std::string model;          ///< "provider/model"
    std::int64_t until_ms = 0;  ///< epoch ms, this process's clock
};

/// How many sessions use one credential (the pool's leases), for `coagent limits`.
struct credential_lease_count {
    std::string provider;
    std::string fingerprint;
    std::int64_t sessions = 0;
};

/// The fingerprint of an API key: the lowercase hex SHA-256 of its bytes (64 characters). What
/// the limit store keeps instead of the key.
std::string credential_fingerprint(std::string_view key);

class limit_store {
  public:
    virtual ~limit_store() = default;

    /// An attempt to `provider` failed with a retryable error (retry.budget.enabled): takes one
    /// token. Returns true when a retry is still allowed (tokens > maxTokens / 2 afterwards).
    virtual bool budget_on_failure(std::string_view provider, const retry_budget_settings& s) = 0;
    /// An attempt to `provider` succeeded: adds tokenRatio (a shared store may batch it).
    virtual void budget_on_success(std::string_view provider, const retry_budget_settings& s) = 0;
    /// The budgets this store knows of, by provider name.
    virtual std::vector<budget_level> budget_levels() const = 0;

    /// A usage limit blocks `provider`'s credential `fingerprint` until `until_ms` (epoch ms,
    /// already clamped by the caller; a later block already known is kept). `now_ms` is the
    /// caller's clock: a shared store sends the duration and lets its server's clock date it.
    virtual void block_credential(std::string_view provider, std::string_view fingerprint,
                                  std::int64_t until_ms, std::int64_t now_ms) = 0;
    /// Until when (epoch ms) the credential is blocked; 0 or a past time: not blocked.
    virtual std::int64_t credential_blocked_until(std::string_view provider,
                                                  std::string_view fingerprint) const = 0;
    /// The fallback chain put `model` ("provider/model") aside until `until_ms` (as above).
    virtual void cool_down_model(std::string_view model, std::int64_t until_ms,
                                 std::int64_t now_ms) = 0;
    /// Until when (epoch ms) `model` is put aside; 0 or a past time: not.
    virtual std::int64_t model_cooldown_until(std::string_view model) const = 0;
    /// The credential pool (§11.31): session `session` now uses `provider`'s credential
    /// `fingerprint` (a session holds one lease per provider; a new one replaces it). A shared
    /// store keeps the lease while this process lives (refreshed in the background; it expires
    /// when the process dies).
    virtual void lease_credential(std::string_view provider, std::string_view fingerprint,
                                  std::string_view session) = 0;
    /// The session ended, or uses no stored credential of `provider` any more: its lease goes.
    virtual void release_credential(std::string_view provider, std::string_view session) = 0;
    /// The active sessions on the credential, in every process of the store.
    virtual std::int64_t credential_sessions(std::string_view provider,
                                             std::string_view fingerprint) const = 0;
    /// Every credential with active sessions.
    virtual std::vector<credential_lease_count> credential_leases() const = 0;

    /// The blocks and cooldowns still running at `now_ms`.
    virtual std::vector<credential_block> credential_blocks(std::int64_t now_ms) const = 0;
    virtual std::vector<model_cooldown> model_cooldowns(std::int64_t now_ms) const = 0;

    /// Forgets the budgets, credential blocks and model cooldowns (of `provider` only when
    /// given: its budget, its credentials' blocks, its models' cooldowns).
    virtual void clear(std::optional<std::string_view> provider) = 0;

    /// "local" or "redis" (RPC get_state's limitsStore).
    virtual std::string_view kind() const noexcept = 0;
    /// The shared state is reachable (a local store always is).
    virtual bool connected() const noexcept = 0;

    // ---- park probes (retry.longWait "park", park_probe.hpp) ----------------------------------
    /// `session`'s park on `account` elapsed: probe, wait for another's probe, go, or repark.
    /// The default shares nothing: every session probes for itself.
    virtual park_wake park_probe_wake(std::string_view account, std::string_view session,
                                      std::int64_t parked_at, std::int64_t now) {
        (void)account, (void)session, (void)parked_at, (void)now;
        return {};
    }
    /// `session`'s probe on `account` ended.
    virtual void park_probe_done(std::string_view account, std::string_view session,
                                 park_probe_outcome outcome, std::int64_t until, std::int64_t now) {
        (void)account, (void)session, (void)outcome, (void)until, (void)now;
    }
};

/// The leases of one process: session → credential per provider, and the counts. Not
/// thread-safe (its owner locks). Used by the local and the Redis store.
class credential_leases_table {
  public:
    /// Returns true when something changed.
    bool lease(std::string_view provider, std::string_view fingerprint, std::string_view session);
    bool release(std::string_view provider, std::string_view session);
    /// sessions on "<provider> <fingerprint>" (credential_block_key)
    std::int64_t count(std::string_view block_key) const;
    const std::map<std::string, std::int64_t, std::less<>>& counts() const noexcept {
        return counts_;
    }

  private:
    std::map<std::string, std::string, std::less<>> by_session_;  // provider '\n' session → key
    std::map<std::string, std::int64_t, std::less<>> counts_;     // block key → sessions
};

/// The state of one process, in memory (limits.store "local", the default). Thread-safe.
class local_limit_store final : public limit_store {
  public:
    bool budget_on_failure(std::string_view provider, const retry_budget_settings& s) override;
    void budget_on_success(std::string_view provider, const retry_budget_settings& s) override;
    std::vector<budget_level> budget_levels() const override;
    void block_credential(std::string_view provider, std::string_view fingerprint,
                          std::int64_t until_ms, std::int64_t now_ms) override;
    std::int64_t credential_blocked_until(std::string_view provider,
                                          std::string_view fingerprint) const override;
    void cool_down_model(std::string_view model, std::int64_t until_ms,
                         std::int64_t now_ms) override;
    std::int64_t model_cooldown_until(std::string_view model) const override;
    std::vector<credential_block> credential_blocks(std::int64_t now_ms) const override;
    std::vector<model_cooldown> model_cooldowns(std::int64_t now_ms) const override;
    void lease_credential(std::string_view provider, std::string_view fingerprint,
                          std::string_view session) override;
    void release_credential(std::string_view provider, std::string_view session) override;
    std::int64_t credential_sessions(std::string_view provider,
                                     std::string_view fingerprint) const override;
    std::vector<credential_lease_count> credential_leases() const override;
    void clear(std::optional<std::string_view> provider) override;
    std::string_view kind() const noexcept override { return "local"; }
    bool connected() const noexcept override { return true; }
    park_wake park_probe_wake(std::string_view account, std::string_view session,
                              std::int64_t parked_at, std::int64_t now) override;
    void park_probe_done(std::string_view account, std::string_view session,
                         park_probe_outcome outcome, std::int64_t until, std::int64_t now) override;

  private:
    retry_budget& bucket(std::string_view provider, const retry_budget_settings& s);

    mutable std::mutex mutex_;
    std::map<std::string, retry_budget, std::less<>> budgets_;
    std::map<std::string, std::int64_t, std::less<>> blocks_;     // provider ' ' fingerprint
    std::map<std::string, std::int64_t, std::less<>> cooldowns_;  // "provider/model"
    credential_leases_table leases_;
    park_probe_book probes_;  // under mutex_
};

/// The key of a credential block in a store's maps and in Redis: "<provider> <fingerprint>".
std::string credential_block_key(std::string_view provider, std::string_view fingerprint);
/// The counts of a leases table ("<provider> <fingerprint>" → n) as rows.
std::vector<credential_lease_count> split_lease_counts(
    const std::map<std::string, std::int64_t, std::less<>>& counts);
/// Whether `model` ("provider/model") belongs to `provider`.
bool model_of_provider(std::string_view model, std::string_view provider) noexcept;

/// The store of sessions that were given none: one local store per process.
const std::shared_ptr<limit_store>& process_limit_store();

/// limits.redisUrl, parsed: redis://[[user]:password@]host:port[/db].
struct redis_endpoint {
    std::string host;
    std::uint16_t port = 6379;
    int db = 0;
    std::string user;  ///< empty: the default user
    std::optional<std::string> password;
};
/// nullopt (and `why`: what is wrong) for a malformed URL.
std::optional<redis_endpoint> parse_redis_url(std::string_view url, std::string& why);
/// `url` with its password (the userinfo) replaced by "***", for messages.
std::string redact_redis_url(std::string_view url);

}  // namespace coagent

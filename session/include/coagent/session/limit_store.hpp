#pragma once
// limit_store: limit state that sessions share, so that a fleet of sessions decides together
// (docs/limits.md). This version holds the retry budget per provider (gRFC A6, `retry.budget`);
// credential blocks stay in the auth storage (auth.json) and model cooldowns in the session's
// model fallback, as before. Embedders may bring their own store: give it to every session
// through session_options::limits.
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
    /// Forgets the budgets (of `provider` only when given): they start full again.
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

/// The state of one process, in memory (limits.store "local", the default). Thread-safe.
class local_limit_store final : public limit_store {
  public:
    bool budget_on_failure(std::string_view provider, const retry_budget_settings& s) override;
    void budget_on_success(std::string_view provider, const retry_budget_settings& s) override;
    std::vector<budget_level> budget_levels() const override;
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
    park_probe_book probes_;  // under mutex_
};

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

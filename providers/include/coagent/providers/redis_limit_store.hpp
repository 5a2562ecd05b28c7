#pragma once
// redis_limit_store: the limit store of limits.store "redis" (docs/limits.md): the retry budget
// per provider, credential blocks and model cooldowns shared by every process that uses the
// same Redis and key prefix (block and cooldown ends dated by Redis's clock). Decisions are
// taken from a local copy at once; updates go to Redis in the background as Lua scripts
// (EVALSHA, EVAL when the script is not cached) and come back from the other processes by
// pub/sub, with a full re-read every few seconds as a backstop. Commands are formatted by
// hiredis (redisFormatCommandArgv) and replies parsed by its redisReader; the sockets are Asio's
// on the executor given. When Redis is unreachable, slow (no answer within the timeout) or
// refuses the password, one warning is logged and the local copy goes on alone; the store
// reconnects with backoff and logs one line when it is back. Nothing here ever makes a prompt
// fail or wait.

#include <coagent/session/limit_store.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <memory>
#include <string>

namespace spdlog {
class logger;
}

namespace coagent {

struct redis_limit_store_options {
    redis_endpoint endpoint;
    std::string key_prefix = "coagent:";
    std::shared_ptr<spdlog::logger> logger;            ///< required: the warnings go there
    std::chrono::milliseconds timeout{200};            ///< connect and each command
    std::chrono::milliseconds resync{3000};            ///< the full re-read
    std::chrono::milliseconds deposit_interval{1000};  ///< batched deposits: at most one write
    std::chrono::milliseconds max_backoff{5000};       ///< between reconnection attempts
    std::chrono::milliseconds lease_ttl{10000};        ///< a dead process's leases go after this
};

class redis_limit_store final : public limit_store {
  public:
    /// Starts connecting at once (two connections: commands, and the pub/sub subscription).
    /// Its work runs on `ex` until stop(); the store may be called from any thread.
    redis_limit_store(boost::asio::any_io_executor ex, redis_limit_store_options opts);
    ~redis_limit_store() override;
    redis_limit_store(const redis_limit_store&) = delete;
    redis_limit_store& operator=(const redis_limit_store&) = delete;

    /// Sends what is still queued (within the timeout), then closes both connections; the
    /// executor's run() can then return. Idempotent.
    void stop();

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
    /// Park probes shared by the fleet (§11.27, §11.37): the book decides from its copy at once;
    /// a claim it asks for is taken in Redis in the background (its answer comes to the book
    /// before the session's next look, park_probe_poll_ms later), an outcome is stored and
    /// published. While Redis is unreachable each process probes for itself.
    park_wake park_probe_wake(std::string_view account, std::string_view session,
                              std::int64_t parked_at, std::int64_t now) override;
    void park_probe_done(std::string_view account, std::string_view session,
                         park_probe_outcome outcome, std::int64_t until, std::int64_t now) override;
    void clear(std::optional<std::string_view> provider) override;
    std::string_view kind() const noexcept override { return "redis"; }
    bool connected() const noexcept override;

    /// The Redis keys (for `coagent limits` and tests): the budget hash and the channel.
    std::string budget_key() const;
    std::string channel() const;

    struct state;

  private:
    std::shared_ptr<state> state_;
};

}  // namespace coagent

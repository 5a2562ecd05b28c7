#pragma once
// Credentials and the usage-limit path (policy §3 step 7): when a usage limit is reached the
// session asks the auth storage to put the current credential aside; if it could switch to
// another one the retry waits 0 ms. An auth storage given a limit store (share_limits) shares
// the blocks with every process of that store (docs/limits.md, retry-policy §11.29).

#include <coagent/session/limit_store.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

/// How long a usage limit blocks a credential: the hint clamped to [0, 7 days], 60 s without
/// one. Returns the end (epoch ms), saturating.
std::int64_t usage_block_until(std::optional<std::int64_t> hint_ms, std::int64_t now_ms) noexcept;
/// A block end read from elsewhere (a file, a store) counts as at most 7 days from now.
std::int64_t clamp_block(std::int64_t until_ms, std::int64_t now_ms) noexcept;
inline constexpr std::int64_t default_usage_block_ms = 60'000;
inline constexpr std::int64_t max_usage_block_ms = std::int64_t{7} * 24 * 60 * 60 * 1000;

/// One credential of a provider as the choice sees it.
struct credential_state {
    std::int64_t blocked_until = 0;  ///< epoch ms (the later of the stored and the shared block)
    std::int64_t sessions = 0;       ///< active sessions on it (the pool's leases, §11.31)
};

/// The credential choice (§11.29, §11.31), plain code: the credential available earliest (a free
/// one is available now); of those, the one with the fewest active sessions; then the first in
/// the list's order. A new session takes it; a usage limit (its credential now blocked) takes
/// it; so does a session whose credential another process blocked. `states` is not empty.
std::size_t choose_credential(std::span<const credential_state> states, std::int64_t now_ms);

class auth_storage {
  public:
    virtual ~auth_storage() = default;
    /// Blocks the credential `session_id` uses for `provider` until now + retry_after_ms
    /// (60 s without a hint). Returns true iff another unblocked credential exists and the
    /// session's next request will use it.
    virtual bool mark_usage_limit_reached(std::string_view provider, std::string_view session_id,
                                          std::optional<std::int64_t> retry_after_ms) = 0;
    /// The key the session's next request to `provider` uses (empty if none).
    virtual std::string api_key(std::string_view provider, std::string_view session_id) = 0;
    /// The session ended: it holds no credential any more (its leases go, §11.31).
    virtual void end_session(std::string_view session_id) { (void)session_id; }

    /// Shares the usage-limit blocks through `store` (docs/limits.md): a block is also recorded
    /// there, and a credential the store says is blocked counts as blocked, so a session moves
    /// off it at its next request when another is free. Call before the first use.
    void share_limits(std::shared_ptr<limit_store> store) { shared_ = std::move(store); }
    const std::shared_ptr<limit_store>& shared_limits() const noexcept { return shared_; }

  protected:
    std::shared_ptr<limit_store> shared_;
    /// What choose_credential weighs, per credential (each with `blocked_until` and
    /// `fingerprint`): its block — its own or the shared store's, whichever ends later, never
    /// beyond 7 days from now (clamp_block) — and its sessions in the shared pool.
    template <class Credentials>
    std::vector<credential_state> states_of(std::string_view provider, const Credentials& creds,
                                            std::int64_t now) const {
        std::vector<credential_state> out;
        out.reserve(creds.size());
        for (const auto& c : creds) {
            std::int64_t b = c.blocked_until;
            if (shared_)
                b = std::max(b, shared_->credential_blocked_until(provider, c.fingerprint));
            out.push_back({clamp_block(b, now),
                           shared_ ? shared_->credential_sessions(provider, c.fingerprint) : 0});
        }
        return out;
    }
    /// end_session for a map keyed provider + '\n' + session id: erases the session's entries
    /// and gives their leases back to the shared store (the caller holds its lock).
    template <class Map>
    void end_session_in(Map& in_use, std::string_view session_id) {
        std::erase_if(in_use, [&](const auto& e) {
            const auto nl = e.first.find('\n');
            if (std::string_view(e.first).substr(nl + 1) != session_id) return false;
            if (shared_) shared_->release_credential(e.first.substr(0, nl), session_id);
            return true;
        });
    }
};

/// Credentials held in memory. Thread-safe. `now_ms` is injectable for tests.
class in_memory_auth_storage final : public auth_storage {
  public:
    explicit in_memory_auth_storage(std::function<std::int64_t()> now_ms = {});

    void add_credential(std::string provider, std::string key);

    bool mark_usage_limit_reached(std::string_view provider, std::string_view session_id,
                                  std::optional<std::int64_t> retry_after_ms) override;
    std::string api_key(std::string_view provider, std::string_view session_id) override;
    void end_session(std::string_view session_id) override;

    /// When credential `index` of `provider` is blocked until (epoch ms), 0 if not blocked.
    std::int64_t blocked_until(std::string_view provider, std::size_t index) const;

    static constexpr std::int64_t default_block_ms = default_usage_block_ms;

  private:
    struct credential {
        std::string key;
        std::string fingerprint;
        std::int64_t blocked_until = 0;
    };

    std::function<std::int64_t()> now_ms_;
    mutable std::mutex mutex_;
    std::map<std::string, std::vector<credential>, std::less<>> creds_;
    std::map<std::string, std::size_t, std::less<>> in_use_;  // provider + '\n' + session → index
};

}  // namespace coagent

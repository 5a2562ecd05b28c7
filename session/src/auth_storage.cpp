#include <coagent/runtime/message.hpp>
#include <coagent/session/auth_storage.hpp>

#include <algorithm>
#include <limits>

namespace coagent {

std::int64_t clamp_block(std::int64_t until_ms, std::int64_t now_ms) noexcept {
    const std::int64_t latest =
        now_ms > std::numeric_limits<std::int64_t>::max() - max_usage_block_ms
            ? std::numeric_limits<std::int64_t>::max()
            : now_ms + max_usage_block_ms;
    return std::min(until_ms, latest);  // a block never lasts beyond 7 days from now
}

std::int64_t usage_block_until(std::optional<std::int64_t> hint_ms, std::int64_t now_ms) noexcept {
    // clamped to 7 days: a hint such as Retry-After: 99999999999 must not block for ages
    const std::int64_t hint =
        std::clamp<std::int64_t>(hint_ms.value_or(default_usage_block_ms), 0, max_usage_block_ms);
    return hint > std::numeric_limits<std::int64_t>::max() - now_ms
               ? std::numeric_limits<std::int64_t>::max()
               : now_ms + hint;
}

std::size_t choose_credential(std::span<const credential_state> states, std::int64_t now_ms) {
    std::size_t best = 0;
    for (std::size_t i = 1; i < states.size(); ++i) {
        const std::int64_t at = std::max(states[i].blocked_until, now_ms);  // available from
        const std::int64_t best_at = std::max(states[best].blocked_until, now_ms);
        if (at < best_at || (at == best_at && states[i].sessions < states[best].sessions)) best = i;
    }
    return best;
}

in_memory_auth_storage::in_memory_auth_storage(std::function<std::int64_t()> now_ms)
    : now_ms_(now_ms ? std::move(now_ms) : std::function<std::int64_t()>(wall_clock_ms)) {}

void in_memory_auth_storage::add_credential(std::string provider, std::string key) {
    std::string fp = credential_fingerprint(key);
    std::lock_guard lock(mutex_);
    creds_[std::move(provider)].push_back({std::move(key), std::move(fp), 0});
}

std::string in_memory_auth_storage::api_key(std::string_view provider,
                                            std::string_view session_id) {
    std::lock_guard lock(mutex_);
    auto it = creds_.find(provider);
    if (it == creds_.end() || it->second.empty()) return {};
    const auto& creds = it->second;
    const std::int64_t now = now_ms_();
    std::string k = std::string(provider) + '\n' + std::string(session_id);
    auto u = in_use_.find(k);
    if (u == in_use_.end()) {
        u = in_use_.emplace(k, choose_credential(states_of(provider, creds, now), now)).first;
        if (shared_) shared_->lease_credential(provider, creds[u->second].fingerprint, session_id);
    } else if (shared_ &&
               shared_->credential_blocked_until(provider, creds[u->second].fingerprint) > now) {
        // another process blocked it: move to a free one, if there is one (§11.29)
        const auto st = states_of(provider, creds, now);
        if (const auto next = choose_credential(st, now); st[next].blocked_until <= now) {
            u->second = next;
            shared_->lease_credential(provider, creds[next].fingerprint, session_id);
        }
    }
    return creds[u->second].key;
}

bool in_memory_auth_storage::mark_usage_limit_reached(std::string_view provider,
                                                      std::string_view session_id,
                                                      std::optional<std::int64_t> retry_after_ms) {
    std::lock_guard lock(mutex_);
    auto it = creds_.find(provider);
    if (it == creds_.end() || it->second.empty()) return false;
    auto& creds = it->second;
    const std::int64_t now = now_ms_();
    std::string k = std::string(provider) + '\n' + std::string(session_id);
    auto u = in_use_.find(k);
    if (u == in_use_.end()) return false;  // this session used no stored credential
    const std::int64_t until = usage_block_until(retry_after_ms, now);
    auto& cur = creds[u->second];
    cur.blocked_until = std::max(cur.blocked_until, until);
    if (shared_) shared_->block_credential(provider, cur.fingerprint, until, now);
    const auto st = states_of(provider, creds, now);
    const std::size_t next = choose_credential(st, now);
    const bool free_now = st[next].blocked_until <= now;
    const bool switched = next != u->second && free_now;
    // the next request uses a free one; with every credential blocked the session keeps its
    // own, unless it is in a shared pool: then it takes the one free soonest (§11.31)
    if (!free_now && !shared_) return false;
    u->second = next;
    if (shared_) shared_->lease_credential(provider, creds[next].fingerprint, session_id);
    return switched;
}

void in_memory_auth_storage::end_session(std::string_view session_id) {
    std::lock_guard lock(mutex_);
    end_session_in(in_use_, session_id);
}

std::int64_t in_memory_auth_storage::blocked_until(std::string_view provider,
                                                   std::size_t index) const {
    std::lock_guard lock(mutex_);
    auto it = creds_.find(provider);
    if (it == creds_.end() || index >= it->second.size()) return 0;
    return it->second[index].blocked_until;
}

}  // namespace coagent

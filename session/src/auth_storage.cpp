#include <coagent/runtime/message.hpp>
#include <coagent/session/auth_storage.hpp>

namespace coagent {

in_memory_auth_storage::in_memory_auth_storage(std::function<std::int64_t()> now_ms)
    : now_ms_(now_ms ? std::move(now_ms) : std::function<std::int64_t()>(wall_clock_ms)) {}

void in_memory_auth_storage::add_credential(std::string provider, std::string key) {
    std::lock_guard lock(mutex_);
    creds_[std::move(provider)].push_back({std::move(key), 0});
}

std::size_t in_memory_auth_storage::pick(std::vector<credential>& creds, std::int64_t now) const {
    for (std::size_t i = 0; i < creds.size(); ++i)
        if (creds[i].blocked_until <= now) return i;
    return 0;  // all blocked: keep using the first (there is nothing else)
}

std::string in_memory_auth_storage::api_key(std::string_view provider,
                                            std::string_view session_id) {
    std::lock_guard lock(mutex_);
    auto it = creds_.find(provider);
    if (it == creds_.end() || it->second.empty()) return {};
    std::string k = std::string(provider) + '\n' + std::string(session_id);
    auto u = in_use_.find(k);
    if (u == in_use_.end()) u = in_use_.emplace(k, pick(it->second, now_ms_())).first;
    return it->second[u->second].key;
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
    const std::int64_t hint = retry_after_ms.value_or(default_block_ms);
    auto& cur = creds[u->second];
    cur.blocked_until = std::max(cur.blocked_until, now + std::max<std::int64_t>(hint, 0));
    for (std::size_t i = 0; i < creds.size(); ++i)
        if (i != u->second && creds[i].blocked_until <= now) {
            u->second = i;  // the next request uses it
            return true;
        }
    return false;
}

std::int64_t in_memory_auth_storage::blocked_until(std::string_view provider,
                                                   std::size_t index) const {
    std::lock_guard lock(mutex_);
    auto it = creds_.find(provider);
    if (it == creds_.end() || index >= it->second.size()) return 0;
    return it->second[index].blocked_until;
}

}  // namespace coagent

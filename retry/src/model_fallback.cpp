#include <coagent/retry/model_fallback.hpp>

#include <algorithm>
#include <limits>

namespace coagent {

std::int64_t model_fallback::suppressed_until(std::string_view selector) const {
    std::int64_t own = 0;
    for (const auto& [s, until] : suppressed_)
        if (s == selector) own = until;
    return shared_ ? std::max(own, shared_(selector)) : own;
}

std::optional<retry_fallback_applied_event> model_fallback::on_usage_limit(
    std::string_view current, std::optional<std::int64_t> hint_ms, std::int64_t now_ms,
    const retry_settings& s, const std::function<bool(std::string_view)>& usable) {
    if (!s.fallback || s.fallback->empty()) return std::nullopt;

    // put the current model aside (keeping the later of an old and a new block)
    const std::int64_t cooldown = hint_ms && *hint_ms > 0 ? *hint_ms : default_cooldown_ms;
    const std::int64_t until = now_ms > std::numeric_limits<std::int64_t>::max() - cooldown
                                   ? std::numeric_limits<std::int64_t>::max()
                                   : now_ms + cooldown;
    auto it = std::find_if(suppressed_.begin(), suppressed_.end(),
                           [&](const auto& e) { return e.first == current; });
    if (it == suppressed_.end())
        suppressed_.emplace_back(std::string(current), until);
    else
        it->second = std::max(it->second, until);
    std::erase_if(suppressed_, [&](const auto& e) { return e.second <= now_ms; });

    // the role: the active one, else the first chain listing the current model, else "default"
    const std::vector<std::string>* chain = nullptr;
    std::string role;
    for (const auto& [r, models] : *s.fallback) {
        if (active() && r == role_) {
            chain = &models;
            role = r;
            break;
        }
    }
    if (!chain)
        for (const auto& [r, models] : *s.fallback)
            if (std::find(models.begin(), models.end(), current) != models.end()) {
                chain = &models;
                role = r;
                break;
            }
    if (!chain)
        for (const auto& [r, models] : *s.fallback)
            if (r == "default") {
                chain = &models;
                role = r;
                break;
            }
    if (!chain) return std::nullopt;

    for (const auto& candidate : *chain) {
        if (candidate == current || suppressed(candidate, now_ms) || !usable(candidate)) continue;
        if (!active()) primary_ = std::string(current);
        role_ = role;
        return retry_fallback_applied_event{std::string(current), candidate, role};
    }
    return std::nullopt;
}

std::optional<std::string> model_fallback::primary_to_restore(std::int64_t now_ms,
                                                              const retry_settings& s) {
    if (!active() || s.fallback_revert == fallback_revert_policy::never) return std::nullopt;
    if (suppressed(primary_, now_ms)) return std::nullopt;
    std::string p = std::move(primary_);
    reset();
    return p;
}

}  // namespace coagent

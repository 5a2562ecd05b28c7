#include <coagent/session/limit_store.hpp>

#include <boost/url/parse.hpp>

#include <charconv>

namespace coagent {

retry_budget& local_limit_store::bucket(std::string_view provider, const retry_budget_settings& s) {
    auto it = budgets_.find(provider);
    if (it == budgets_.end()) it = budgets_.emplace(std::string(provider), retry_budget(s)).first;
    return it->second;
}

bool local_limit_store::budget_on_failure(std::string_view provider,
                                          const retry_budget_settings& s) {
    std::lock_guard lock(mutex_);
    return bucket(provider, s).on_failure(s);
}

void local_limit_store::budget_on_success(std::string_view provider,
                                          const retry_budget_settings& s) {
    std::lock_guard lock(mutex_);
    bucket(provider, s).on_success(s);
}

std::vector<budget_level> local_limit_store::budget_levels() const {
    std::lock_guard lock(mutex_);
    std::vector<budget_level> out;
    for (const auto& [provider, b] : budgets_) out.push_back({provider, b.tokens_milli()});
    return out;
}

void local_limit_store::clear(std::optional<std::string_view> provider) {
    std::lock_guard lock(mutex_);
    if (!provider) {
        budgets_.clear();
    } else if (auto it = budgets_.find(*provider); it != budgets_.end()) {
        budgets_.erase(it);
    }
}

park_wake local_limit_store::park_probe_wake(std::string_view account, std::string_view session,
                                             std::int64_t parked_at, std::int64_t now) {
    std::lock_guard lock(mutex_);
    return probes_.wake(account, session, parked_at, now);
}

void local_limit_store::park_probe_done(std::string_view account, std::string_view session,
                                        park_probe_outcome outcome, std::int64_t until,
                                        std::int64_t now) {
    std::lock_guard lock(mutex_);
    probes_.done(account, session, outcome, until, now);
}

const std::shared_ptr<limit_store>& process_limit_store() {
    static const std::shared_ptr<limit_store> store = std::make_shared<local_limit_store>();
    return store;
}

std::optional<redis_endpoint> parse_redis_url(std::string_view url, std::string& why) {
    auto parsed = boost::urls::parse_uri(url);
    if (!parsed) {
        why = "not a URL";
        return std::nullopt;
    }
    const auto& u = *parsed;
    if (u.scheme() != "redis") {
        why = "the scheme must be redis";
        return std::nullopt;
    }
    redis_endpoint e;
    e.host = std::string(u.encoded_host());
    if (e.host.size() > 1 && e.host.front() == '[' && e.host.back() == ']')
        e.host = e.host.substr(1, e.host.size() - 2);
    if (e.host.empty()) {
        why = "no host";
        return std::nullopt;
    }
    if (!u.has_port() || u.port().empty() || u.port_number() == 0) {
        why = "no port";
        return std::nullopt;
    }
    e.port = u.port_number();
    if (u.has_userinfo()) {
        e.user = std::string(u.user());
        if (u.has_password()) e.password = std::string(u.password());
    }
    std::string_view path = u.encoded_path();
    if (!path.empty() && path != "/") {
        path.remove_prefix(1);
        const auto r = std::from_chars(path.data(), path.data() + path.size(), e.db);
        if (r.ec != std::errc() || r.ptr != path.data() + path.size() || e.db < 0) {
            why = "the database must be a number: /0, /1, ...";
            return std::nullopt;
        }
    }
    if (u.has_query() || u.has_fragment()) {
        why = "no query or fragment";
        return std::nullopt;
    }
    return e;
}

std::string redact_redis_url(std::string_view url) {
    const auto scheme = url.find("://");
    if (scheme == std::string_view::npos) return std::string(url);
    const auto start = scheme + 3;
    const auto end = url.find_first_of("/?#", start);
    const auto at = url.rfind('@', end == std::string_view::npos ? url.size() : end);
    if (at == std::string_view::npos || at < start) return std::string(url);
    return std::string(url.substr(0, start)) + "***" + std::string(url.substr(at));
}

}  // namespace coagent

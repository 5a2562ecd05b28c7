#include <coagent/session/limit_store.hpp>

#include <boost/url/parse.hpp>

#include <openssl/sha.h>

#include <algorithm>
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

std::string credential_fingerprint(std::string_view key) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * SHA256_DIGEST_LENGTH);
    for (const unsigned char b : digest) {
        out += hex[b >> 4];
        out += hex[b & 0xf];
    }
    return out;
}

std::string credential_block_key(std::string_view provider, std::string_view fingerprint) {
    std::string k;
    k.reserve(provider.size() + 1 + fingerprint.size());
    k.append(provider).append(1, ' ').append(fingerprint);
    return k;
}

bool model_of_provider(std::string_view model, std::string_view provider) noexcept {
    return model.size() > provider.size() && model.starts_with(provider) &&
           model[provider.size()] == '/';
}

namespace {
void keep_later(std::map<std::string, std::int64_t, std::less<>>& m, std::string key,
                std::int64_t until, std::int64_t now) {
    std::erase_if(m, [&](const auto& e) { return e.second <= now; });
    if (until <= now) return;
    auto [it, fresh] = m.emplace(std::move(key), until);
    if (!fresh) it->second = std::max(it->second, until);
}
std::int64_t until_of(const std::map<std::string, std::int64_t, std::less<>>& m,
                      std::string_view key) {
    const auto it = m.find(key);
    return it == m.end() ? 0 : it->second;
}
}  // namespace

void local_limit_store::block_credential(std::string_view provider, std::string_view fingerprint,
                                         std::int64_t until_ms, std::int64_t now_ms) {
    std::lock_guard lock(mutex_);
    keep_later(blocks_, credential_block_key(provider, fingerprint), until_ms, now_ms);
}

std::int64_t local_limit_store::credential_blocked_until(std::string_view provider,
                                                         std::string_view fingerprint) const {
    std::lock_guard lock(mutex_);
    return until_of(blocks_, credential_block_key(provider, fingerprint));
}

void local_limit_store::cool_down_model(std::string_view model, std::int64_t until_ms,
                                        std::int64_t now_ms) {
    std::lock_guard lock(mutex_);
    keep_later(cooldowns_, std::string(model), until_ms, now_ms);
}

std::int64_t local_limit_store::model_cooldown_until(std::string_view model) const {
    std::lock_guard lock(mutex_);
    return until_of(cooldowns_, model);
}

std::vector<credential_block> local_limit_store::credential_blocks(std::int64_t now_ms) const {
    std::lock_guard lock(mutex_);
    std::vector<credential_block> out;
    for (const auto& [k, until] : blocks_)
        if (until > now_ms) {
            const auto space = k.rfind(' ');
            out.push_back({k.substr(0, space), k.substr(space + 1), until});
        }
    return out;
}

std::vector<model_cooldown> local_limit_store::model_cooldowns(std::int64_t now_ms) const {
    std::lock_guard lock(mutex_);
    std::vector<model_cooldown> out;
    for (const auto& [m, until] : cooldowns_)
        if (until > now_ms) out.push_back({m, until});
    return out;
}

bool credential_leases_table::lease(std::string_view provider, std::string_view fingerprint,
                                    std::string_view session) {
    std::string s;
    s.append(provider).append(1, '\n').append(session);
    std::string key = credential_block_key(provider, fingerprint);
    auto it = by_session_.find(s);
    if (it != by_session_.end()) {
        if (it->second == key) return false;
        if (auto c = counts_.find(it->second); c != counts_.end() && --c->second <= 0)
            counts_.erase(c);
        it->second = key;
    } else {
        by_session_.emplace(std::move(s), key);
    }
    ++counts_[std::move(key)];
    return true;
}

bool credential_leases_table::release(std::string_view provider, std::string_view session) {
    std::string s;
    s.append(provider).append(1, '\n').append(session);
    auto it = by_session_.find(s);
    if (it == by_session_.end()) return false;
    if (auto c = counts_.find(it->second); c != counts_.end() && --c->second <= 0) counts_.erase(c);
    by_session_.erase(it);
    return true;
}

std::int64_t credential_leases_table::count(std::string_view block_key) const {
    const auto it = counts_.find(block_key);
    return it == counts_.end() ? 0 : it->second;
}

void local_limit_store::lease_credential(std::string_view provider, std::string_view fingerprint,
                                         std::string_view session) {
    std::lock_guard lock(mutex_);
    leases_.lease(provider, fingerprint, session);
}

void local_limit_store::release_credential(std::string_view provider, std::string_view session) {
    std::lock_guard lock(mutex_);
    leases_.release(provider, session);
}

std::int64_t local_limit_store::credential_sessions(std::string_view provider,
                                                    std::string_view fingerprint) const {
    std::lock_guard lock(mutex_);
    return leases_.count(credential_block_key(provider, fingerprint));
}

std::vector<credential_lease_count> split_lease_counts(
    const std::map<std::string, std::int64_t, std::less<>>& counts) {
    std::vector<credential_lease_count> out;
    for (const auto& [k, n] : counts) {
        if (n <= 0) continue;
        const auto space = k.rfind(' ');
        out.push_back({k.substr(0, space), k.substr(space + 1), n});
    }
    return out;
}

std::vector<credential_lease_count> local_limit_store::credential_leases() const {
    std::lock_guard lock(mutex_);
    return split_lease_counts(leases_.counts());
}

void local_limit_store::clear(std::optional<std::string_view> provider) {
    std::lock_guard lock(mutex_);
    if (!provider) {
        budgets_.clear();
        blocks_.clear();
        cooldowns_.clear();
        return;
    }
    if (auto it = budgets_.find(*provider); it != budgets_.end()) budgets_.erase(it);
    std::erase_if(blocks_, [&](const auto& e) {
        return e.first.size() > provider->size() && e.first.starts_with(*provider) &&
               e.first[provider->size()] == ' ';
    });
    std::erase_if(cooldowns_, [&](const auto& e) { return model_of_provider(e.first, *provider); });
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

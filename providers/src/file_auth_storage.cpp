// auth.json: credentials per provider with persisted usage-limit blocks; atomic, locked writes.

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/session/config_file.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/json/serialize.hpp>

#include <spdlog/logger.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coagent {

namespace {

namespace fs = std::filesystem;

std::string found_text(const json::value& v) {
    return config_file::compact(v);
}

std::optional<std::string> read_all(const fs::path& p) {
    return config_file::read(p, p.string());
}

json::object parse_root(std::string_view text, const std::string& label) {
    return config_file::parse_object(text, label, "a JSON object of providers");
}

// The credential objects of one provider's value (an object or an array of objects).
std::vector<json::object*> credential_objects(json::value& v, const std::string& label,
                                              const std::string& provider) {
    std::vector<json::object*> out;
    if (v.is_object()) {
        out.push_back(&v.get_object());
        return out;
    }
    if (!v.is_array())
        throw settings_error(label, provider, "a credential object or an array of them",
                             found_text(v));
    auto& a = v.get_array();
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (!a[i].is_object())
            throw settings_error(label, provider + "[" + std::to_string(i) + "]",
                                 "a credential object", found_text(a[i]));
        out.push_back(&a[i].get_object());
    }
    return out;
}

std::string cred_key(const std::string& provider, std::size_t i, bool array,
                     std::string_view field) {
    return provider + (array ? "[" + std::to_string(i) + "]" : std::string()) + "." +
           std::string(field);
}

std::string stamp_of(const fs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return "missing";
    return std::to_string(st.st_ino) + ":" + std::to_string(st.st_size) + ":" +
           std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
}

}  // namespace

// The fields of an api_key credential coagent knows; others are kept and warned about.
constexpr std::string_view credential_fields[] = {"type", "key", "blockedUntil"};

// The api_key credentials of a parsed auth.json, validated. Unknown fields of api_key
// credentials are appended to `warnings` (when given), each once.
static std::map<std::string, std::vector<std::pair<std::string, std::int64_t>>, std::less<>>
credentials_of(json::object& root, const std::string& label,
               std::vector<settings_warning>* warnings = nullptr) {
    std::map<std::string, std::vector<std::pair<std::string, std::int64_t>>, std::less<>> out;
    for (auto& kv : root) {
        const std::string provider(kv.key());
        const bool array = kv.value().is_array();
        auto objs = credential_objects(kv.value(), label, provider);
        auto& list = out[provider];
        for (std::size_t i = 0; i < objs.size(); ++i) {
            json::object& c = *objs[i];
            const auto* type = c.if_contains("type");
            if (type && !type->is_string())
                throw settings_error(label, cred_key(provider, i, array, "type"), "a string",
                                     found_text(*type));
            if (type && type->get_string() != "api_key") continue;  // oauth etc.: kept, not used
            if (warnings)
                for (const auto& kv : c)
                    if (const std::string_view field = kv.key();
                        std::find(std::begin(credential_fields), std::end(credential_fields),
                                  field) == std::end(credential_fields)) {
                        settings_warning w{label, cred_key(provider, i, array, field)};
                        if (std::find(warnings->begin(), warnings->end(), w) == warnings->end())
                            warnings->push_back(std::move(w));
                    }
            const auto* key = c.if_contains("key");
            if (!key || !key->is_string() || key->get_string().empty())
                throw settings_error(label, cred_key(provider, i, array, "key"),
                                     "a non-empty string",
                                     key ? found_text(*key) : "nothing (missing)");
            std::int64_t blocked = 0;
            if (const auto* b = c.if_contains("blockedUntil")) {
                if (b->is_int64() && b->get_int64() >= 0)
                    blocked = b->get_int64();
                else if (!b->is_null())
                    throw settings_error(label, cred_key(provider, i, array, "blockedUntil"),
                                         "an epoch time in ms (a non-negative integer)",
                                         found_text(*b));
            }
            list.emplace_back(std::string(key->get_string()), blocked);
        }
    }
    return out;
}

// The credentials of a validated auth.json as the storage keeps them (with their fingerprints).
template <class Table, class Parsed>
static Table to_table(Parsed parsed) {
    Table t;
    for (auto& [provider, list] : parsed)
        for (auto& [key, blocked] : list) {
            std::string fp = credential_fingerprint(key);
            t[provider].push_back({std::move(key), std::move(fp), blocked});
        }
    return t;
}

file_auth_storage::file_auth_storage(fs::path file, std::function<std::int64_t()> now_ms,
                                     std::shared_ptr<spdlog::logger> logger)
    : file_(std::move(file)),
      now_ms_(now_ms ? std::move(now_ms) : std::function<std::int64_t()>(wall_clock_ms)),
      logger_(std::move(logger)) {
    std::lock_guard lock(mutex_);
    const std::string stamp = stamp_of(file_);
    auto text = read_all(file_);
    json::object root = text ? parse_root(*text, file_.string()) : json::object();
    creds_ = to_table<table>(credentials_of(root, file_.string(), &warnings_));
    stamp_ = stamp;
}

void file_auth_storage::refresh_locked() {
    const std::string stamp = stamp_of(file_);
    if (stamp == stamp_) return;
    try {
        auto text = read_all(file_);
        json::object root = text ? parse_root(*text, file_.string()) : json::object();
        creds_ = to_table<table>(credentials_of(root, file_.string()));
        stamp_ = stamp;
    } catch (const settings_error& e) {
        if (logger_) logger_->error("{} (using the credentials read before)", e.what());
        stamp_ = stamp;  // report a broken version once
    }
}

std::int64_t file_auth_storage::effective_block(std::int64_t blocked_until, std::int64_t now) {
    return clamp_block(blocked_until, now);  // a block never lasts beyond 7 days from now
}

std::string file_auth_storage::api_key(std::string_view provider, std::string_view session_id) {
    std::lock_guard lock(mutex_);
    refresh_locked();
    auto it = creds_.find(provider);
    if (it == creds_.end() || it->second.empty()) return {};
    const auto& creds = it->second;
    const std::int64_t now = now_ms_();
    const std::string k = std::string(provider) + '\n' + std::string(session_id);
    if (auto u = in_use_.find(k); u != in_use_.end()) {
        for (const auto& c : creds)
            if (c.key == u->second) {
                // another process blocked it (a shared store): move to a free one, if any
                if (!shared_ || shared_->credential_blocked_until(provider, c.fingerprint) <= now)
                    return c.key;
                const auto st = states_of(provider, creds, now);
                const std::size_t next = choose_credential(st, now);
                if (st[next].blocked_until <= now) {
                    u->second = creds[next].key;
                    shared_->lease_credential(provider, creds[next].fingerprint, session_id);
                }
                return u->second;
            }
        // the key left the file: choose again
    }
    const auto& chosen = creds[choose_credential(states_of(provider, creds, now), now)];
    in_use_[k] = chosen.key;
    if (shared_) shared_->lease_credential(provider, chosen.fingerprint, session_id);  // §11.31
    return chosen.key;
}

bool file_auth_storage::mark_usage_limit_reached(std::string_view provider,
                                                 std::string_view session_id,
                                                 std::optional<std::int64_t> retry_after_ms) {
    std::lock_guard lock(mutex_);
    const std::string k = std::string(provider) + '\n' + std::string(session_id);
    auto u = in_use_.find(k);
    if (u == in_use_.end()) return false;  // the session used no stored credential
    const std::int64_t now = now_ms_();
    const std::int64_t until = usage_block_until(retry_after_ms, now);  // clamped to 7 days

    config_file::lock flock_guard(file_);
    if (!flock_guard.error.empty() && logger_)
        logger_->warn("cannot lock {}: {} (writing without the lock)", file_.string(),
                      flock_guard.error);
    try {
        auto text = read_all(file_);
        json::object root = text ? parse_root(*text, file_.string()) : json::object();
        credentials_of(root, file_.string());  // validates before we write anything
        bool found = false;
        if (auto* pv = root.if_contains(provider)) {
            for (auto* c : credential_objects(*pv, file_.string(), std::string(provider))) {
                const auto* type = c->if_contains("type");
                const auto* key = c->if_contains("key");
                if ((type && type->get_string() != "api_key") || !key ||
                    key->get_string() != u->second)
                    continue;
                std::int64_t old = 0;
                if (const auto* b = c->if_contains("blockedUntil"); b && b->is_int64())
                    old = b->get_int64();
                (*c)["blockedUntil"] = std::max(effective_block(old, now), until);
                found = true;
                break;
            }
        }
        if (found) {
            // mode 0600: credentials are the owner's only
            config_file::write_atomically(file_, config_file::pretty(json::value(root)),
                                          file_.string(), 0600);
            creds_ = to_table<table>(credentials_of(root, file_.string()));
            stamp_ = stamp_of(file_);
        } else if (logger_) {
            logger_->warn("{}: the credential in use for {} is no longer in the file; not blocked",
                          file_.string(), provider);
        }
    } catch (const settings_error& e) {
        // keep going in memory: the block still holds for this process
        if (logger_)
            logger_->error("cannot record the usage limit in {}: {}", file_.string(), e.what());
        if (auto it = creds_.find(provider); it != creds_.end())
            for (auto& c : it->second)
                if (c.key == u->second) c.blocked_until = std::max(c.blocked_until, until);
    }

    auto it = creds_.find(provider);
    if (it == creds_.end() || it->second.empty()) return false;
    const auto& creds = it->second;
    if (shared_)
        for (const auto& c : creds)
            if (c.key == u->second) shared_->block_credential(provider, c.fingerprint, until, now);
    // the next request uses a free credential (§11.29); with every credential blocked the
    // session keeps its own, unless it is in a shared pool: then it takes the one free soonest
    const auto st = states_of(provider, creds, now);
    const std::size_t next = choose_credential(st, now);
    const bool free_now = st[next].blocked_until <= now;
    const bool switched = creds[next].key != u->second && free_now;
    if (!free_now && !shared_) return false;
    u->second = creds[next].key;
    if (shared_) shared_->lease_credential(provider, creds[next].fingerprint, session_id);
    return switched;
}

void file_auth_storage::end_session(std::string_view session_id) {
    std::lock_guard lock(mutex_);
    end_session_in(in_use_, session_id);
}

std::size_t file_auth_storage::credential_count(std::string_view provider) {
    std::lock_guard lock(mutex_);
    refresh_locked();
    auto it = creds_.find(provider);
    return it == creds_.end() ? 0 : it->second.size();
}

std::int64_t file_auth_storage::blocked_until(std::string_view provider, std::size_t index) {
    std::lock_guard lock(mutex_);
    refresh_locked();
    auto it = creds_.find(provider);
    if (it == creds_.end() || index >= it->second.size()) return 0;
    return effective_block(it->second[index].blocked_until, now_ms_());
}

std::vector<credential_block> file_auth_storage::blocks() {
    std::lock_guard lock(mutex_);
    refresh_locked();
    const std::int64_t now = now_ms_();
    std::vector<credential_block> out;
    for (const auto& [provider, creds] : creds_)
        for (const auto& c : creds)
            if (const std::int64_t b = effective_block(c.blocked_until, now); b > now)
                out.push_back({provider, c.fingerprint, b});
    return out;
}

std::vector<std::pair<std::string, std::size_t>> file_auth_storage::unblock(
    std::optional<std::string_view> provider) {
    std::lock_guard lock(mutex_);
    config_file::lock flock_guard(file_);
    if (!flock_guard.error.empty() && logger_)
        logger_->warn("cannot lock {}: {} (writing without the lock)", file_.string(),
                      flock_guard.error);
    auto text = read_all(file_);
    json::object root = text ? parse_root(*text, file_.string()) : json::object();
    const auto creds = credentials_of(root, file_.string());  // validates before any write
    if (provider && std::none_of(creds.begin(), creds.end(), [&](const auto& c) {
            return c.first == *provider && !c.second.empty();
        }))
        throw settings_error(
            file_.string(), std::string(*provider), "credentials", "none",
            file_.string() + ": no credentials for provider " + std::string(*provider));
    std::vector<std::pair<std::string, std::size_t>> lifted;
    for (const auto& [name, list] : creds) {
        if (provider && name != *provider) continue;
        std::size_t n = 0;
        for (auto* c : credential_objects(root.at(name), file_.string(), name)) {
            const auto* type = c->if_contains("type");
            if (type && type->is_string() && type->get_string() != "api_key") continue;
            const auto* b = c->if_contains("blockedUntil");
            if (!b) continue;
            if (b->is_int64() && b->get_int64() > 0) ++n;
            c->erase("blockedUntil");
        }
        if (n > 0) lifted.emplace_back(name, n);
    }
    if (!lifted.empty()) {
        config_file::write_atomically(file_, config_file::pretty(json::value(root)), file_.string(),
                                      0600);
        stamp_.clear();  // re-read on next use
    }
    return lifted;
}

}  // namespace coagent

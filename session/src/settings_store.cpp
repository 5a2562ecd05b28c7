#include <coagent/session/config_file.hpp>
#include <coagent/session/limit_store.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/json/parser.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <system_error>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace coagent {

namespace {

namespace json = boost::json;
namespace fs = std::filesystem;

constexpr std::string_view runtime_label = "<runtime>";

// ---------------------------------------------------------------------------------------------
// The schema: every known key, in one place.
// ---------------------------------------------------------------------------------------------

// chains: retry.fallbackChains, an object of role → array of "provider/model" selectors;
// number: a decimal stored in thousandths (retry.budget.tokenRatio); text: a string, checked
// when the entry has check_text (limits.*), kept through store_json / load_json
enum class value_type { boolean, integer, choice, chains, number, text };

struct schema_entry {
    std::string_view key;  // dotted
    value_type type;
    std::int64_t default_value;  // booleans as 0 / 1, choices as their index
    std::int64_t min;            // integers only
    std::int64_t max;            // from the field's C++ type
    void (*store)(settings&, std::int64_t);
    std::int64_t (*load)(const settings&);
    const std::string_view* choices = nullptr;  // choice: the names, in enum order
    std::size_t choice_count = 0;
    void (*store_json)(settings&, const json::value&) = nullptr;  // chains: from the (valid) value
    json::value (*load_json)(const settings&) = nullptr;          // chains: as JSON
    // text: "" when `v` is valid, else what is wrong with it (may be "" too: see below)
    bool (*check_text)(std::string_view v, std::string& why) = nullptr;
    std::string_view default_text = {};   // text: the default
    std::string_view text_expected = {};  // text: what a valid value is
};

// Accessors for settings.*Group.*Field, with the limits of the field's type.
template <auto Group, auto Field>
struct field {
    using type = std::remove_cvref_t<decltype((std::declval<settings&>().*Group).*Field)>;
    static void store(settings& s, std::int64_t v) { (s.*Group).*Field = static_cast<type>(v); }
    static std::int64_t load(const settings& s) {
        return static_cast<std::int64_t>((s.*Group).*Field);
    }
};

template <auto Group, auto Field>
constexpr schema_entry boolean(std::string_view key, bool default_value) {
    using f = field<Group, Field>;
    static_assert(std::is_same_v<typename f::type, bool>);
    return {key, value_type::boolean, default_value ? 1 : 0, 0, 1, &f::store, &f::load};
}

template <auto Group, auto Field>
constexpr schema_entry integer(std::string_view key, std::int64_t default_value, std::int64_t min,
                               std::int64_t max = -1) {
    using f = field<Group, Field>;
    using t = typename f::type;
    static_assert(std::is_integral_v<t> && !std::is_same_v<t, bool> && std::is_signed_v<t> &&
                  sizeof(t) <= sizeof(std::int64_t));
    schema_entry e{key, value_type::integer, default_value, min, 0, &f::store, &f::load};
    e.max = max < 0 ? std::numeric_limits<t>::max() : max;
    return e;
}

// A decimal number > 0 with three decimal places, stored in thousandths (`min`, `max` too).
template <auto Group, auto Field>
constexpr schema_entry thousandths(std::string_view key, std::int64_t default_milli,
                                   std::int64_t max_milli) {
    using f = field<Group, Field>;
    return {key, value_type::number, default_milli, 1, max_milli, &f::store, &f::load};
}

// A string setting with a fixed set of names, stored as an enum (the names in enum order).
template <auto Group, auto Field, std::size_t N>
constexpr schema_entry choice(std::string_view key, std::size_t default_index,
                              const std::string_view (&names)[N]) {
    using f = field<Group, Field>;
    static_assert(std::is_enum_v<typename f::type>);
    return {key,
            value_type::choice,
            static_cast<std::int64_t>(default_index),
            0,
            static_cast<std::int64_t>(N) - 1,
            &f::store,
            &f::load,
            names,
            N};
}

// retry.fallbackChains, validated by check_value before it is stored
void store_chains(settings& s, const json::value& v) {
    auto chains = std::make_shared<fallback_chains>();
    for (const auto& kv : v.get_object()) {
        std::vector<std::string> models;
        for (const auto& m : kv.value().get_array()) models.emplace_back(m.get_string());
        chains->emplace_back(std::string(kv.key()), std::move(models));
    }
    if (chains->empty())
        s.retry.fallback.reset();
    else
        s.retry.fallback = std::move(chains);
}

json::value load_chains(const settings& s) {
    json::object o;
    if (s.retry.fallback)
        for (const auto& [role, models] : *s.retry.fallback) {
            json::array a;
            for (const auto& m : models) a.emplace_back(m);
            o[role] = std::move(a);
        }
    return o;
}

// a free string (a file path, a provider or model name)
template <auto Group, auto Field>
constexpr schema_entry text(std::string_view key) {
    schema_entry e{key, value_type::text, 0, 0, 0, nullptr, nullptr};
    e.store_json = [](settings& s, const json::value& v) {
        (s.*Group).*Field = std::string(v.get_string());
    };
    e.load_json = [](const settings& s) { return json::value((s.*Group).*Field); };
    return e;
}

constexpr schema_entry chains(std::string_view key) {
    schema_entry e{key, value_type::chains, 0, 0, 0, nullptr, nullptr};
    e.store_json = &store_chains;
    e.load_json = &load_chains;
    return e;
}

constexpr std::string_view jitter_names[] = {"none", "full", "equal"};
constexpr std::string_view revert_names[] = {"cooldown-expiry", "never"};
constexpr std::string_view long_wait_names[] = {"fail", "fallback", "park", "fallback,park"};
constexpr std::string_view limit_store_names[] = {"local", "redis"};

// limits.*: one shared, immutable limits_settings per settings value (copied on write)
limits_settings& limits_for_write(settings& s) {
    auto next = std::make_shared<limits_settings>(s.limits_or_default());
    limits_settings& out = *next;
    s.limits = std::move(next);
    return out;
}

void store_limit_store(settings& s, const json::value& v) {
    limits_for_write(s).store =
        v.get_string() == "redis" ? limit_store_kind::redis : limit_store_kind::local;
}
json::value load_limit_store(const settings& s) {
    return json::value(s.limits_or_default().store == limit_store_kind::redis ? "redis" : "local");
}
void store_redis_url(settings& s, const json::value& v) {
    limits_for_write(s).redis_url = std::string(v.get_string());
}
json::value load_redis_url(const settings& s) {
    return json::value(s.limits_or_default().redis_url);
}
void store_key_prefix(settings& s, const json::value& v) {
    limits_for_write(s).key_prefix = std::string(v.get_string());
}
json::value load_key_prefix(const settings& s) {
    return json::value(s.limits_or_default().key_prefix);
}

bool check_redis_url(std::string_view v, std::string& why) {
    return parse_redis_url(v, why).has_value();
}
bool check_key_prefix(std::string_view v, std::string&) {
    return !v.empty() && v.find_first_of("{}") == std::string_view::npos;
}

// limits.store: a choice kept in the shared limits_settings
constexpr schema_entry limits_choice(std::string_view key) {
    schema_entry e{key, value_type::choice, 0, 0, 1, nullptr, nullptr, limit_store_names, 2};
    e.store_json = &store_limit_store;
    e.load_json = &load_limit_store;
    return e;
}

constexpr schema_entry checked_text(std::string_view key, std::string_view default_value,
                                    std::string_view expected,
                                    void (*store)(settings&, const json::value&),
                                    json::value (*load)(const settings&),
                                    bool (*check)(std::string_view, std::string&)) {
    schema_entry e{key, value_type::text, 0, 0, 0, nullptr, nullptr};
    e.store_json = store;
    e.load_json = load;
    e.check_text = check;
    e.default_text = default_value;
    e.text_expected = expected;
    return e;
}

// clang-format off
constexpr schema_entry schema[] = {
    boolean<&settings::retry, &retry_settings::enabled>("retry.enabled", true),
    integer<&settings::retry, &retry_settings::max_retries>("retry.maxRetries", 3, 0),
    integer<&settings::retry, &retry_settings::base_delay_ms>("retry.baseDelayMs", 2000, 0),
    boolean<&settings::retry, &retry_settings::honor_retry_after>("retry.honorRetryAfter", false),
    integer<&settings::retry, &retry_settings::max_delay_ms>("retry.maxDelayMs", 0, 0),
    choice<&settings::retry, &retry_settings::jitter>("retry.jitter", 0, jitter_names),
    boolean<&settings::retry, &retry_settings::honor_should_retry>("retry.honorShouldRetry", false),
    chains("retry.fallbackChains"),
    choice<&settings::retry, &retry_settings::fallback_revert>("retry.fallbackRevertPolicy", 0, revert_names),
    boolean<&settings::retry, &retry_settings::resume_partial>("retry.resumePartial", false),
    choice<&settings::retry, &retry_settings::long_wait>("retry.longWait", 0, long_wait_names),
    boolean<&settings::compaction, &compaction_settings::enabled>("compaction.enabled", true),
    integer<&settings::compaction, &compaction_settings::reserve_tokens>(
        "compaction.reserveTokens", 16384, 0),
    integer<&settings::compaction, &compaction_settings::keep_recent_tokens>(
        "compaction.keepRecentTokens", 20000, 0),
    integer<&settings::provider, &provider_settings::connect_timeout_ms>(
        "provider.connectTimeoutMs", 10000, 1),
    integer<&settings::provider, &provider_settings::stream_idle_timeout_ms>(
        "provider.streamIdleTimeoutMs", 120000, 1),
    integer<&settings::provider, &provider_settings::attempt_timeout_ms>("provider.attemptTimeoutMs", 600000, 0),
    text<&settings::telemetry, &telemetry_settings::trace_file>("telemetry.traceFile"),
    text<&settings::selection, &model_selection_settings::default_provider>("defaultProvider"),
    text<&settings::selection, &model_selection_settings::default_model>("defaultModel"),
    choice<&settings::selection, &model_selection_settings::thinking>("thinkingLevel", 0, thinking_level_names),
    boolean<&settings::tui, &tui_settings::markdown>("tui.markdown", true),
    boolean<&settings::tui, &tui_settings::expand_thinking>("tui.expandThinking", false),
    boolean<&settings::budget, &retry_budget_settings::enabled>("retry.budget.enabled", false),
    integer<&settings::budget, &retry_budget_settings::max_tokens>("retry.budget.maxTokens", 10, 1, 1000),
    thousandths<&settings::budget, &retry_budget_settings::token_ratio_milli>("retry.budget.tokenRatio", 100, 1000000),
    limits_choice("limits.store"),
    checked_text("limits.redisUrl", "redis://127.0.0.1:6379/0", "a Redis URL redis://[:password@]host:port/db",
         &store_redis_url, &load_redis_url, &check_redis_url),
    checked_text("limits.keyPrefix", "coagent:", "a non-empty string without '{' or '}' (the keys' hash tags use them)",
         &store_key_prefix, &load_key_prefix, &check_key_prefix),
};
// clang-format on

const schema_entry* find_entry(std::string_view dotted) noexcept {
    for (const auto& e : schema)
        if (e.key == dotted) return &e;
    return nullptr;
}

// A proper prefix of some known key ("retry"), i.e. a group that must be an object.
bool is_group(std::string_view dotted) noexcept {
    for (const auto& e : schema)
        if (e.key.size() > dotted.size() && e.key.starts_with(dotted) &&
            e.key[dotted.size()] == '.')
            return true;
    return false;
}

std::string_view type_name(value_type t) noexcept {
    switch (t) {
        case value_type::boolean:
            return "boolean";
        case value_type::choice:
        case value_type::text:
            return "string";
        case value_type::chains:
            return "object";
        case value_type::number:
            return "number";
        case value_type::integer:
            break;
    }
    return "integer";
}

std::string expected_text(const schema_entry& e) {
    if (e.type == value_type::boolean) return "a boolean (true or false)";
    if (e.type == value_type::chains)
        return "an object of role -> array of \"provider/model\" strings, e.g. "
               "{\"default\":[\"anthropic/claude-sonnet-4-5\"]}";
    if (e.type == value_type::number)
        return "a number greater than 0 and at most " + std::to_string(e.max / 1000) +
               " (three decimal places)";
    if (e.type == value_type::text)
        return e.text_expected.empty() ? "a string" : std::string(e.text_expected);
    if (e.type == value_type::choice) {
        std::string t = "one of";
        for (std::size_t i = 0; i < e.choice_count; ++i) {
            t += i == 0 ? " \"" : (i + 1 == e.choice_count ? "\" or \"" : "\", \"");
            t += e.choices[i];
        }
        return t + "\"";
    }
    if (e.max != 2147483647 && e.max != std::numeric_limits<std::int64_t>::max())
        return "an integer from " + std::to_string(e.min) + " to " + std::to_string(e.max);
    if (e.min == 0) return "a non-negative integer";
    if (e.min == 1) return "a positive integer";
    return "an integer of at least " + std::to_string(e.min);
}

json::value default_json(const schema_entry& e) {
    if (e.type == value_type::chains) return json::object();
    if (e.type == value_type::text)
        return json::value(json::string_view(e.default_text.data(), e.default_text.size()));
    if (e.type == value_type::number)
        return json::value(static_cast<double>(e.default_value) / 1000);
    if (e.type == value_type::boolean) return json::value(e.default_value != 0);
    if (e.type == value_type::choice) {
        const auto name = e.choices[static_cast<std::size_t>(e.default_value)];
        return json::value(json::string_view(name.data(), name.size()));
    }
    return json::value(e.default_value);
}

// ---------------------------------------------------------------------------------------------
// JSON text: compact (for messages) and indented (for files), see config_file.hpp.
// ---------------------------------------------------------------------------------------------

// Compact JSON of a value for an error message, cut to a readable length.
std::string compact(const json::value& v) {
    return config_file::compact(v);
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

std::string standard_message(const std::string& file, const std::string& key,
                             const std::string& expected, const std::string& found) {
    std::string m = file;
    m += ": ";
    if (!key.empty()) {
        m += "key \"";
        m += key;
        m += "\": ";
    }
    m += "expected ";
    m += expected;
    m += ", found ";
    m += found;
    return m;
}

// The same error, its message ending in "(not overwritten)".
[[noreturn]] void throw_not_overwritten(const settings_error& e) {
    settings_error out(e.file, e.key, e.expected, e.found,
                       std::string(e.what()) + " (not overwritten)");
    out.line = e.line;
    out.column = e.column;
    throw out;
}

// ---------------------------------------------------------------------------------------------
// Keys and values
// ---------------------------------------------------------------------------------------------

std::vector<std::string_view> split_key(std::string_view dotted) {
    std::vector<std::string_view> parts;
    std::size_t start = 0;
    for (;;) {
        const std::size_t dot = dotted.find('.', start);
        parts.push_back(
            dotted.substr(start, dot == std::string_view::npos ? dotted.npos : dot - start));
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return parts;
}

const schema_entry& require_known(std::string_view dotted, const std::string& label) {
    if (const auto* e = find_entry(dotted)) return *e;
    throw settings_error(label, std::string(dotted), "a known key", "an unknown key",
                         label + ": unknown key \"" + std::string(dotted) + "\"");
}

// The value of a known key as an int64 (booleans as 0 / 1), or a settings_error.
std::int64_t check_value(const schema_entry& e, const json::value& v, const std::string& label) {
    const auto fail = [&](std::string expected) -> std::int64_t {
        // a Redis URL may carry a password: never quoted
        const bool secret = e.key == "limits.redisUrl" && v.is_string();
        throw settings_error(
            label, std::string(e.key), std::move(expected),
            secret ? compact(json::value(redact_redis_url(v.get_string()))) : compact(v));
    };
    if (e.type == value_type::boolean) {
        if (!v.is_bool()) fail(expected_text(e));
        return v.get_bool() ? 1 : 0;
    }
    if (e.type == value_type::chains) {
        if (!v.is_object()) return fail(expected_text(e));
        for (const auto& kv : v.get_object()) {
            const std::string key = std::string(e.key) + "." + std::string(kv.key());
            const auto bad = [&](const json::value& x, std::string expected) {
                throw settings_error(label, key, std::move(expected), compact(x));
            };
            if (kv.key().empty()) bad(kv.value(), "a non-empty role name");
            if (!kv.value().is_array()) bad(kv.value(), "an array of \"provider/model\" strings");
            for (const auto& m : kv.value().get_array()) {
                const auto* str = m.if_string();
                const std::string_view sel = str ? std::string_view(*str) : std::string_view();
                const auto slash = sel.find('/');
                if (!str || slash == 0 || slash == std::string_view::npos ||
                    slash + 1 == sel.size())
                    bad(m, "a \"provider/model\" string");
            }
        }
        return 0;
    }
    if (e.type == value_type::text) {
        std::string why;
        if (!v.is_string()) return fail(expected_text(e));
        if (e.check_text && !e.check_text(v.get_string(), why))
            return fail(expected_text(e) + (why.empty() ? "" : " (" + why + ")"));
        return 0;
    }
    if (e.type == value_type::number) {
        const bool number = v.is_int64() || v.is_uint64() || v.is_double();
        const double d = number ? v.to_number<double>() : 0.0;
        if (!number || !std::isfinite(d) || d <= 0 || d > static_cast<double>(e.max) / 1000)
            return fail(expected_text(e));
        const auto milli = static_cast<std::int64_t>(std::llround(d * 1000));
        if (milli < e.min) return fail(expected_text(e));
        return milli;
    }
    if (e.type == value_type::choice) {
        if (v.is_string())
            for (std::size_t i = 0; i < e.choice_count; ++i)
                if (v.get_string() == e.choices[i]) return static_cast<std::int64_t>(i);
        return fail(expected_text(e));
    }
    const std::string expected = expected_text(e);
    const bool ranged = expected.starts_with("an integer from");  // the range says it already
    const std::string too_large =
        ranged ? expected : expected + " no greater than " + std::to_string(e.max);
    std::int64_t x = 0;
    if (v.is_int64()) {
        x = v.get_int64();
    } else if (v.is_uint64()) {
        // Only values above INT64_MAX are stored as uint64.
        return fail(too_large);
    } else if (v.is_double()) {
        // 3.0 and 1e3 are integers written another way; 2.5 is not.
        const double d = v.get_double();
        if (!std::isfinite(d) || d != std::trunc(d)) return fail(expected_text(e));
        constexpr double two_63 = 9223372036854775808.0;  // int64 holds [-2^63, 2^63)
        if (d < -two_63) return fail(expected_text(e));
        if (d >= two_63) return fail(too_large);
        x = static_cast<std::int64_t>(d);
    } else {
        return fail(expected_text(e));
    }
    if (x < e.min) return fail(expected_text(e));
    if (x > e.max) return fail(too_large);
    return x;
}

// Validates a layer: known keys have the right type, known groups are objects; unknown keys
// (up to their first unknown part) are appended to `warnings` once each.
void check_object(const json::object& o, const std::string& prefix, const std::string& label,
                  std::vector<settings_warning>& warnings) {
    for (const auto& kv : o) {
        const std::string_view name = kv.key();
        std::string path = prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
        // A key spelt with a dot inside one object ({"retry.enabled": false}) is not the nested
        // key it looks like: treat it as unknown.
        const bool plain = !name.empty() && name.find('.') == std::string_view::npos;
        if (const auto* e = plain ? find_entry(path) : nullptr) {
            check_value(*e, kv.value(), label);
        } else if (plain && is_group(path)) {
            if (!kv.value().is_object())
                throw settings_error(label, path, "an object", compact(kv.value()));
            check_object(kv.value().get_object(), path, label, warnings);
        } else {
            settings_warning w{label, std::move(path), true};
            if (std::find(warnings.begin(), warnings.end(), w) == warnings.end())
                warnings.push_back(std::move(w));
        }
    }
}

const json::value* find_path(const json::object& root, std::string_view dotted) {
    const json::object* o = &root;
    const json::value* v = nullptr;
    for (std::string_view part : split_key(dotted)) {
        if (!o) return nullptr;
        v = o->if_contains(part);
        if (!v) return nullptr;
        o = v->if_object();
    }
    return v;
}

// Sets root[a][b]... = v, creating missing objects. Throws if a part on the way is not an
// object.
void set_path(json::object& root, std::string_view dotted, const json::value& v,
              const std::string& label) {
    const auto parts = split_key(dotted);
    json::object* o = &root;
    std::string path;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        if (!path.empty()) path += '.';
        path += parts[i];
        json::value* next = o->if_contains(parts[i]);
        if (!next) next = &o->emplace(parts[i], json::object()).first->value();
        if (!next->is_object()) throw settings_error(label, path, "an object", compact(*next));
        o = &next->get_object();
    }
    (*o)[parts.back()] = v;
}

bool erase_path(json::object& root, std::string_view dotted) {
    const auto parts = split_key(dotted);
    json::object* o = &root;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        auto* next = o->if_contains(parts[i]);
        if (!next || !next->is_object()) return false;
        o = &next->get_object();
    }
    return o->erase(parts.back()) != 0;
}

void deep_merge(json::object& into, const json::object& from) {
    for (const auto& kv : from) {
        auto* existing = into.if_contains(kv.key());
        if (existing && existing->is_object() && kv.value().is_object())
            deep_merge(existing->get_object(), kv.value().get_object());
        else
            into[kv.key()] = kv.value();
    }
}

// ---------------------------------------------------------------------------------------------
// Files
// ---------------------------------------------------------------------------------------------

// Reads and validates one layer; a missing file gives an empty layer.
void load_layer(const fs::path& p, json::object& data, std::vector<settings_warning>& warnings) {
    const std::string label = p.string();
    data = {};
    warnings.clear();
    auto text = config_file::read(p, label);
    if (!text) return;
    data = config_file::parse_object(*text, label);
    check_object(data, "", label, warnings);
}

}  // namespace

// -------------------------------------------------------------------------------------------------

settings_error::settings_error(std::string file, std::string key, std::string expected,
                               std::string found)
    : settings_error(file, key, expected, found, standard_message(file, key, expected, found)) {}

settings_error::settings_error(std::string file_, std::string key_, std::string expected_,
                               std::string found_, const std::string& message)
    : std::runtime_error(message),
      file(std::move(file_)),
      key(std::move(key_)),
      expected(std::move(expected_)),
      found(std::move(found_)) {}

namespace {
// Optimal string alignment distance (insertions, deletions, substitutions, adjacent
// transpositions), case-sensitive.
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

// The schema key (or group) nearest to `key`, when it is at most 2 edits away (the first in
// schema order on a tie).
std::optional<std::string> near_miss(std::string_view key) {
    if (key.size() > 256) return std::nullopt;  // a pasted blob is nobody's typo
    std::optional<std::string> best;
    std::size_t best_distance = 3;
    const auto consider = [&](std::string_view candidate) {
        const std::size_t d = edit_distance(key, candidate);
        if (d > 0 && d < best_distance) {
            best_distance = d;
            best = std::string(candidate);
        }
    };
    for (const auto& e : schema) {
        consider(e.key);
        if (const auto dot = e.key.find('.'); dot != std::string_view::npos)
            consider(e.key.substr(0, dot));
    }
    return best;
}
}  // namespace

std::string settings_warning::message() const {
    std::string m = file + ": unknown key \"" + key + "\" (kept, not used)";
    // A known key written flat ({"retry.enabled": false}): suggest the nested form.
    if (find_entry(key)) {
        const auto dot = key.find('.');
        m += "; settings files nest groups: {\"" + key.substr(0, dot) + "\":{\"" +
             key.substr(dot + 1) + "\":...}}";
    } else if (auto guess = settings_file ? near_miss(key) : std::nullopt) {
        m += "; did you mean \"" + *guess + "\"?";
    }
    return m;
}

std::vector<setting_info> settings_schema() {
    std::vector<setting_info> out;
    for (const auto& e : schema) {
        out.push_back(setting_info{e.key, type_name(e.type), expected_text(e), default_json(e)});
    }
    return out;
}

std::optional<json::value> setting_value(const settings& s, std::string_view dotted_key) {
    const auto* e = find_entry(dotted_key);
    if (!e) return std::nullopt;
    if (e->load_json) return e->load_json(s);
    const std::int64_t v = e->load(s);
    if (e->type == value_type::boolean) return json::value(v != 0);
    if (e->type == value_type::number) return json::value(static_cast<double>(v) / 1000);
    if (e->type == value_type::choice) {
        const auto name = e->choices[static_cast<std::size_t>(v)];
        return json::value(json::string_view(name.data(), name.size()));
    }
    return json::value(v);
}

fs::path coagent_dir() {
    if (const char* d = std::getenv("COAGENT_DIR"); d && *d) return fs::path(d);
    if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".coagent";
    throw settings_error("<environment>", "", "COAGENT_DIR or HOME", "neither",
                         "cannot find the settings directory: neither COAGENT_DIR nor HOME is "
                         "set");
}

fs::path global_settings_path(const fs::path& dir) {
    return dir / "settings.json";
}

fs::path project_settings_path(const fs::path& cwd) {
    return cwd / ".coagent" / "settings.json";
}

// -------------------------------------------------------------------------------------------------

settings_store settings_store::defaults() {
    settings_store s;
    s.runtime_.label = std::string(runtime_label);
    s.recompute();
    return s;
}

settings_store settings_store::load(fs::path global_file, fs::path project_file) {
    settings_store s;
    s.global_file_ = std::move(global_file);
    s.project_file_ = std::move(project_file);
    s.global_.label = s.global_file_.string();
    s.project_.label = s.project_file_.string();
    s.runtime_.label = std::string(runtime_label);
    load_layer(s.global_file_, s.global_.data, s.global_.warnings);
    std::error_code ec;
    const bool same = fs::equivalent(s.global_file_, s.project_file_, ec);
    if (!same) load_layer(s.project_file_, s.project_.data, s.project_.warnings);
    // $COAGENT_REDIS_URL overrides the files (docs/settings.md); checked as a layer of its own
    if (const char* url = std::getenv("COAGENT_REDIS_URL"); url && *url) {
        const json::value v(url);
        check_value(*find_entry("limits.redisUrl"), v, "$COAGENT_REDIS_URL");
        set_path(s.runtime_.data, "limits.redisUrl", v, s.runtime_.label);
    }
    s.recompute();
    return s;
}

void settings_store::recompute() {
    json::object merged;
    for (const auto& e : schema) set_path(merged, e.key, default_json(e), "<schema>");
    deep_merge(merged, global_.data);
    deep_merge(merged, project_.data);
    deep_merge(merged, runtime_.data);

    // Every layer was validated, so each known key of `merged` is valid; a settings_error
    // here would be a bug.
    settings next;
    for (const auto& e : schema) {
        const json::value& v = *find_path(merged, e.key);
        const std::int64_t x = check_value(e, v, "<merged>");
        if (e.store_json)
            e.store_json(next, v);
        else
            e.store(next, x);
    }

    std::vector<settings_warning> warnings = global_.warnings;
    for (const auto& w : project_.warnings)
        if (std::find(warnings.begin(), warnings.end(), w) == warnings.end()) warnings.push_back(w);

    merged_ = std::move(merged);
    current_ = next;
    warnings_ = std::move(warnings);
}

std::optional<json::value> settings_store::get(std::string_view dotted_key) const {
    if (const auto* v = find_path(merged_, dotted_key)) return *v;
    return std::nullopt;
}

std::string settings_store::origin(std::string_view dotted_key) const {
    for (const layer* l : {&runtime_, &project_, &global_})
        if (find_path(l->data, dotted_key)) return l->label;
    return "default";
}

void settings_store::set_override(std::string_view dotted_key, const json::value& v) {
    const auto& e = require_known(dotted_key, runtime_.label);
    check_value(e, v, runtime_.label);
    set_path(runtime_.data, dotted_key, v, runtime_.label);
    recompute();
}

void settings_store::clear_override(std::string_view dotted_key) {
    if (erase_path(runtime_.data, dotted_key)) recompute();
}

void settings_store::persist_global(std::string_view dotted_key, const json::value& v) {
    const std::string label = global_file_.string();
    if (global_file_.empty())
        throw settings_error(std::string(runtime_label), std::string(dotted_key),
                             "a global settings file", "none",
                             "cannot persist \"" + std::string(dotted_key) +
                                 "\": this store has no global settings file");
    const auto& e = require_known(dotted_key, std::string(runtime_label));
    check_value(e, v, std::string(runtime_label));

    json::object root;
    std::vector<settings_warning> warnings;
    try {
        // Re-read: the file may have changed since load. An empty file holds nothing to keep.
        if (auto text = config_file::read(global_file_, label); text && !config_file::blank(*text))
            root = config_file::parse_object(*text, label);
        set_path(root, dotted_key, v, label);
        check_object(root, "", label, warnings);
    } catch (const settings_error& err) {
        throw_not_overwritten(err);
    }
    config_file::write_atomically(global_file_, config_file::pretty(json::value(root)), label);

    global_.data = std::move(root);
    global_.warnings = std::move(warnings);
    recompute();
}

}  // namespace coagent

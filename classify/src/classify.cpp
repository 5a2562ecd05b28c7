// Error classification (policy §2, Appendix A): the decision order and the message gate.

#include <coagent/classify/classify.hpp>
#include <coagent/classify/patterns.hpp>

#include "compiled.hpp"

#include <coagent/runtime/time_math.hpp>

#include <boost/json/string.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace coagent {
namespace detail {
namespace {

std::unique_ptr<const RE2> compile(std::string_view regex, std::string_view what) {
    RE2::Options opts;
    opts.set_case_sensitive(false);
    opts.set_log_errors(false);
    auto re = std::make_unique<const RE2>(piece(regex), opts);
    if (!re->ok()) {
        throw std::logic_error("classify pattern table: " + std::string(what) +
                               " does not compile: " + re->error());
    }
    return re;
}

compiled_patterns build() {
    compiled_patterns c;
    const auto table = pattern_table();
    c.entries.reserve(table.size());
    for (const auto& e : table) {
        c.entries.push_back(compile(e.regex, std::string(e.table) + "/" + std::string(e.name)));
    }
    RE2::Options opts;
    opts.set_case_sensitive(false);
    opts.set_log_errors(false);
    c.all = std::make_unique<RE2::Set>(opts, RE2::UNANCHORED);
    for (const auto& e : table) {
        std::string err;
        if (c.all->Add(piece(e.regex), &err) < 0)
            throw std::logic_error("classify pattern table: " + std::string(e.table) + "/" +
                                   std::string(e.name) + " does not compile in a set: " + err);
    }
    if (!c.all->Compile())
        throw std::logic_error("classify pattern table: the set does not compile");
    c.provider_error_type = compile(provider_error_type_regex, "provider_error_type_regex");
    c.duration_part = compile(duration_part_regex, "duration_part_regex");
    return c;
}

}  // namespace

const compiled_patterns& compiled() {
    static const compiled_patterns c = build();
    return c;
}

match_result::match_result(std::string_view text) : bits_(pattern_table().size(), false) {
    const auto& c = compiled();
    std::vector<int> hits;
    RE2::Set::ErrorInfo info{};
    if (c.all->Match(piece(text), &hits, &info)) {
        for (int i : hits) bits_[static_cast<std::size_t>(i)] = true;
    } else if (info.kind != RE2::Set::kNoError) {
        // the set's DFA ran out of memory (huge input): fall back to one regex at a time
        for (std::size_t i = 0; i < c.entries.size(); ++i)
            bits_[i] = RE2::PartialMatch(piece(text), *c.entries[i]);
    }
}

std::optional<std::size_t> match_result::first(std::string_view table) const {
    const auto entries = pattern_table();
    for (std::size_t i = 0; i < entries.size(); ++i)
        if (bits_[i] && entries[i].table == table) return i;
    return std::nullopt;
}

}  // namespace detail

namespace {

std::string rule_of(std::size_t index) {
    const auto& e = pattern_table()[index];
    std::string r(e.table);
    r += '/';
    r += e.name;
    return r;
}

std::string provider_error_type_of(std::string_view text) {
    if (text.find("_error") == std::string_view::npos) return {};  // cheap pre-check
    re2::StringPiece type;
    if (RE2::PartialMatch(detail::piece(text), *detail::compiled().provider_error_type, &type)) {
        std::string t(detail::view(type));
        std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) {
            return static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        });
        return t;
    }
    return {};
}

// The length of a leading HTTP status, `^\d{3}\s+` ("429 "), or 0.
std::size_t leading_status_length(std::string_view text) noexcept {
    const auto digit = [](char ch) { return ch >= '0' && ch <= '9'; };
    if (text.size() < 4 || !digit(text[0]) || !digit(text[1]) || !digit(text[2])) return 0;
    std::size_t n = 3;
    const auto blank = [](char ch) {
        return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\f' || ch == '\v';
    };
    while (n < text.size() && blank(text[n])) ++n;
    return n == 3 ? 0 : n;
}

// A 429 is throttling, whatever its text says: an overflow pattern never wins (docs/
// classification.md "Order"). The status comes from the provider, or from a leading "429 ".
bool throttled(std::optional<int> status, std::string_view text) noexcept {
    if (status && *status == 429) return true;
    return leading_status_length(text) > 0 && text.substr(0, 3) == "429";
}

// The non-overflow exclusions, tried against the text without its leading HTTP status (an HTTP
// error's text starts with it, and the anchored exclusions would never match otherwise).
bool excluded(const detail::match_result& m, std::string_view text) {
    if (m.first("non_overflow")) return true;
    const std::size_t n = leading_status_length(text);
    if (n == 0) return false;
    return detail::match_result(text.substr(n)).first("non_overflow").has_value();
}

}  // namespace

bool pattern_matches(std::size_t index, std::string_view text) {
    const auto& res = detail::compiled().entries;
    if (index >= res.size()) throw std::out_of_range("pattern_matches: no such table entry");
    return RE2::PartialMatch(detail::piece(text), *res[index]);
}

std::string_view to_string(error_kind k) noexcept {
    switch (k) {
        case error_kind::retryable:
            return "retryable";
        case error_kind::usage_limit:
            return "usage_limit";
        case error_kind::context_overflow:
            return "context_overflow";
        case error_kind::none:
            break;
    }
    return "none";
}

classification classify_error_text(std::string_view text, std::optional<int> status,
                                   std::int64_t now_ms) {
    classification c;
    c.status = status;
    c.provider_error_type = provider_error_type_of(text);
    const detail::match_result m(text);  // one pass over the text for every table
    c.retry_after_ms = detail::retry_hint(m, text, now_ms);

    if (auto i = m.first("overflow"); i && !throttled(status, text) && !excluded(m, text)) {
        c.kind = error_kind::context_overflow;
        c.rule = rule_of(*i);
        return c;
    }
    if (auto i = m.first("usage_limit")) {
        c.kind = error_kind::usage_limit;
        c.rule = rule_of(*i);
        c.limit = pattern_table()[*i].limit;
        return c;
    }
    if (status) {
        for (const auto& s : retryable_statuses()) {
            if (s.code == *status) {
                c.kind = error_kind::retryable;
                c.rule = "status/" + std::to_string(s.code);
                c.limit = s.limit;
                return c;
            }
        }
    }
    if (auto i = m.first("retryable")) {
        c.kind = error_kind::retryable;
        c.rule = rule_of(*i);
        c.limit = pattern_table()[*i].limit;
        return c;
    }
    return c;  // kind none, rule "none"
}

classification classify(const message& m, const model_info& model, std::int64_t now_ms) {
    if (m.role != message_role::assistant) return {};
    switch (m.stop) {
        case stop_reason::error: {
            if (!m.error_message || m.error_message->empty()) return {};
            auto c = classify_error_text(*m.error_message, m.error_status, now_ms);
            if (!m.error_type.empty()) c.provider_error_type = m.error_type;
            return c;
        }
        case stop_reason::stop: {
            // Silent overflow (z.ai): the provider accepted more than the window and stopped.
            if (model.context_window > 0 &&
                sat_add(m.usage.input, m.usage.cache_read) > model.context_window) {
                classification c;
                c.kind = error_kind::context_overflow;
                c.rule = "overflow/silent usage";
                return c;
            }
            return {};
        }
        case stop_reason::aborted:  // a user abort is never retried
        case stop_reason::length:
        case stop_reason::tool_use:
            break;
    }
    return {};
}

json::object to_json(const classification& c) {
    json::object o;
    const auto kind = to_string(c.kind);
    o["kind"] = json::string_view(kind.data(), kind.size());
    o["retryable"] = c.retryable();
    o["rule"] = json::string_view(c.rule.data(), c.rule.size());
    const auto limit = to_string(c.limit);
    o["limit"] = json::string_view(limit.data(), limit.size());
    if (c.retry_after_ms) o["retryAfterMs"] = *c.retry_after_ms;
    return o;
}

void warm_up_classifier() {
    // the set's DFA is built lazily, by the first Match: one ordinary error text builds its
    // start states
    const detail::match_result warm("503 Service Unavailable: upstream overloaded");
    (void)warm;
}

}  // namespace coagent

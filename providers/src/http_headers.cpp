// Responses of the HTTP providers: headers (retry hints, x-should-retry) and the error text of a
// failed response (see http_protocol.hpp).

#include "http_wire.hpp"

#include <coagent/runtime/time_math.hpp>

namespace coagent::http_protocol {

using namespace detail;

std::optional<std::string_view> find_header(const header_list& h, std::string_view name) noexcept {
    for (const auto& [k, v] : h)
        if (iequals(k, name)) return std::string_view(v);
    return std::nullopt;
}

std::optional<std::int64_t> retry_hint_from_headers(const header_list& h,
                                                    std::int64_t now_ms) noexcept {
    std::optional<std::int64_t> best;
    auto consider = [&](std::int64_t ms) {
        if (ms > 0 && (!best || ms > *best)) best = ms;
    };
    if (auto v = find_header(h, "retry-after-ms"))
        if (auto n = parse_number(*v)) consider(ceil_ms(*n));
    if (auto v = find_header(h, "retry-after")) {
        if (auto n = parse_number(*v))
            consider(ceil_ms(*n * 1000.0));
        else if (auto t = parse_http_date(*v, day_check::up_to_31))
            consider(sat_sub(*t, now_ms));
    }
    if (auto v = find_header(h, "x-ratelimit-reset-ms")) {
        if (auto n = parse_number(*v))
            consider(*n > 1e12 ? sat_sub(ceil_ms(*n), now_ms) : ceil_ms(*n));
    }
    if (auto v = find_header(h, "x-ratelimit-reset")) {
        if (auto n = parse_number(*v))
            consider(*n > 1e9 ? sat_sub(ceil_ms(*n * 1000.0), now_ms) : ceil_ms(*n * 1000.0));
    }
    return best;
}

void append_retry_hint(std::string& text, std::optional<std::int64_t> hint_ms) {
    if (!hint_ms || *hint_ms <= 0) return;
    static constexpr std::string_view marker = "retry-after-ms=";
    if (text.size() >= marker.size())
        for (std::size_t i = 0; i + marker.size() <= text.size(); ++i)
            if (iequals(std::string_view(text).substr(i, marker.size()), marker)) return;
    text += " retry-after-ms=";
    text += std::to_string(*hint_ms);
}

std::optional<bool> should_retry_header(const header_list& h) noexcept {
    auto v = find_header(h, "x-should-retry");
    if (!v) return std::nullopt;
    const auto t = trim(*v);
    if (iequals(t, "true")) return true;
    if (iequals(t, "false")) return false;
    return std::nullopt;
}

error_details http_error_text(int status, std::string_view body) {
    error_details d;
    const std::string prefix = std::to_string(status) + " ";
    const std::string_view trimmed = trim(body);
    if (trimmed.empty()) {
        d.text = prefix + "status code (no body)";
        return d;
    }
    auto parsed = parse_json_strict(trimmed);
    const bool ec = !parsed;  // invalid JSON, or a number beyond the double range: the raw text
    const json::value& v = parsed.value;
    std::string msg;
    if (!ec && v.is_object()) {
        const auto& o = v.get_object();
        if (const auto* e = o.if_contains("error")) {
            if (e->is_object())
                error_from_object(e->get_object(), msg, d.type);
            else if (e->is_string())
                msg = e->get_string();
        }
        if (msg.empty())
            if (const auto* m = o.if_contains("message"); m && m->is_string())
                msg = m->get_string();
        if (d.type.empty())
            if (const auto* t = o.if_contains("type");
                t && t->is_string() && t->get_string() != "error")
                d.type = t->get_string();
        if (msg.empty()) msg = compact_json(v);
    } else if (!ec) {
        msg = compact_json(v);
    } else {
        msg = cut_utf8(to_valid_utf8(trimmed.substr(0, 1004)), 1003);  // any bytes a server sent
    }
    d.text = prefix + msg;
    return d;
}

}  // namespace coagent::http_protocol

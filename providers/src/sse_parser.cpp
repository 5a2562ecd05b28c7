// The SSE parser's line rules (see sse_parser.hpp); the byte loop is inline in the header.

#include <coagent/providers/sse_parser.hpp>

#include <limits>

namespace coagent {

bool sse_parser::over_limit(std::size_t line_bytes) const noexcept {
    return ev_.data.size() + ev_.type.size() + line_bytes > max_;
}

void sse_parser::clear_event() noexcept {
    ev_.type.assign("message");
    ev_.data.clear();
    ev_.retry_ms.reset();
    has_data_ = false;
}

bool sse_parser::line(std::string_view l) {
    if (l.empty()) {
        if (has_data_) return true;  // dispatch
        clear_event();               // an event without data is dropped
        return false;
    }
    if (l.front() == ':') return false;  // comment (keep-alive pings)
    std::string_view field = l;
    std::string_view value;
    if (const auto colon = l.find(':'); colon != std::string_view::npos) {
        field = l.substr(0, colon);
        value = l.substr(colon + 1);
        if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    }
    if (field == "data") {
        if (has_data_) ev_.data.push_back('\n');
        ev_.data.append(value);
        has_data_ = true;
    } else if (field == "event") {
        if (value.empty())
            ev_.type.assign("message");
        else
            ev_.type.assign(value);
    } else if (field == "id") {
        if (value.find('\0') == std::string_view::npos) ev_.id.assign(value);
    } else if (field == "retry") {
        if (value.empty()) return false;
        std::int64_t ms = 0;
        for (char c : value) {
            if (c < '0' || c > '9') return false;
            if (ms > (std::numeric_limits<std::int64_t>::max() - 9) / 10) {
                ms = std::numeric_limits<std::int64_t>::max();
                continue;
            }
            ms = ms * 10 + (c - '0');
        }
        ev_.retry_ms = ms;
    }
    return false;
}

void sse_parser::finish() noexcept {
    partial_.clear();
    pending_cr_ = false;
    clear_event();
}

void sse_parser::reset() noexcept {
    finish();
    status_ = status::ok;
    bom_seen_ = 0;
    ev_.id.clear();
    events_ = 0;
    progress_ = 0;
}

}  // namespace coagent

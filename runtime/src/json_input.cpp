#include <coagent/runtime/json_input.hpp>

#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <cmath>
#include <tuple>

namespace coagent {

namespace {

bool find_non_finite_in(const json::value& v, std::string& path) {
    switch (v.kind()) {
        case json::kind::double_:
            return !std::isfinite(v.get_double());
        case json::kind::array: {
            const auto& a = v.get_array();
            for (std::size_t i = 0; i < a.size(); ++i) {
                const std::size_t size = path.size();
                path += '[';
                path += std::to_string(i);
                path += ']';
                if (find_non_finite_in(a[i], path)) return true;
                path.resize(size);
            }
            return false;
        }
        case json::kind::object:
            for (const auto& kv : v.get_object()) {
                const std::size_t size = path.size();
                if (!path.empty()) path += '.';
                path += kv.key();
                if (find_non_finite_in(kv.value(), path)) return true;
                path.resize(size);
            }
            return false;
        default:
            return false;
    }
}

// The same walk without the path: what every parse pays (a non-finite number is rare; its
// path is built only when there is one).
bool has_non_finite(const json::value& v) noexcept {
    switch (v.kind()) {
        case json::kind::double_:
            return !std::isfinite(v.get_double());
        case json::kind::array:
            for (const auto& e : v.get_array())
                if (has_non_finite(e)) return true;
            return false;
        case json::kind::object:
            for (const auto& kv : v.get_object())
                if (has_non_finite(kv.value())) return true;
            return false;
        default:
            return false;
    }
}

}  // namespace

std::string json_input_error::describe() const {
    if (!non_finite) return message;
    std::string s = "number out of range";
    if (!path.empty()) s += " at \"" + path + "\"";
    s += " (a JSON number must fit a double: at most about 1.8e308)";
    return s;
}

std::optional<std::string> find_non_finite(const json::value& v) {
    if (!has_non_finite(v)) return std::nullopt;
    std::string path;
    if (find_non_finite_in(v, path)) return path;
    return std::nullopt;
}

std::pair<std::size_t, std::size_t> line_column(std::string_view text,
                                                std::size_t offset) noexcept {
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        if (c == '\n') {
            ++line;
            column = 1;
        } else if ((c & 0xC0) != 0x80) {  // count characters, not UTF-8 bytes
            ++column;
        }
    }
    return {line, column};
}

strict_json parse_json_strict(std::string_view text, const json::parse_options& opts) {
    return parse_json_strict(text, opts, {});
}

strict_json parse_json_strict(std::string_view text, const json::parse_options& opts,
                              json::storage_ptr sp) {
    // out.value on `sp` from the start: assigning the parsed value (on `sp`) to a value on
    // another resource would copy it (a value keeps its resource on assignment)
    strict_json out{json::value(sp), std::nullopt};
    // the parser's own stack in this frame: no heap allocation for it per parse (an SSE event)
    unsigned char temp[1024];
    json::stream_parser p({}, opts, temp);
    p.reset(std::move(sp));
    boost::system::error_code ec;
    const std::size_t used = p.write(text.data(), text.size(), ec);  // extra data is an error
    if (!ec) p.finish(ec);
    if (ec) {
        json_input_error e;
        e.message = ec.message();
        e.offset = used;
        std::tie(e.line, e.column) = line_column(text, used);
        out.error = std::move(e);
        return out;
    }
    out.value = p.release();
    if (auto path = find_non_finite(out.value)) {
        json_input_error e;
        e.non_finite = true;
        e.message = "number out of range";
        e.path = std::move(*path);
        out.error = std::move(e);
        out.value = nullptr;
    }
    return out;
}

std::optional<std::int64_t> saturating_int64(const json::value& v) noexcept {
    if (v.is_int64()) return v.get_int64();
    if (v.is_uint64())
        return v.get_uint64() > static_cast<std::uint64_t>(int64_max)
                   ? int64_max
                   : static_cast<std::int64_t>(v.get_uint64());
    if (v.is_double()) return saturating_int64(v.get_double());
    return std::nullopt;
}

std::string to_valid_utf8(std::string_view s) {
    static constexpr std::string_view replacement = "\xEF\xBF\xBD";  // U+FFFD
    std::string out;
    out.reserve(s.size());
    const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
    for (std::size_t i = 0; i < s.size();) {
        const unsigned char b = byte(i);
        if (b < 0x80) {
            out.push_back(static_cast<char>(b));
            ++i;
            continue;
        }
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // the valid range of the second byte
        if (b >= 0xC2 && b <= 0xDF) {
            len = 2;
        } else if (b >= 0xE0 && b <= 0xEF) {
            len = 3;
            if (b == 0xE0) lo = 0xA0;  // no overlongs
            if (b == 0xED) hi = 0x9F;  // no surrogates
        } else if (b >= 0xF0 && b <= 0xF4) {
            len = 4;
            if (b == 0xF0) lo = 0x90;
            if (b == 0xF4) hi = 0x8F;  // at most U+10FFFF
        }
        std::size_t n = 1;  // bytes of the maximal subpart seen so far
        if (len > 0) {
            while (n < len && i + n < s.size()) {
                const unsigned char c = byte(i + n);
                const bool ok = n == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
                if (!ok) break;
                ++n;
            }
        }
        if (len > 0 && n == len)
            out.append(s.substr(i, len));
        else
            out.append(replacement);
        i += n;
    }
    return out;
}

std::string cut_utf8(std::string s, std::size_t max_bytes) {
    if (s.size() <= max_bytes) return s;
    std::size_t cut = max_bytes > 3 ? max_bytes - 3 : 0;
    while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80)
        --cut;  // code-point boundary
    s.resize(cut);
    s += "...";
    return s;
}

std::string json_excerpt(const json::value& v, std::size_t max_bytes) {
    return cut_utf8(json::serialize(v), max_bytes);
}

}  // namespace coagent

#pragma once
// Writing JSON text straight into a std::string, for the hot paths that would otherwise build a
// boost::json DOM only to serialise it (request bodies, event lines). The output is what
// boost::json::serialize writes for the same values: strings escape `"`, `\` and control
// characters (\b \f \n \r \t, else \u00XX); other bytes, UTF-8 included, pass through.

#include <boost/json/serializer.hpp>
#include <boost/json/value.hpp>

#include <charconv>
#include <cstdint>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <string>
#include <string_view>

namespace coagent::json_text {

namespace detail {
/// Whether any of the 8 bytes of `w` needs escaping (below 0x20, `"` or `\`). Exact for "any"
/// (the borrows of the subtractions only reach bytes above one that matches).
constexpr bool needs_escape8(std::uint64_t w) {
    constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    const std::uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
    const std::uint64_t below_space = (w - ones * 0x20) & ~w;
    const std::uint64_t is_quote = (quote - ones) & ~quote;
    const std::uint64_t is_backslash = (backslash - ones) & ~backslash;
    return ((below_space | is_quote | is_backslash) & highs) != 0;
}
}  // namespace detail

/// Appends `s` as a JSON string literal (with its quotes). Eight bytes at a time while none
/// of them needs escaping (sixteen with SSE2; request bodies resend the whole conversation on
/// every turn).
inline void append_string(std::string& out, std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    out.reserve(out.size() + s.size() + 2);
    out.push_back('"');
    std::size_t run = 0;  // start of the bytes not yet copied
    for (std::size_t i = 0; i < s.size(); ++i) {
#ifdef __SSE2__
        while (i + 16 <= s.size()) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s.data() + i));
            const __m128i below_space =
                _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);  // v <= 0x1f
            const __m128i quote = _mm_cmpeq_epi8(v, _mm_set1_epi8('"'));
            const __m128i backslash = _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'));
            if (_mm_movemask_epi8(_mm_or_si128(below_space, _mm_or_si128(quote, backslash)))) break;
            i += 16;
        }
#endif
        while (i + 8 <= s.size()) {
            std::uint64_t w;
            std::memcpy(&w, s.data() + i, 8);
            if (detail::needs_escape8(w)) break;
            i += 8;
        }
        if (i == s.size()) break;
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        out.append(s.data() + run, i - run);
        run = i + 1;
        out.push_back('\\');
        switch (c) {
            case '"':
                out.push_back('"');
                break;
            case '\\':
                out.push_back('\\');
                break;
            case '\b':
                out.push_back('b');
                break;
            case '\f':
                out.push_back('f');
                break;
            case '\n':
                out.push_back('n');
                break;
            case '\r':
                out.push_back('r');
                break;
            case '\t':
                out.push_back('t');
                break;
            default:
                out += "u00";
                out.push_back(hex[c >> 4]);
                out.push_back(hex[c & 0xF]);
        }
    }
    out.append(s.data() + run, s.size() - run);
    out.push_back('"');
}

/// Appends `"key":` (the key is written as given: it must need no escaping).
inline void append_key(std::string& out, std::string_view key) {
    out.push_back('"');
    out += key;
    out += "\":";
}

inline void append_int(std::string& out, std::int64_t v) {
    char buf[20];  // -9223372036854775808
    const auto r = std::to_chars(buf, buf + sizeof buf, v);
    out.append(buf, r.ptr);
}

inline void append_bool(std::string& out, bool v) {
    out += v ? "true" : "false";
}

/// Appends any JSON value (objects from outside: tool arguments, schemas) through Boost.JSON's
/// serializer, without a temporary string per value.
inline void append_value(std::string& out, const boost::json::value& v) {
    boost::json::serializer sr;
    sr.reset(&v);
    char buf[4096];
    while (!sr.done()) out += sr.read(buf, sizeof buf);
}

/// `,"key":value` members after the first one of an object (keys need no escaping). Distinct
/// names: a std::string would convert to both a string_view and a boost::json::value.
inline void field(std::string& out, std::string_view key, std::string_view text) {
    out.push_back(',');
    append_key(out, key);
    append_string(out, text);
}
inline void field_bool(std::string& out, std::string_view key, bool v) {
    out.push_back(',');
    append_key(out, key);
    append_bool(out, v);
}
inline void field_int(std::string& out, std::string_view key, std::int64_t v) {
    out.push_back(',');
    append_key(out, key);
    append_int(out, v);
}
inline void field_json(std::string& out, std::string_view key, const boost::json::value& v) {
    out.push_back(',');
    append_key(out, key);
    append_value(out, v);
}

}  // namespace coagent::json_text

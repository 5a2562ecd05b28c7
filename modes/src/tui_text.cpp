// Text for the terminal UI (see tui_text.hpp).

#include <coagent/modes/tui_text.hpp>

#include <algorithm>
#include <cwchar>

namespace coagent::tui {

namespace {

constexpr std::string_view ellipsis = "\u2026";

}  // namespace

char32_t decode_utf8(std::string_view s, std::size_t& pos) noexcept {
    const auto c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
        ++pos;
        return c;
    }
    std::size_t len;
    char32_t cp;
    char32_t min;
    if ((c & 0xE0) == 0xC0) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        ++pos;
        return replacement_char;
    }
    std::size_t i = 1;
    for (; i < len; ++i) {
        if (pos + i >= s.size()) break;
        const auto b = static_cast<unsigned char>(s[pos + i]);
        if ((b & 0xC0) != 0x80) break;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (i < len) {  // truncated or a bad continuation byte: the valid prefix is one U+FFFD
        pos += i;
        return replacement_char;
    }
    pos += len;
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return replacement_char;
    return cp;
}

std::size_t incomplete_utf8_tail(std::string_view s) noexcept {
    const std::size_t n = s.size();
    for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
        const auto c = static_cast<unsigned char>(s[n - back]);
        if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
        std::size_t len = 0;
        if ((c & 0xE0) == 0xC0)
            len = 2;
        else if ((c & 0xF0) == 0xE0)
            len = 3;
        else if ((c & 0xF8) == 0xF0)
            len = 4;
        return len > back ? back : 0;
    }
    return 0;
}

void append_utf8(std::string& out, char32_t c) {
    if (c < 0x80) {
        out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (c >> 6)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (c >> 12)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (c >> 18)));
        out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
}

char32_t displayable(char32_t c) noexcept {
    if (c < 0x20 || c == 0x7F || (c >= 0x80 && c < 0xA0)) return replacement_char;
    if (c >= 0xD800 && c <= 0xDFFF) return replacement_char;
    if (c < 0x7F) return c;
    if (::wcwidth(static_cast<wchar_t>(c)) < 0) return replacement_char;
    return c;
}

int char_width(char32_t c) noexcept {
    const char32_t d = displayable(c);
    if (d < 0x7F) return 1;
    const int w = ::wcwidth(static_cast<wchar_t>(d));
    return w < 0 ? 1 : w;
}

int display_width(std::string_view utf8) {
    int w = 0;
    for (std::size_t pos = 0; pos < utf8.size();) w += char_width(decode_utf8(utf8, pos));
    return w;
}

std::string sanitize(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
        const char32_t c = decode_utf8(text, pos);
        if (c == '\n') {
            out.push_back('\n');
        } else if (c == '\t') {
            out.append("    ");
        } else {
            append_utf8(out, displayable(c));
        }
    }
    return out;
}

std::string truncate_to_width(std::string_view utf8, int width) {
    if (display_width(utf8) <= width) return sanitize(utf8);
    std::string out;
    int w = 0;
    for (std::size_t pos = 0; pos < utf8.size();) {
        char32_t c = decode_utf8(utf8, pos);
        if (c == '\t' || c == '\n') c = ' ';
        const int cw = char_width(c);
        if (w + cw > width - 1) break;
        append_utf8(out, displayable(c));
        w += cw;
    }
    if (width >= 1) out.append(ellipsis);
    return out;
}

std::vector<wrapped_row> wrap(std::string_view text, int width, bool hold_incomplete_tail) {
    width = std::max(width, 1);
    if (hold_incomplete_tail) text.remove_suffix(incomplete_utf8_tail(text));
    std::vector<wrapped_row> rows;
    std::string cur;
    int cur_w = 0;
    std::size_t cur_begin = 0;
    const auto push = [&](std::size_t next_begin) {
        while (!cur.empty() && cur.back() == ' ') cur.pop_back();
        rows.push_back(wrapped_row{std::move(cur), cur_begin});
        cur.clear();
        cur_w = 0;
        cur_begin = next_begin;
    };
    struct glyph {
        char32_t c;
        int w;
        std::size_t at;
    };
    std::vector<glyph> word;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t at = pos;
        char32_t c = decode_utf8(text, pos);
        if (c == '\n') {
            push(pos);
            continue;
        }
        if (c == ' ' || c == '\t') {
            int sw = c == '\t' ? 4 : 1;
            std::size_t end = pos;
            while (end < text.size() && (text[end] == ' ' || text[end] == '\t')) {
                sw += text[end] == '\t' ? 4 : 1;
                ++end;
            }
            if (cur_w + sw <= width) {
                cur.append(static_cast<std::size_t>(sw), ' ');
                cur_w += sw;
            } else {
                push(end);  // the spaces where the row breaks are dropped
            }
            pos = end;
            continue;
        }
        // a word: everything up to the next space or newline
        word.clear();
        word.push_back(glyph{displayable(c), char_width(c), at});
        int ww = word.back().w;
        while (pos < text.size() && text[pos] != ' ' && text[pos] != '\t' && text[pos] != '\n') {
            at = pos;
            c = decode_utf8(text, pos);
            word.push_back(glyph{displayable(c), char_width(c), at});
            ww += word.back().w;
        }
        if (cur_w + ww > width && cur_w > 0) push(word.front().at);
        for (const glyph& g : word) {
            if (cur_w + g.w > width && cur_w > 0) push(g.at);  // wider than a row: split
            append_utf8(cur, g.c);
            cur_w += g.w;
        }
    }
    push(text.size());  // the last row (possibly empty: nothing yet, or after a newline)
    return rows;
}

std::string char_count_text(std::int64_t n) {
    if (n < 0) n = 0;
    const auto scaled = [](std::int64_t v, std::int64_t unit, const char* suffix) {
        // tenths below 10 units, whole units above, rounded to the nearest
        const std::int64_t tenths = (v * 10 + unit / 2) / unit;
        if (tenths < 100)
            return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + suffix;
        return std::to_string((v + unit / 2) / unit) + suffix;
    };
    if (n == 1) return "1 char";
    if (n < 1000) return std::to_string(n) + " chars";
    if (n < 999'500) return scaled(n, 1000, "k chars");
    return scaled(n, 1'000'000, "M chars");
}

std::optional<std::string> discarded_marker(std::int64_t text_chars, std::int64_t tool_calls) {
    if (text_chars <= 0 && tool_calls <= 0) return std::nullopt;
    std::string what;
    if (text_chars > 0) what = char_count_text(text_chars);
    if (tool_calls > 0) {
        if (!what.empty()) what += " and ";
        what += std::to_string(tool_calls) + (tool_calls == 1 ? " tool call" : " tool calls");
    }
    return "\u21bb connection lost after " + what +
           " \u2014 retrying; the partial reply above is discarded";
}

}  // namespace coagent::tui

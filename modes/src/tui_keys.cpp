// The key decoder of the terminal UI (see tui_keys.hpp).

#include <coagent/modes/tui_keys.hpp>
#include <coagent/modes/tui_text.hpp>

#include <algorithm>
#include <optional>

namespace coagent::tui {

const std::vector<std::pair<std::string, std::string>>& key_decoder::editor_bindings() {
    static const std::vector<std::pair<std::string, std::string>> b = {
        {"\x1b[A", "ed-prev-history"},      {"\x1bOA", "ed-prev-history"},
        {"\x1b[B", "ed-next-history"},      {"\x1bOB", "ed-next-history"},
        {"\x1b[C", "ed-next-char"},         {"\x1bOC", "ed-next-char"},
        {"\x1b[D", "ed-prev-char"},         {"\x1bOD", "ed-prev-char"},
        {"\x1b[H", "ed-move-to-beg"},       {"\x1bOH", "ed-move-to-beg"},
        {"\x1b[1~", "ed-move-to-beg"},      {"\x1b[7~", "ed-move-to-beg"},
        {"\x1b[F", "ed-move-to-end"},       {"\x1bOF", "ed-move-to-end"},
        {"\x1b[4~", "ed-move-to-end"},      {"\x1b[8~", "ed-move-to-end"},
        {"\x1b[3~", "ed-delete-next-char"}, {"\x1b[3;5~", "em-delete-next-word"},
        {"\x1b[1;5C", "em-next-word"},      {"\x1b[1;3C", "em-next-word"},
        {"\x1b[1;5D", "ed-prev-word"},      {"\x1b[1;3D", "ed-prev-word"},
    };
    return b;
}

namespace {

bool is_up(std::string_view seq) {
    return seq == "\x1b[A" || seq == "\x1bOA";
}
bool is_down(std::string_view seq) {
    return seq == "\x1b[B" || seq == "\x1bOB";
}

// an escape sequence that is a key: up, down, or one the line editor binds
std::optional<key_decoder::key::kind> sequence_kind(std::string_view seq) {
    using kind = key_decoder::key::kind;
    if (is_up(seq)) return kind::up;
    if (is_down(seq)) return kind::down;
    const auto& b = key_decoder::editor_bindings();
    if (std::any_of(b.begin(), b.end(), [&](const auto& e) { return e.first == seq; }))
        return kind::editor;
    return std::nullopt;
}

std::u32string to_u32(std::string_view ascii) {
    std::u32string s;
    for (char c : ascii) s.push_back(static_cast<unsigned char>(c));
    return s;
}

}  // namespace

void key_decoder::emit_editor(std::vector<key>& out, char32_t c) {
    if (out.empty() || out.back().type != key::kind::editor ||
        (!out.back().chars.empty() && out.back().chars[0] == 0x1b))
        out.push_back(key{key::kind::editor, {}});
    out.back().chars.push_back(c);
}

void key_decoder::feed(std::string_view bytes, std::vector<key>& out) {
    buf_.append(bytes);
    parse(out, false);
}

void key_decoder::flush(std::vector<key>& out) {
    if (in_paste_) return;
    parse(out, true);
}

void key_decoder::parse(std::vector<key>& out, bool at_end) {
    static constexpr std::string_view paste_begin = "\x1b[200~";
    static constexpr std::string_view paste_end = "\x1b[201~";
    std::size_t i = 0;
    const auto emit = [&](key::kind k, std::u32string chars = {}) {
        out.push_back(key{k, std::move(chars)});
    };
    while (i < buf_.size()) {
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (in_paste_) {
            const auto end = rest.find(paste_end);
            if (end == std::string_view::npos) {
                // keep what could be the start of the terminator (or of a UTF-8 sequence)
                std::size_t keep = 0;
                for (std::size_t k = std::min(rest.size(), paste_end.size() - 1); k > 0; --k)
                    if (paste_end.substr(0, k) == rest.substr(rest.size() - k)) {
                        keep = k;
                        break;
                    }
                paste_.append(rest.substr(0, rest.size() - keep));
                i = buf_.size() - keep;
                break;
            }
            paste_.append(rest.substr(0, end));
            i += end + paste_end.size();
            in_paste_ = false;
            std::u32string chars;
            for (std::size_t p = 0; p < paste_.size();) {
                const char32_t c = decode_utf8(paste_, p);
                if (c == '\r') {
                    chars.push_back('\n');
                    if (p < paste_.size() && paste_[p] == '\n') ++p;
                } else if (c == '\n' || c == '\t' ||
                           (c >= 0x20 && c != 0x7F && !(c >= 0x80 && c < 0xA0))) {
                    chars.push_back(c);
                }
            }
            paste_.clear();
            emit(key::kind::paste, std::move(chars));
            continue;
        }
        const auto c = static_cast<unsigned char>(rest[0]);
        if (c == 0x1b) {
            if (rest.size() < 2) {
                if (!at_end) break;
                emit(key::kind::escape);
                ++i;
                continue;
            }
            const char n = rest[1];
            if (n == '[') {
                std::size_t j = 2;
                while (j < rest.size() && rest[j] >= 0x30 && rest[j] <= 0x3F) ++j;
                while (j < rest.size() && rest[j] >= 0x20 && rest[j] <= 0x2F) ++j;
                if (j >= rest.size()) {
                    if (!at_end) break;
                    i = buf_.size();  // an unfinished sequence at the timeout: dropped
                    break;
                }
                const std::string_view seq = rest.substr(0, j + 1);
                i += seq.size();
                if (seq == paste_begin) {
                    in_paste_ = true;
                    paste_.clear();
                } else if (seq == "\x1b[13;2u" || seq == "\x1b[27;2;13~") {
                    emit(key::kind::newline);
                } else if (const auto k = sequence_kind(seq)) {
                    emit(*k, to_u32(seq));
                }  // unknown sequences (F-keys, mouse, focus, …) are dropped, never typed
                continue;
            }
            if (n == 'O') {
                if (rest.size() < 3) {
                    if (!at_end) break;
                    i = buf_.size();
                    break;
                }
                const std::string_view seq = rest.substr(0, 3);
                i += 3;
                if (const auto k = sequence_kind(seq)) emit(*k, to_u32(seq));
                continue;
            }
            if (n == 0x1b) {  // ESC ESC: the first one was pressed alone
                emit(key::kind::escape);
                ++i;
                continue;
            }
            if (n == '\r' || n == '\n') {  // Alt+Enter
                emit(key::kind::newline);
                i += 2;
                continue;
            }
            // Alt+key: ESC and one character, for the editor (M-b, M-f, M-d, …)
            if (!at_end && static_cast<unsigned char>(n) >= 0x80 &&
                incomplete_utf8_tail(rest.substr(1)) == rest.size() - 1)
                break;  // the rest of the character is coming
            std::size_t p = 1;
            const char32_t k = decode_utf8(rest, p);
            i += p;
            out.push_back(key{key::kind::editor, {0x1b, k}});
            continue;
        }
        if (c == '\r') {
            emit(key::kind::enter);
            ++i;
            continue;
        }
        if (c == '\n') {
            emit(key::kind::newline);
            ++i;
            continue;
        }
        if (c == '\t') {
            emit(key::kind::tab, U"\t");
            ++i;
            continue;
        }
        if (c == 0x03 || c == 0x04 || c == 0x1a || c == 0x14) {
            emit(c == 0x03   ? key::kind::ctrl_c
                 : c == 0x04 ? key::kind::ctrl_d
                 : c == 0x1a ? key::kind::ctrl_z
                             : key::kind::ctrl_t);
            ++i;
            continue;
        }
        if (c >= 0x80 && !at_end && incomplete_utf8_tail(rest) == rest.size())
            break;  // the rest is coming
        std::size_t p = 0;
        const char32_t cp = decode_utf8(rest, p);
        i += p;
        emit_editor(out, cp);
    }
    buf_.erase(0, i);
}

}  // namespace coagent::tui

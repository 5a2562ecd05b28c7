#include <coagent/modes/app.hpp>
#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/wait_text.hpp>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cwchar>

namespace coagent {

namespace {

constexpr std::string_view ellipsis = "\u2026";

std::string one_line(std::string_view s, std::size_t max_bytes) {
    std::string out;
    for (char c : s) {
        if (out.size() >= max_bytes) {
            out.append(ellipsis);
            break;
        }
        out.push_back(c == '\n' || c == '\r' ? ' ' : c);
    }
    return out;
}

}  // namespace

std::string_view to_string(esc_action a) noexcept {
    switch (a) {
        case esc_action::none:
            return "none";
        case esc_action::abort:
            return "abort";
        case esc_action::abort_retry:
            return "abort_retry";
    }
    return "none";
}

// ---- tui_controller ------------------------------------------------------------------------

void tui_controller::add(transcript_item::kind k, std::string text) {
    transcript_.push_back(transcript_item{k, std::move(text)});
    ++revision_;
}

void tui_controller::add_notice(std::string text) {
    add(transcript_item::kind::notice, std::move(text));
}

void tui_controller::end_stream() {
    if (streaming_) {
        streaming_ = false;
        ++revision_;
    }
}

void tui_controller::flush_pending_error() {
    if (!pending_error_) return;
    add(transcript_item::kind::error, "Error: " + *pending_error_);
    pending_error_.reset();
}

void tui_controller::restore_escape() {
    if (!saved_esc_) return;
    esc_ = *saved_esc_;
    saved_esc_.reset();
    ++revision_;
}

void tui_controller::on_event(const event& e, time_point now) {
    now_ = now;
    ++revision_;
    if (std::holds_alternative<agent_start_event>(e)) {
        restore_escape();       // consecutive retries never lose the original handler (pi #578)
        flush_pending_error();  // a follow-up turn starts after a failed one
        busy_ = true;
        if (esc_ == esc_action::none) esc_ = esc_action::abort;
        if (loader_ == loader_kind::none || loader_ == loader_kind::retry)
            loader_ = loader_kind::working;
        retry_error_.clear();
    } else if (const auto* ms = std::get_if<message_start_event>(&e)) {
        if (ms->message && ms->message->role == message_role::user) {
            std::string text = text_of(*ms->message);
            if (auto it = std::find(queued_.begin(), queued_.end(), text); it != queued_.end())
                queued_.erase(it);
            end_stream();
            add(transcript_item::kind::user, std::move(text));
        }
    } else if (const auto* mu = std::get_if<message_update_event>(&e)) {
        if (!streaming_) {
            add(transcript_item::kind::assistant, {});
            streaming_ = true;
        }
        transcript_.back().text.append(mu->delta);
    } else if (const auto* me = std::get_if<message_end_event>(&e)) {
        if (!me->message || me->message->role != message_role::assistant) return;
        const message& m = *me->message;
        if (!streaming_) {
            // a reply that came without updates is shown whole
            std::string text = text_of(m);
            if (!text.empty()) add(transcript_item::kind::assistant, std::move(text));
        }
        end_stream();
        if (m.stop == stop_reason::aborted) {
            add(transcript_item::kind::notice, "Aborted");
        } else if (m.stop == stop_reason::error) {
            pending_error_ = m.error_message.value_or("Unknown error");
        }
    } else if (const auto* ts = std::get_if<tool_execution_start_event>(&e)) {
        end_stream();
        add(transcript_item::kind::tool,
            "\u2192 " + ts->tool_name + " " + one_line(boost::json::serialize(ts->args), 200));
    } else if (const auto* te = std::get_if<tool_execution_end_event>(&e)) {
        std::string result = te->result.is_string() ? std::string(te->result.as_string())
                                                    : boost::json::serialize(te->result);
        add(te->is_error ? transcript_item::kind::error : transcript_item::kind::tool,
            "\u2190 " + te->tool_name + (te->is_error ? " failed: " : ": ") +
                one_line(result, 200));
    } else if (const auto* rs = std::get_if<auto_retry_start_event>(&e)) {
        // policy §6: save the current Esc handler, Esc now cancels the retry
        if (!saved_esc_) saved_esc_ = esc_;
        esc_ = esc_action::abort_retry;
        loader_ = loader_kind::retry;
        attempt_ = rs->attempt;
        max_attempts_ = rs->max_attempts;
        wait_start_ = now;
        wait_ms_ = std::max<std::int64_t>(0, rs->delay_ms);
        retry_error_ = rs->error_message;
        pending_error_.reset();  // the loader shows that it failed; only a final failure is a line
    } else if (const auto* re = std::get_if<auto_retry_end_event>(&e)) {
        restore_escape();  // only if auto_retry_start saved one (maxRetries 0: end without start)
        if (loader_ == loader_kind::retry)
            loader_ = busy_ ? loader_kind::working : loader_kind::none;
        retry_error_.clear();
        if (!re->success) {
            pending_error_.reset();
            add(transcript_item::kind::error, retry_failed_line(*re));
        }
    } else if (const auto* cs = std::get_if<compaction_start_event>(&e)) {
        end_stream();
        pending_error_.reset();  // the overflow is being handled
        loader_ = loader_kind::compaction;
        overflow_ = cs->reason == "overflow";
        if (esc_ == esc_action::none) esc_ = esc_action::abort;
    } else if (const auto* ce = std::get_if<compaction_end_event>(&e)) {
        if (loader_ == loader_kind::compaction)
            loader_ = busy_ ? loader_kind::working : loader_kind::none;
        if (ce->aborted) {
            add(transcript_item::kind::notice, "Compaction cancelled");
        } else if (ce->error_message) {
            add(transcript_item::kind::error,
                (ce->reason == "overflow" ? "Context overflow recovery failed: "
                                          : "Compaction failed: ") +
                    *ce->error_message);
        } else {
            add(transcript_item::kind::notice,
                ce->will_retry ? "Context compacted; continuing" : "Context compacted");
        }
    } else if (const auto* fa = std::get_if<retry_fallback_applied_event>(&e)) {
        add(transcript_item::kind::notice, fallback_applied_line(*fa));
    } else if (const auto* fs = std::get_if<retry_fallback_succeeded_event>(&e)) {
        add(transcript_item::kind::notice, fallback_succeeded_line(*fs));
    } else if (const auto* xe = std::get_if<extension_error_event>(&e)) {
        add(transcript_item::kind::error,
            "Extension " + xe->extension_path + " failed on " + xe->event + ": " + xe->error);
    } else if (std::holds_alternative<agent_settled_event>(e)) {
        end_stream();
        flush_pending_error();
        busy_ = false;
        saved_esc_.reset();
        esc_ = esc_action::none;
        loader_ = loader_kind::none;
        retry_error_.clear();
    }
}

void tui_controller::on_tick(time_point now) {
    const std::string before = loader_ == loader_kind::retry ? loader_text() : std::string();
    now_ = now;
    if (loader_ == loader_kind::retry && loader_text() != before) ++revision_;
}

void tui_controller::on_prompt_done(const std::string& text, const prompt_result& r) {
    if (r.outcome == prompt_result::status::refused) {
        if (auto it = std::find(queued_.begin(), queued_.end(), text); it != queued_.end())
            queued_.erase(it);
        add(transcript_item::kind::error, "Not sent: " + r.error);
        return;
    }
    if (auto it = std::find(queued_.begin(), queued_.end(), text); it != queued_.end()) {
        queued_.erase(it);
        add(transcript_item::kind::notice, "Queued message dropped (aborted): " + text);
    }
}

tui_command tui_controller::on_escape() {
    on_other_key();
    tui_command c;
    switch (esc_) {
        case esc_action::none:
            break;
        case esc_action::abort:
            c.type = tui_command::kind::abort;
            break;
        case esc_action::abort_retry:
            c.type = tui_command::kind::abort_retry;
            break;
    }
    return c;
}

tui_command tui_controller::on_enter(std::string_view input) {
    on_other_key();
    tui_command c;
    const bool blank = std::all_of(input.begin(), input.end(), [](char ch) {
        return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
    });
    if (blank) {
        if (loader_ == loader_kind::retry) c.type = tui_command::kind::retry_now;
        return c;
    }
    if (input == "/retry" || input == "/retry on" || input == "/retry off") {
        c.type = tui_command::kind::set_auto_retry;
        c.text = std::string(input);
        c.enabled = input == "/retry" ? !auto_retry_ : input == "/retry on";
        return c;
    }
    c.type = tui_command::kind::submit;
    c.text = std::string(input);
    c.queued = busy_;
    if (busy_) {
        queued_.push_back(c.text);
    } else {
        busy_ = true;  // a second Enter before the turn starts is queued behind it
        if (esc_ == esc_action::none) esc_ = esc_action::abort;
        loader_ = loader_kind::working;
    }
    ++revision_;
    return c;
}

void tui_controller::on_auto_retry_set(bool enabled, const std::string& saved_to,
                                       const std::string& error) {
    auto_retry_ = enabled;
    std::string line = std::string("Auto-retry is ") + (enabled ? "on" : "off");
    if (error.empty()) {
        add(transcript_item::kind::notice,
            line + (saved_to.empty() ? "" : " (saved to " + saved_to + ")"));
    } else {
        add(transcript_item::kind::error,
            line + " for this session, but saving it failed: " + error);
    }
}

tui_command tui_controller::on_ctrl_c(bool input_empty) {
    (void)input_empty;
    tui_command c;
    if (ctrl_c_armed_) {
        c.type = tui_command::kind::exit;
        return c;
    }
    ctrl_c_armed_ = true;
    ++revision_;
    c.type = tui_command::kind::clear_input;
    return c;
}

tui_command tui_controller::on_ctrl_d(bool input_empty) {
    on_other_key();
    tui_command c;
    c.type = input_empty ? tui_command::kind::exit : tui_command::kind::edit;
    return c;
}

void tui_controller::on_other_key() {
    if (ctrl_c_armed_) {
        ctrl_c_armed_ = false;
        ++revision_;
    }
}

std::int64_t tui_controller::wait_left_ms() const {
    if (loader_ != loader_kind::retry) return 0;
    // in milliseconds from the start: a huge wait never overflows a time point; rounded up
    const auto elapsed_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(now_ - wait_start_).count();
    const std::int64_t elapsed_ms = elapsed_ns <= 0 ? 0 : elapsed_ns / 1'000'000;
    return elapsed_ms >= wait_ms_ ? 0 : wait_ms_ - elapsed_ms;
}

std::optional<tui_controller::time_point> tui_controller::next_wakeup() const {
    const std::int64_t left = wait_left_ms();
    if (left <= 0) return std::nullopt;
    // the text changes when next_wait_change(left) ms are left, i.e. at start + (wait - that)
    const std::int64_t at_ms = wait_ms_ - next_wait_change(left);
    const auto room =
        std::chrono::duration_cast<std::chrono::milliseconds>(time_point::max() - wait_start_)
            .count();
    if (at_ms >= room) return std::nullopt;  // beyond any clock: nothing to redraw
    return wait_start_ + std::chrono::milliseconds(at_ms);
}

std::string tui_controller::loader_text() const {
    switch (loader_) {
        case loader_kind::none:
            return {};
        case loader_kind::working:
            return "Working\u2026 (esc to interrupt)";
        case loader_kind::retry:
            return "Retrying (" + std::to_string(attempt_) + "/" + std::to_string(max_attempts_) +
                   ") in " + format_wait(wait_left_ms()) + "\u2026 (esc to cancel)";
        case loader_kind::compaction:
            return overflow_ ? "Context overflow detected, compacting\u2026 (esc to cancel)"
                             : "Compacting context\u2026 (esc to cancel)";
    }
    return {};
}

std::string tui_controller::status_text() const {
    if (ctrl_c_armed_) return "Press Ctrl+C again to exit";
    std::string s = model_label_;
    const auto sep = [&] {
        if (!s.empty()) s += " \u00b7 ";
    };
    if (!queued_.empty()) {
        sep();
        s += std::to_string(queued_.size()) + " queued";
    }
    sep();
    if (loader_ == loader_kind::retry) {
        s += "enter: retry now \u00b7 esc: cancel the retry";
        if (!retry_error_.empty()) s += " \u00b7 " + one_line(retry_error_, 160);
    } else if (busy_) {
        s += "esc: interrupt \u00b7 enter: queue a follow-up";
    } else {
        s += "enter: send \u00b7 ctrl+j: new line \u00b7 ctrl+c twice or ctrl+d: exit";
    }
    return s;
}

// ---- text ----------------------------------------------------------------------------------

namespace tui {

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

// ---- keys ----------------------------------------------------------------------------------

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
                } else if (is_up(seq)) {
                    emit(key::kind::up, to_u32(seq));
                } else if (is_down(seq)) {
                    emit(key::kind::down, to_u32(seq));
                } else {
                    const auto& b = editor_bindings();
                    if (std::any_of(b.begin(), b.end(),
                                    [&](const auto& e) { return e.first == seq; }))
                        emit(key::kind::editor, to_u32(seq));
                    // unknown sequences (F-keys, mouse, focus, …) are dropped, never typed
                }
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
                if (is_up(seq)) {
                    emit(key::kind::up, to_u32(seq));
                } else if (is_down(seq)) {
                    emit(key::kind::down, to_u32(seq));
                } else {
                    const auto& b = editor_bindings();
                    if (std::any_of(b.begin(), b.end(),
                                    [&](const auto& e) { return e.first == seq; }))
                        emit(key::kind::editor, to_u32(seq));
                }
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
        if (c == 0x03 || c == 0x04 || c == 0x1a) {
            emit(c == 0x03 ? key::kind::ctrl_c : c == 0x04 ? key::kind::ctrl_d : key::kind::ctrl_z);
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

// ---- screen --------------------------------------------------------------------------------

terminal_caps terminal_caps::ansi() {
    terminal_caps c;
    c.up = [](int n) { return "\x1b[" + std::to_string(n) + "A"; };
    c.down = [](int n) { return "\x1b[" + std::to_string(n) + "B"; };
    c.right = [](int n) { return "\x1b[" + std::to_string(n) + "C"; };
    return c;
}

void screen::put_row(std::string& out, const screen_row& r) const {
    const std::string* style = nullptr;
    std::string combo;
    switch (r.style) {
        case row_style::plain:
        case row_style::assistant:
        case row_style::input:
            break;
        case row_style::user:
            style = &caps_.bold;
            break;
        case row_style::error:
            style = &caps_.red;
            break;
        case row_style::notice:
        case row_style::rule:
        case row_style::status:
            style = &caps_.dim;
            break;
        case row_style::tool:
            style = &caps_.cyan;
            break;
        case row_style::warning:
            style = &caps_.yellow;
            break;
    }
    if (style && !style->empty() && !r.text.empty()) {
        out += *style;
        out += r.text;
        out += caps_.reset;
    } else {
        out += r.text;
    }
}

void screen::move_to_row(std::string& out, int row) {
    out.push_back('\r');
    if (row < cur_row_) out += caps_.up(cur_row_ - row);
    if (row > cur_row_) out += caps_.down(row - cur_row_);
    cur_row_ = row;
    cur_col_ = 0;
}

std::string screen::draw(const std::vector<screen_row>& commit, const std::vector<screen_row>& live,
                         int cursor_row, int cursor_col, bool full) {
    std::string out;
    std::size_t first = 0;
    if (full) {
        out += caps_.hide_cursor;
        out += caps_.clear_screen;
        out += caps_.clear_scrollback;
        live_.clear();
        cur_row_ = 0;
        cur_col_ = 0;
    } else if (commit.empty()) {
        while (first < live.size() && first < live_.size() && live[first] == live_[first]) ++first;
        if (first == live.size() && live.size() == live_.size()) {
            if (cursor_row == cur_row_ && cursor_col == cur_col_) return {};
            move_to_row(out, cursor_row);
            if (cursor_col > 0) out += caps_.right(cursor_col);
            cur_col_ = cursor_col;
            return out;
        }
        // the region only shrank: rewrite its new last row, so the cursor ends on it
        if (first == live.size() && first > 0) --first;
        out += caps_.hide_cursor;
    } else {
        out += caps_.hide_cursor;
    }
    bool need_newline = false;
    if (!full && !live_.empty()) {
        if (first < live_.size()) {
            move_to_row(out, static_cast<int>(first));
            out += caps_.clear_eos;
        } else {  // rows were only added below the old last row
            move_to_row(out, static_cast<int>(live_.size()) - 1);
            need_newline = true;
        }
    }
    for (const screen_row& r : commit) {
        if (need_newline) out += "\r\n";
        put_row(out, r);
        need_newline = true;
    }
    for (std::size_t k = first; k < live.size(); ++k) {
        if (need_newline) out += "\r\n";
        put_row(out, live[k]);
        need_newline = true;
    }
    live_ = live;
    cur_row_ = live.empty() ? 0 : static_cast<int>(live.size()) - 1;
    move_to_row(out, cursor_row);
    if (cursor_col > 0) out += caps_.right(cursor_col);
    cur_col_ = cursor_col;
    out += caps_.show_cursor;
    return out;
}

std::string screen::render(const std::vector<screen_row>& commit,
                           const std::vector<screen_row>& live, int cursor_row, int cursor_col) {
    return draw(commit, live, cursor_row, cursor_col, false);
}

std::string screen::redraw(const std::vector<screen_row>& all_rows,
                           const std::vector<screen_row>& live, int cursor_row, int cursor_col) {
    return draw(all_rows, live, cursor_row, cursor_col, true);
}

std::string screen::clear_live() {
    std::string out;
    if (live_.empty()) return out;
    move_to_row(out, 0);
    out += caps_.clear_eos;
    live_.clear();
    cur_row_ = 0;
    return out;
}

}  // namespace tui

}  // namespace coagent

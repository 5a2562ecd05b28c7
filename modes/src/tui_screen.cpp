// The screen of the terminal UI (see tui_screen.hpp).

#include <coagent/modes/tui_screen.hpp>
#include <coagent/modes/tui_text.hpp>

#include <algorithm>

namespace coagent::tui {

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
    const bool styled = style && !style->empty() && !r.text.empty();
    if (r.spans.empty()) {
        if (styled) out += *style;
        out += r.text;
        if (styled) out += caps_.reset;
        return;
    }
    // Markdown: each span over the row's style, which comes back after it
    std::size_t at = 0;
    if (styled) out += *style;
    for (const auto& sp : r.spans) {
        const std::size_t b = std::min(sp.begin, r.text.size()),
                          e = std::min(sp.end, r.text.size());
        if (b < at || e < b) continue;
        out.append(r.text, at, b - at);
        std::string on;
        switch (sp.style) {
            case span_style::plain:
                break;
            case span_style::bold:
                on = caps_.bold;
                break;
            case span_style::italic:
                on = caps_.italic;
                break;
            case span_style::bold_italic:
                on = caps_.bold + caps_.italic;
                break;
            case span_style::code:
                on = caps_.cyan;
                break;
            case span_style::link:
                on = caps_.underline + caps_.cyan;
                break;
            case span_style::dim:
                on = caps_.dim;
                break;
        }
        out += on;
        out.append(r.text, b, e - b);
        if (!on.empty()) {
            out += caps_.reset;
            if (styled) out += *style;
        }
        at = e;
    }
    out.append(r.text, at, std::string::npos);
    if (styled) out += caps_.reset;
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

}  // namespace coagent::tui

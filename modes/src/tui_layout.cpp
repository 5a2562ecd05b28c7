// The layout of the interactive terminal UI (see tui_layout.hpp).

#include <coagent/modes/tui_layout.hpp>
#include <coagent/modes/tui_markdown.hpp>
#include <coagent/modes/tui_text.hpp>

#include <algorithm>

namespace coagent::tui {

namespace {

// thinking folded to one line: "✻ Thinking: <its text, line breaks as spaces>", cut to `width`
// with "…"
std::string folded_thinking(std::string_view text, int width) {
    std::string line = "\u273b Thinking: ";
    bool space = false;
    for (const char c : text) {
        if (c == '\n' || c == '\r' || c == '\t' || c == ' ') {
            space = true;
            continue;
        }
        if (space && line.size() > 14) line.push_back(' ');
        space = false;
        line.push_back(c);
    }
    return truncate_to_width(sanitize(line), width);
}

std::string_view strip_trailing_newlines(std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' '))
        s.remove_suffix(1);
    return s;
}

}  // namespace

row_style style_of(transcript_item::kind k) noexcept {
    switch (k) {
        case transcript_item::kind::user:
            return row_style::user;
        case transcript_item::kind::assistant:
            return row_style::assistant;
        case transcript_item::kind::error:
            return row_style::error;
        case transcript_item::kind::notice:
            return row_style::notice;
        case transcript_item::kind::tool:
            return row_style::tool;
        case transcript_item::kind::thinking:
            return row_style::notice;  // dimmed
    }
    return row_style::plain;
}

void transcript_printer::reset() noexcept {
    committed_items_ = 0;
    item_started_ = false;
}

void transcript_printer::collect(const std::vector<transcript_item>& items, bool streaming,
                                 int width, std::vector<screen_row>& commit,
                                 std::vector<screen_row>& stream_rows) {
    stream_rows.clear();
    const int w = std::max(width, 4);
    while (committed_items_ < items.size()) {
        const std::size_t i = committed_items_;
        const transcript_item& item = items[i];
        const bool live = streaming && i + 1 == items.size();
        const row_style st = style_of(item.type);
        const bool user = item.type == transcript_item::kind::user;
        const bool thinking = item.type == transcript_item::kind::thinking;
        const int text_w = user || thinking ? w - 2 : w;
        if (!item_started_) {
            if (i > 0) commit.push_back(screen_row{"", row_style::plain});
            item_started_ = true;
            item_offset_ = 0;
            item_rows_ = 0;
            item_blocks_ = 0;
            if (thinking && thinking_expanded_)  // the whole text follows under this row
                commit.push_back(screen_row{"\u273b Thinking:", st});
        }
        if (thinking && !thinking_expanded_) {
            screen_row r{folded_thinking(item.text, w), st};
            if (live) {
                stream_rows = {std::move(r)};
                return;
            }
            commit.push_back(std::move(r));
            ++committed_items_;
            item_started_ = false;
            continue;
        }
        if (markdown_ && item.type == transcript_item::kind::assistant) {
            // parsed from the first block not printed yet (item_offset_): the blocks before it
            // are finished, so a long reply costs its tail, not its whole text, per redraw.
            // (CR line ends give no offsets: then all of it, skipping the blocks printed.)
            std::string_view text = item.text;
            if (live) text.remove_suffix(incomplete_utf8_tail(text));  // the rest is coming
            if (!live) text = strip_trailing_newlines(text);
            const bool offsets = text.find('\r') == std::string_view::npos;
            if (offsets) text = text.substr(std::min(item_offset_, text.size()));
            std::vector<block_position> pos;
            auto blocks = markdown_blocks(text, w, &pos, offsets && item_blocks_ > 0);
            const std::size_t first = offsets ? 0 : item_blocks_;
            // while it streams, the blocks up to the first open one are printed
            std::size_t done = blocks.size();
            if (live) {
                done = 0;
                while (done < pos.size() && pos[done].closed) ++done;
            }
            for (std::size_t k = first; k < done; ++k)
                commit.insert(commit.end(), blocks[k].begin(), blocks[k].end());
            item_blocks_ = offsets ? item_blocks_ + done : std::max(item_blocks_, done);
            if (live) {
                for (std::size_t k = std::max(first, done); k < blocks.size(); ++k)
                    stream_rows.insert(stream_rows.end(), blocks[k].begin(), blocks[k].end());
                if (offsets && done < pos.size()) item_offset_ += pos[done].start;
                return;
            }
            ++committed_items_;
            item_started_ = false;
            continue;
        }
        const auto row_of = [&](std::string text) {
            screen_row r{std::move(text), st};
            if (user) r.text.insert(0, item_rows_ == 0 ? "> " : "  ");
            if (thinking) r.text.insert(0, "  ");
            ++item_rows_;
            return r;
        };
        if (live) {
            const std::string_view rest = std::string_view(item.text).substr(item_offset_);
            auto rows = wrap(rest, text_w, true);
            for (std::size_t k = 0; k + 1 < rows.size(); ++k)
                commit.push_back(row_of(std::move(rows[k].text)));
            item_offset_ += rows.back().begin;
            const std::size_t keep = item_rows_;
            stream_rows = {row_of(std::move(rows.back().text))};
            item_rows_ = keep;  // the live row is not printed yet
            return;
        }
        const std::string_view text = strip_trailing_newlines(item.text);
        if (item_offset_ < text.size()) {
            auto rows = wrap(text.substr(item_offset_), text_w, false);
            for (auto& r : rows) commit.push_back(row_of(std::move(r.text)));
        }
        ++committed_items_;
        item_started_ = false;
    }
}

live_region compose_live(const live_input& in) {
    live_region out;
    auto& live = out.rows;
    const int w = std::max(in.width, 4);
    live.insert(live.end(), in.stream_rows.begin(), in.stream_rows.end());
    const auto& q = in.queued;
    for (std::size_t k = 0; k < q.size() && k < 3; ++k)
        live.push_back(screen_row{truncate_to_width("Queued: " + q[k], w), row_style::notice});
    if (q.size() > 3)
        live.push_back(screen_row{"\u2026 and " + std::to_string(q.size() - 3) + " more queued",
                                  row_style::notice});
    live.push_back(screen_row{truncate_to_width(in.loader, w),
                              in.loader.empty() ? row_style::plain : row_style::warning});
    std::string rule;
    for (int k = 0; k < w; ++k) rule += "\u2500";
    live.push_back(screen_row{std::move(rule), row_style::rule});

    // the input: "> " then the text, wrapped at word boundaries, continuation rows indented
    const std::u32string& text = in.text;
    const std::size_t cursor = std::min(in.cursor, text.size());
    const int avail = std::max(w - 2, 1);
    const auto width_of = [](char32_t c) { return c == U'\t' ? 4 : char_width(c); };
    struct span {
        std::size_t begin, end;
        bool line_end;  // the last row of a line of the input
    };
    std::vector<span> spans;
    for (std::size_t line = 0;;) {
        const std::size_t nl = std::min(text.find(U'\n', line), text.size());
        std::size_t row = line;
        int used = 0;
        std::size_t space = std::u32string::npos;  // the last space of this row
        for (std::size_t idx = line; idx < nl; ++idx) {
            const int cw = width_of(text[idx]);
            if (used + cw > avail && used > 0) {
                // break after the row's last space (a word wider than a row is split)
                const std::size_t at = space != std::u32string::npos ? space + 1 : idx;
                spans.push_back({row, at, false});
                row = at;
                used = 0;
                space = std::u32string::npos;
                for (std::size_t k = row; k < idx; ++k) {
                    used += width_of(text[k]);
                    if (text[k] == U' ') space = k;
                }
            }
            used += cw;
            if (text[idx] == U' ') space = idx;
        }
        spans.push_back({row, nl, true});
        if (nl == text.size()) break;
        line = nl + 1;
    }
    std::vector<std::string> rows;
    int crow = 0, ccol = 0;
    for (std::size_t r = 0; r < spans.size(); ++r) {
        const auto& sp = spans[r];
        std::string row;
        int used = 0;
        for (std::size_t idx = sp.begin; idx < sp.end; ++idx) {
            if (idx == cursor) {
                crow = static_cast<int>(rows.size());
                ccol = used;
            }
            if (text[idx] == U'\t')
                row.append("    ");
            else
                append_utf8(row, displayable(text[idx]));
            used += width_of(text[idx]);
        }
        rows.push_back(std::move(row));
        if (cursor == sp.end && sp.line_end) {  // after the last character of a line
            crow = static_cast<int>(rows.size()) - 1;
            ccol = used;
            if (used >= avail) {  // a full row: the cursor waits on the next one
                rows.emplace_back();
                ++crow;
                ccol = 0;
            }
        }
    }
    // keep the region on the screen: show the input rows around the cursor
    const int fixed = static_cast<int>(live.size()) + 1 + (in.footer.empty() ? 0 : 1);
    const int max_rows = std::max(1, in.height - fixed);
    int first = 0;
    if (static_cast<int>(rows.size()) > max_rows)
        first = std::clamp(crow - max_rows + 1, 0, static_cast<int>(rows.size()) - max_rows);
    const int last = std::min(static_cast<int>(rows.size()), first + max_rows);
    out.cursor_row = static_cast<int>(live.size()) + (crow - first);
    out.cursor_col = 2 + ccol;
    for (int k = first; k < last; ++k)
        live.push_back(screen_row{(k == 0 ? "> " : "  ") + rows[static_cast<std::size_t>(k)],
                                  row_style::input});
    live.push_back(screen_row{
        truncate_to_width(
            in.attachments.empty() ? in.status : in.attachments + " \u00b7 " + in.status, w),
        row_style::status});
    if (!in.footer.empty())
        live.push_back(screen_row{truncate_to_width(in.footer, w), row_style::status});
    // a terminal smaller than the fixed rows: drop from the top, keep the cursor
    while (static_cast<int>(live.size()) > std::max(in.height, 1) && out.cursor_row > 0) {
        live.erase(live.begin());
        --out.cursor_row;
    }
    return out;
}

}  // namespace coagent::tui

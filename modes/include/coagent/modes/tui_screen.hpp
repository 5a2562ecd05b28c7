#pragma once
// The screen of the terminal UI: a bottom region of rows redrawn by difference into the few
// terminal bytes that changed. No terminal I/O: it returns the bytes to write.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent::tui {

/// How a row is drawn.
enum class row_style { plain, user, assistant, error, notice, tool, warning, rule, status, input };

/// How part of a row is drawn (Markdown): over the row's style.
enum class span_style : unsigned char { plain, bold, italic, bold_italic, code, link, dim };

/// A styled part of a row: bytes [begin, end) of its text.
struct row_span {
    std::size_t begin = 0, end = 0;
    span_style style = span_style::plain;
    bool operator==(const row_span&) const = default;
};

struct screen_row {
    screen_row() = default;
    screen_row(std::string t, row_style s = row_style::plain, std::vector<row_span> sp = {})
        : text(std::move(t)), style(s), spans(std::move(sp)) {}

    std::string text;  ///< sanitized, fits the width
    row_style style = row_style::plain;
    std::vector<row_span> spans;  ///< styled parts, in order, not overlapping (Markdown)
    bool operator==(const screen_row&) const = default;
};

/// The terminal capabilities the renderer uses (terminfo strings; ANSI when missing).
struct terminal_caps {
    std::string clear_eol = "\x1b[K";
    std::string clear_eos = "\x1b[J";
    std::string clear_screen = "\x1b[H\x1b[2J";
    std::string clear_scrollback = "\x1b[3J";
    std::string hide_cursor = "\x1b[?25l";
    std::string show_cursor = "\x1b[?25h";
    std::string reset = "\x1b[0m";
    std::string bold = "\x1b[1m";
    std::string dim = "\x1b[2m";
    std::string red = "\x1b[31m";
    std::string yellow = "\x1b[33m";
    std::string cyan = "\x1b[36m";
    std::string italic = "\x1b[3m";
    std::string underline = "\x1b[4m";
    /// parm_up_cursor / parm_down_cursor / parm_right_cursor by n ≥ 1.
    std::function<std::string(int)> up, down, right;
    static terminal_caps ansi();
};

/// The transcript scrolls above a "live" bottom region (the streaming row, queued messages,
/// loader, input, status). Rows printed above the region are final; the region is redrawn
/// from its first changed row only. render() returns the bytes to write.
class screen {
  public:
    explicit screen(terminal_caps caps) : caps_(std::move(caps)) {}

    /// Prints `commit` rows for good above the region, then shows `live` with the cursor at
    /// (`cursor_row`, `cursor_col`) of the region. Returns "" when nothing changed.
    std::string render(const std::vector<screen_row>& commit, const std::vector<screen_row>& live,
                       int cursor_row, int cursor_col);
    /// Clears the screen (and the scrollback), then draws like render(): after a width change.
    std::string redraw(const std::vector<screen_row>& all_rows, const std::vector<screen_row>& live,
                       int cursor_row, int cursor_col);
    /// Removes the live region (at exit), leaving the cursor at its first row.
    std::string clear_live();
    const std::vector<screen_row>& live() const noexcept { return live_; }

  private:
    void put_row(std::string& out, const screen_row& r) const;
    void move_to_row(std::string& out, int row);
    std::string draw(const std::vector<screen_row>& commit, const std::vector<screen_row>& live,
                     int cursor_row, int cursor_col, bool full);

    terminal_caps caps_;
    std::vector<screen_row> live_;
    int cur_row_ = 0;  // the terminal cursor's row within the live region
    int cur_col_ = 0;
};

}  // namespace coagent::tui

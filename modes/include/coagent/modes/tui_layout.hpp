#pragma once
// The layout of the interactive terminal UI as plain code: which transcript rows are printed
// for good (transcript_printer) and the live region at the bottom (compose_live: the
// streaming row, queued messages, loader, rule, the wrapped input with its cursor, status).
// modes/src/interactive_mode.cpp feeds them the controller's state and draws what they return.

#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/tui_screen.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coagent::tui {

/// How a transcript item's rows are drawn.
row_style style_of(transcript_item::kind k) noexcept;

/// What of the transcript is printed for good. Items are separated by a blank row; a user
/// message is prefixed "> " (continuation rows "  "); trailing newlines and spaces of a
/// finished item are not printed. The streaming reply's last row stays live while it can
/// still change.
class transcript_printer {
  public:
    /// Appends to `commit` the rows of `items` not printed yet, at `width` columns (at least 4).
    /// `streaming`: the last item is a reply still streaming; its rows but the last are
    /// committed, and the last is returned in `stream_rows` (replaced). With Markdown, a reply's
    /// blocks are committed when finished (a blank line before the next block) and the rows of
    /// the open blocks stay live; only the text from the first open block is parsed again.
    void collect(const std::vector<transcript_item>& items, bool streaming, int width,
                 std::vector<screen_row>& commit, std::vector<screen_row>& stream_rows);
    /// Prints everything again from the first item (a full redraw).
    void reset() noexcept;
    /// Assistant replies rendered as Markdown (tui.markdown, --no-markdown) or as plain text.
    void set_markdown(bool on) noexcept { markdown_ = on; }
    /// Thinking blocks shown whole (Ctrl+T): a row "✻ Thinking:", then the text word-wrapped
    /// and indented two columns, its line breaks kept, dimmed. Otherwise (the default) folded
    /// to the one row "✻ Thinking: <the text, line breaks as spaces>", cut with "…". A change
    /// takes effect from the next reset().
    void set_thinking_expanded(bool on) noexcept { thinking_expanded_ = on; }

  private:
    std::size_t committed_items_ = 0;  // transcript items printed for good
    bool item_started_ = false;        // the next item's separator row is printed
    std::size_t item_offset_ = 0;      // bytes of that item already printed (row starts)
    std::size_t item_rows_ = 0;        // rows of that item already printed
    std::size_t item_blocks_ = 0;      // Markdown: blocks of that item already printed
    bool markdown_ = false;
    bool thinking_expanded_ = false;
};

/// What the live region shows.
struct live_input {
    std::vector<screen_row> stream_rows;  ///< the streaming reply's live rows (its last)
    std::vector<std::string> queued;      ///< messages waiting, oldest first
    std::string loader;                   ///< the loader line ("" when none)
    std::string status;                   ///< the status line
    std::string attachments;  ///< the input's images (tui::attachment_status), before the status
    std::string footer;       ///< the footer under it ("" = no row)
    std::u32string text;      ///< the input being edited
    std::size_t cursor = 0;   ///< the input cursor (code points)
    int width = 80;           ///< terminal columns (at least 4 are used)
    int height = 24;          ///< terminal rows
};

struct live_region {
    std::vector<screen_row> rows;
    int cursor_row = 0;  ///< the row of `rows` the cursor is on
    int cursor_col = 0;  ///< its column
};

/// Live region: [streaming row] [queued: the first 3, then "… and N more queued"] [loader]
/// [rule] [input: "> " then the text wrapped after the last space that fits (a word wider than
/// a row is split), continuation rows indented "  ", tabs as 4
/// columns, only the rows around the cursor when it does not fit] [status: the attachments
/// first, `1 image: shot.png · …`, when the input holds any] [footer]. A terminal
/// smaller than that drops rows from the top, keeping the cursor's row.
live_region compose_live(const live_input& in);

}  // namespace coagent::tui

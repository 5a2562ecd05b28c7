#pragma once
// Markdown for the terminal UI: an assistant reply parsed with cmark-gfm (tables, strikethrough,
// autolinks) and laid out as styled rows, one group of rows per top-level block, so a streaming
// reply can print its finished blocks for good and keep only the last one live. Plain code.

#include <coagent/modes/tui_screen.hpp>

#include <string_view>
#include <vector>

namespace coagent::tui {

/// The rows of each top-level block of `text` at `width` columns (at least 4), in order. Every
/// text is sanitized (control characters, ESC included, become U+FFFD), so nothing the model
/// writes reaches the terminal as a sequence. A block's rows begin with a blank row when a block
/// precedes it. Headings are bold; emphasis italic; strong bold; inline code and fenced or
/// indented code (indented two columns, never re-wrapped) in the code style; block quotes
/// behind "│ "; list items behind "• " or "N. "; tables with aligned, boxed columns; links as
/// their text followed by " (url)" when it differs; a thematic break as a rule.
/// Where a block is in the source, for a reply that streams.
struct block_position {
    std::size_t start = 0;  ///< byte offset of its first line (npos: CR line ends, unknown)
    /// A blank line separates it from a following block: text appended later can no longer
    /// change it (a table row, a list item or a paragraph line that follows directly can).
    bool closed = false;
};

/// `positions`, when given, receives each block's position, so a streaming reply can print
/// its closed blocks and parse only from the first open one next time. `continuing`: blocks
/// precede `text` (its first block gets the blank row too).
std::vector<std::vector<screen_row>> markdown_blocks(
    std::string_view text, int width, std::vector<block_position>* positions = nullptr,
    bool continuing = false);

}  // namespace coagent::tui

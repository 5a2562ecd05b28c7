#pragma once
// Text for the terminal UI: UTF-8 decoding, display width (wcwidth), sanitising, truncation and
// the prefix-stable word wrap. Plain functions, no terminal.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent::tui {

inline constexpr char32_t replacement_char = 0xFFFD;

/// Decodes one code point of `s` starting at `pos`; advances `pos`. An invalid sequence
/// (bad lead or continuation byte, truncated, overlong, surrogate, > U+10FFFF) decodes to one
/// U+FFFD and consumes at least one byte.
char32_t decode_utf8(std::string_view s, std::size_t& pos) noexcept;
/// Bytes at the end of `s` that may be the start of a sequence still being received (0–3).
std::size_t incomplete_utf8_tail(std::string_view s) noexcept;
void append_utf8(std::string& out, char32_t c);

/// Columns a code point takes (wcwidth in a UTF-8 locale): 0 for combining marks, 2 for wide
/// CJK / emoji. Control and unprintable characters are shown as U+FFFD: 1.
int char_width(char32_t c) noexcept;
/// What a code point is shown as: U+FFFD for controls (C0 but \n, DEL, C1), unprintables and
/// surrogates; itself otherwise. Tabs are expanded by the layout, not here.
char32_t displayable(char32_t c) noexcept;
/// Columns `utf8` takes once made displayable (no newlines expected).
int display_width(std::string_view utf8);
/// `utf8` made safe for a terminal: valid UTF-8, every control character but \n replaced by
/// U+FFFD, tabs as spaces.
std::string sanitize(std::string_view text);
/// The longest prefix of `utf8` (displayable) that fits in `width` columns; appends "…" when cut.
std::string truncate_to_width(std::string_view utf8, int width);

struct wrapped_row {
    std::string text;       ///< sanitized, at most `width` columns
    std::size_t begin = 0;  ///< byte offset in the source where the row starts
};
/// Greedy word wrap of `text` (any bytes) into rows of at most `width` columns. `\n` ends a row;
/// a word that does not fit starts a new row, and a word wider than a row is split. The layout
/// is prefix-stable: appending text changes only the last row, so rows above it can be printed
/// for good while a reply streams. Spaces where a row breaks are dropped.
/// `hold_incomplete_tail`: an unfinished UTF-8 sequence at the end (a reply still streaming) is
/// left out instead of shown as U+FFFD.
std::vector<wrapped_row> wrap(std::string_view text, int width, bool hold_incomplete_tail = false);

/// A count of characters as the UI shows it: "850 chars", "1 char", "1.2k chars" (tenths below
/// 10k, rounded), "12k chars", "1.5M chars".
std::string char_count_text(std::int64_t chars);
/// The transcript line after a failed reply that had streamed something (auto_retry_start's
/// `discarded`): "↻ connection lost after 1.2k chars — retrying; the partial reply above is
/// discarded" (with tool calls: "after 1.2k chars and 1 tool call", "after 2 tool calls");
/// nullopt when it streamed nothing (the reply already on screen stays as it is).
std::optional<std::string> discarded_marker(std::int64_t text_chars, std::int64_t tool_calls);

}  // namespace coagent::tui

#pragma once
// The sans-io half of the interactive terminal UI: the event controller (session events, keys
// and clock ticks in; transcript, loader, status and the active Esc action out — policy §6), the
// key splitter that sits in front of the line editor, UTF-8 display-width text layout, and the
// bottom-region renderer that turns rows into the few terminal bytes that changed. No terminal,
// no Asio, no libedit here: modes/src/interactive_mode.cpp performs what these decide.

#include <coagent/runtime/event.hpp>
#include <coagent/session/agent_session.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

// ---- the event controller ------------------------------------------------------------------

/// What Esc does right now.
enum class esc_action {
    none,         ///< idle: nothing to interrupt
    abort,        ///< a turn is running: session.abort()
    abort_retry,  ///< a retry backoff is pending: session.abort_retry()
};
std::string_view to_string(esc_action a) noexcept;

/// One entry of the scrolling transcript. `text` is as received (it may hold bytes that are
/// not UTF-8 or control characters: the layout makes them safe).
struct transcript_item {
    enum class kind {
        user,       ///< a user message the session started
        assistant,  ///< reply text (grows while it streams)
        error,      ///< "Error: …", "Retry failed after …", compaction failures
        notice,     ///< "Aborted", "Context compacted", discarded queued messages
        tool,       ///< tool calls and their results
    };
    kind type = kind::notice;
    std::string text;
};

/// What the interactive shell is asked to do after a key.
struct tui_command {
    enum class kind {
        none,            ///< nothing (the key changed only what is shown)
        edit,            ///< give the key to the line editor
        abort,           ///< session.abort()
        abort_retry,     ///< session.abort_retry()
        retry_now,       ///< session.retry_now(): Enter on an empty editor during a backoff
        submit,          ///< session.prompt(text, streaming_behavior::follow_up); clear the input
        clear_input,     ///< empty the line editor
        exit,            ///< leave (abort a running turn first)
        set_auto_retry,  ///< `/retry on|off` (toggle without an argument): set and persist
                         ///< retry.enabled, then report with on_auto_retry_set(); clear the input
    };
    kind type = kind::none;
    std::string text;      ///< submit: the message; set_auto_retry: the command typed
    bool queued = false;   ///< submit: the session is busy, the message runs after the turn
    bool enabled = false;  ///< set_auto_retry: the new value
};

/// The loader/Esc state machine of the terminal UI (the reference's event controller).
///
/// - `auto_retry_start`: saves the current Esc handler and switches Esc to abort_retry; the
///   loader reads `Retrying (<attempt>/<maxAttempts>) in <N>s… (esc to cancel)`, N = ceil of
///   the seconds left, counting down on every tick.
/// - `auto_retry_end`: restores the saved handler (only if one was saved: with maxRetries 0 an
///   end comes without a start) and clears the loader; `success == false` adds the transcript
///   line `Retry failed after <attempt> attempts: <finalError>`.
/// - `agent_start`: restores the saved handler too, so consecutive retries never save
///   abort_retry as "the previous handler" (pi #578).
/// - compaction: its own loader (`Compacting context… (esc to cancel)`, or
///   `Context overflow detected, compacting… (esc to cancel)`) and a line when it ends.
///
/// Times come from the caller (steady clock), so tests run it without waiting.
class tui_controller {
  public:
    using clock = std::chrono::steady_clock;
    using time_point = clock::time_point;

    enum class loader_kind { none, working, retry, compaction };

    // ---- inputs ----
    void on_event(const event& e, time_point now);
    /// The clock moved (call at next_wakeup(), or whenever): the countdown follows.
    void on_tick(time_point now);
    /// A prompt the shell started with `text` has completed. A queued message still waiting
    /// then was dropped (abort() drops queued messages): the transcript says so. A refused
    /// prompt shows its error.
    void on_prompt_done(const std::string& text, const prompt_result& r);

    tui_command on_escape();
    /// Enter with the editor's text. Blank input does nothing, except while the retry loader
    /// shows: then it retries now. `/retry on`, `/retry off` and `/retry` (toggle) are
    /// commands, not messages.
    tui_command on_enter(std::string_view input);
    /// The shell tells the current retry.enabled (the toggle flips it) …
    void set_auto_retry_state(bool enabled) { auto_retry_ = enabled; }
    /// … and how setting it went: `saved_to` is the settings file, `error` why saving failed.
    void on_auto_retry_set(bool enabled, const std::string& saved_to, const std::string& error);
    tui_command on_ctrl_c(bool input_empty);
    tui_command on_ctrl_d(bool input_empty);
    /// Any other key (ends a Ctrl+C sequence).
    void on_other_key();
    void set_model_label(std::string label) {
        model_label_ = std::move(label);
        ++revision_;
    }
    /// A line shown in the transcript as a notice (e.g. the welcome line).
    void add_notice(std::string text);
    /// Any transcript entry (e.g. the messages of a resumed session).
    void add_item(transcript_item::kind k, std::string text) { add(k, std::move(text)); }

    // ---- outputs ----
    esc_action escape_action() const noexcept { return esc_; }
    /// The handler auto_retry_start saved, if one is saved now (for tests and debugging).
    std::optional<esc_action> saved_escape_action() const noexcept { return saved_esc_; }
    loader_kind loader() const noexcept { return loader_; }
    /// The loader line (empty when there is none).
    std::string loader_text() const;
    /// The status line under the input: model, state, key hints.
    std::string status_text() const;
    const std::vector<transcript_item>& transcript() const noexcept { return transcript_; }
    /// The last transcript item is a reply that is still streaming.
    bool streaming() const noexcept { return streaming_; }
    /// Messages typed while busy, waiting to run as follow-ups.
    const std::vector<std::string>& queued() const noexcept { return queued_; }
    bool busy() const noexcept { return busy_; }
    /// When the screen changes next without any input (the countdown), if ever.
    std::optional<time_point> next_wakeup() const;
    /// Changes whenever anything shown changes.
    std::uint64_t revision() const noexcept { return revision_; }
    /// The last retryable error while a retry is pending (shown in the status line).
    const std::string& retry_error() const noexcept { return retry_error_; }

  private:
    void restore_escape();
    void add(transcript_item::kind k, std::string text);
    void end_stream();
    void flush_pending_error();
    std::int64_t wait_left_ms() const;

    esc_action esc_ = esc_action::none;
    std::optional<esc_action> saved_esc_;
    loader_kind loader_ = loader_kind::none;
    // retry loader
    int attempt_ = 0;
    int max_attempts_ = 0;
    time_point wait_start_{};
    std::int64_t wait_ms_ = 0;
    std::string retry_error_;
    // compaction loader
    bool overflow_ = false;

    time_point now_{};
    bool busy_ = false;
    bool streaming_ = false;
    bool ctrl_c_armed_ = false;
    std::optional<std::string> pending_error_;  // shown at settle unless a retry line replaces it
    std::vector<transcript_item> transcript_;
    std::vector<std::string> queued_;
    std::string model_label_;
    bool auto_retry_ = true;
    std::uint64_t revision_ = 1;
};

// ---- text: UTF-8, display width, wrapping --------------------------------------------------

namespace tui {

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

// ---- keys: what comes before the line editor ------------------------------------------------

/// Splits terminal input into the keys the UI handles itself and runs of input for the line
/// editor (libedit decodes those: arrows, Home/End, Alt+b, …). A lone ESC is only known to be
/// one when no byte follows soon: the shell calls flush() after a short timeout.
class key_decoder {
  public:
    struct key {
        enum class kind {
            editor,   ///< code points for the line editor (one complete key or text run)
            escape,   ///< a lone Esc
            enter,    ///< CR
            newline,  ///< insert a line break: Ctrl+J, Alt+Enter, Shift+Enter (CSI 13;2u)
            ctrl_c,
            ctrl_d,
            ctrl_z,
            paste,  ///< bracketed paste (ESC[200~ … ESC[201~): text, CR/CRLF → LF
            up,     ///< Up arrow (the shell moves between input lines or through history)
            down,
        };
        kind type = kind::editor;
        std::u32string chars;  ///< editor / paste
    };

    /// Feeds bytes; appends the complete keys to `out`.
    void feed(std::string_view bytes, std::vector<key>& out);
    /// No more bytes came: a pending lone ESC is an Esc key (an unfinished sequence is dropped;
    /// an unfinished UTF-8 sequence becomes U+FFFD). Inside a paste nothing is flushed.
    void flush(std::vector<key>& out);
    /// Bytes are held waiting for the rest of a sequence (arm the ESC timeout).
    bool pending() const noexcept { return !buf_.empty() && !in_paste_; }
    bool in_paste() const noexcept { return in_paste_; }

    /// Escape sequences passed to the editor; the shell binds them to editor functions.
    /// Others (unknown CSI / SS3 sequences) are dropped, so they never become text.
    static const std::vector<std::pair<std::string, std::string>>& editor_bindings();

  private:
    void parse(std::vector<key>& out, bool at_end);
    void emit_editor(std::vector<key>& out, char32_t c);

    std::string buf_;
    bool in_paste_ = false;
    std::string paste_;
};

// ---- the screen: a bottom region redrawn by difference --------------------------------------

/// How a row is drawn.
enum class row_style { plain, user, assistant, error, notice, tool, warning, rule, status, input };

struct screen_row {
    std::string text;  ///< sanitized, fits the width
    row_style style = row_style::plain;
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

}  // namespace tui

}  // namespace coagent

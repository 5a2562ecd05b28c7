#pragma once
// The event controller of the interactive terminal UI: session events, keys and clock ticks in;
// transcript, loader, status and the active Esc action out (policy §6). The other sans-io parts
// of the UI: tui_text.hpp (UTF-8 width, wrapping), tui_keys.hpp (the key decoder),
// tui_screen.hpp (the bottom region drawn by difference) and tui_layout.hpp (what the rows are).
// No terminal, no Asio, no libedit here: modes/src/interactive_mode.cpp performs what these
// decide.

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

/// The footer's figures over the session (issue 23): tokens in and out, the context the last
/// reply used out of the model's window, and the cost when the model has prices.
struct session_totals {
    std::int64_t input = 0, output = 0;  ///< summed over the replies (cache reads in input)
    std::int64_t context_tokens = 0;     ///< the last reply's whole context
    std::int64_t context_window = 0;     ///< 0: unknown
    double cost = 0;
    bool priced = false;  ///< the model has prices
};
/// The totals of `messages` (a session's history) on model `m`.
session_totals totals_of(const std::vector<message_ptr>& messages, const model_info& m);

/// A limit kind in words for the status line: "rate limited", "provider overloaded",
/// "connection lost", "usage limit", …; "" for none.
std::string_view limit_words(limit_kind k) noexcept;

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
        thinking,   ///< the model's thinking (grows while it streams), folded to one line or whole
                    ///< (Ctrl+T)
    };
    kind type = kind::notice;
    std::string text;
};

/// A slash command of the terminal UI (docs/tui.md "Commands"), for /help and Tab.
struct slash_command_info {
    std::string_view name;  ///< "/model"
    std::string_view args;  ///< "[provider/id]"
    std::string_view help;  ///< what it does
};
/// Every slash command, in the order /help lists them.
const std::vector<slash_command_info>& slash_commands();

/// Tab on the input: the completion of a slash command's name.
struct completion {
    std::string text;                     ///< the input after Tab ("/model " when unique)
    std::vector<std::string> candidates;  ///< the names that match (shown when more than one)
};
/// `input` is "/" and the start of a command name (no space yet): the unique name followed by a
/// space, or the longest common prefix of the names that match; nullopt otherwise.
std::optional<completion> complete_slash(std::string_view input);

// ---- image attachments (issue 24, docs/tui.md "Images") -------------------------------------

namespace tui {
/// The image files an input attaches, in order: each word that starts the input or follows a
/// space and is `@PATH` or `@"PATH"` (the reference's attachment syntax, `pi @shot.png`), where
/// PATH ends in .png, .jpg, .jpeg, .gif or .webp (any case). Trailing `,;:!?).` after such a
/// name are not part of it. Other words (`@alice`, `@notes.txt`) are text. No I/O.
std::vector<std::string> image_attachments(std::string_view input);
/// A paste that is one image file's path as terminals drop a file: surrounding spaces,
/// single or double quotes, `file://` (with %XX escapes) and backslash-escaped characters
/// removed. nullopt when it is not one path ending in an image extension. No I/O: the shell
/// checks that the file exists before it inserts attachment_token() instead of the text.
std::optional<std::string> pasted_image_path(std::string_view pasted);
/// `@PATH`, or `@"PATH"` when PATH holds a space: what image_attachments() reads back.
std::string attachment_token(std::string_view path);
/// The transcript's marker for an image of a user message: `[image: image/png, 12 KB]` (the
/// decoded size: bytes below 1 KB, then KB rounded up, MB with one decimal from 1 MB).
std::string image_marker(const image_block& image);
/// The attachments shown in the status line while the input holds them:
/// `1 image: shot.png` / `2 images: a.png, b.png` (file names, not directories); "" for none.
std::string attachment_status(const std::vector<std::string>& paths);
}  // namespace tui

/// What the interactive shell is asked to do after a key.
struct tui_command {
    enum class kind {
        none,         ///< nothing (the key changed only what is shown)
        edit,         ///< give the key to the line editor
        abort,        ///< session.abort()
        abort_retry,  ///< session.abort_retry()
        retry_now,    ///< session.retry_now(): Enter on an empty editor during a backoff
        submit,  ///< session.prompt(text, streaming_behavior::follow_up), or join_backoff(text)
                 ///< when `join`; clear the input
        clear_input,     ///< empty the line editor
        exit,            ///< leave (abort a running turn first)
        set_auto_retry,  ///< `/autoretry on|off` (toggle without an argument): set and persist
                         ///< retry.enabled, then report with on_auto_retry_set(); clear the input
        set_input,       ///< replace the input with `text` (Tab completion)
        set_model,       ///< `/model provider/id`: switch; empty `text`: list them (begin_pick)
        new_session,     ///< `/new`: a fresh session, the screen cleared
        resume,          ///< `/resume`: continue the session file `text`; empty: list them
        compact,         ///< `/compact [instructions]`: session.compact(text)
        show_settings,   ///< `/settings`: the effective retry settings and where each came from
        attach,          ///< Enter on a message with image attachments: load the files in
                         ///< `attachments` (the shell's I/O), then call on_attachments_loaded()
        redraw,          ///< Ctrl+T: draw the transcript again from its first item (the thinking
                         ///< blocks folded or expanded: thinking_expanded())
    };
    kind type = kind::none;
    /// submit: the message (also `/retry` resending the last failed prompt); set_auto_retry:
    /// the command typed; set_input: the new input; set_model: the selector; resume: the file;
    /// compact: the instructions
    std::string text;
    /// abort: the queued follow-ups, put back into the input (one a line) instead of dropped
    std::string restore;
    /// the input was a command (or a pick): remember it in the history and clear the input
    bool consume = false;
    bool queued = false;   ///< submit: the session is busy, the message runs after the turn
    bool join = false;     ///< submit during a backoff: the message joins it and retries now
    bool enabled = false;  ///< set_auto_retry: the new value
    std::vector<std::string> attachments;  ///< attach: the image files, as typed
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
    /// shows: then it retries now. An input whose first word is "/name" (letters and '-') is a
    /// command (slash_commands()); an unknown one is an error line, never a message.
    tui_command on_enter(std::string_view input);
    /// After `attach`: the files were read (`errors`: one text per file that could not be,
    /// naming it). No errors: the submit of `input` (the shell sends the images with it).
    /// Errors: a line each in the transcript (`Not sent: <error>`), nothing sent, the input
    /// kept (kind none).
    tui_command on_attachments_loaded(std::string input, const std::vector<std::string>& errors);
    /// Tab with the editor's text: set_input with the completed command name, else edit.
    tui_command on_tab(std::string_view input);
    /// A numbered list in the transcript (one notice: `title`, then "1. label" …, a line each); the
    /// next Enter with a number N gives `k` (set_model / resume) with values[N-1]; Esc or other
    /// input ends it.
    void begin_pick(tui_command::kind k, std::string title, std::vector<std::string> labels,
                    std::vector<std::string> values);
    bool picking() const noexcept { return pick_.has_value(); }
    /// /new and /resume: the transcript starts again (the shell redraws the screen).
    void reset_transcript();
    /// The wall clock (epoch ms) the park line counts to its `until` with (tests fix it).
    void set_wall_clock(std::function<std::int64_t()> f) { wall_ms_ = std::move(f); }
    /// The shell tells the current retry.enabled (the toggle flips it) …
    void set_auto_retry_state(bool enabled) { auto_retry_ = enabled; }
    /// … and how setting it went: `saved_to` is the settings file, `error` why saving failed.
    void on_auto_retry_set(bool enabled, const std::string& saved_to, const std::string& error);
    /// The first Ctrl+C clears the input; a second one within 2 s exits (after that it counts
    /// as a first one again).
    tui_command on_ctrl_c(bool input_empty, time_point now);
    tui_command on_ctrl_d(bool input_empty);
    /// Ctrl+T (the reference's "toggle thinking"): every thinking block switches between the
    /// folded one-line view and its whole text; the status line says which until the next key.
    tui_command on_ctrl_t();
    /// The thinking blocks are shown whole (Ctrl+T), not folded to one line (the default).
    bool thinking_expanded() const noexcept { return thinking_expanded_; }
    /// The shell tells the saved choice at start (setting tui.expandThinking).
    void set_thinking_expanded(bool on) noexcept { thinking_expanded_ = on; }
    /// Any other key (ends a Ctrl+C sequence).
    void on_other_key();
    void set_model_label(std::string label) {
        model_label_ = std::move(label);
        ++revision_;
    }
    /// The session's retry accounting, shown in the status line after the model (issue 22).
    void set_usage(const session_usage& u) {
        std::string label = usage_label(u);
        if (label == usage_label_) return;
        usage_label_ = std::move(label);
        ++revision_;
    }
    /// "2 retries · 18 tokens wasted · 3.0 s in backoff" ("$0.0012 wasted" when it cost);
    /// "" when nothing was retried or wasted.
    static std::string usage_label(const session_usage& u);
    /// The session's tokens, context use and cost, shown in the footer after the model.
    void set_totals(const session_totals& t) {
        std::string label = totals_label(t);
        if (label == totals_label_) return;
        totals_label_ = std::move(label);
        ++revision_;
    }
    /// "1.2k in · 340 out · 3% of 128k context · $0.0123" (the cost only when priced; the
    /// percentage only when the window is known).
    static std::string totals_label(const session_totals& t);
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
    /// The status line under the input: state and key hints (the last retryable error and its
    /// limit in words while a retry waits).
    std::string status_text() const;
    /// The footer under the status line: model, tokens, context, cost, retries (one place for
    /// both issue 22's accounting and issue 23's figures).
    std::string footer_text() const;
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
    std::int64_t wall_now_ms() const;

    esc_action esc_ = esc_action::none;
    std::optional<esc_action> saved_esc_;
    loader_kind loader_ = loader_kind::none;
    // retry loader
    int attempt_ = 0;
    int max_attempts_ = 0;
    time_point wait_start_{};
    std::int64_t wait_ms_ = 0;
    std::string retry_error_;
    // retry.longWait "park": the park's end (epoch ms) while the retry loader shows a park
    std::optional<std::int64_t> parked_until_;
    std::function<std::int64_t()> wall_ms_;  // empty: the system clock
    // compaction loader
    bool overflow_ = false;

    time_point now_{};
    bool busy_ = false;
    bool streaming_ = false;
    std::optional<std::string> pending_error_;  // shown at settle unless a retry line replaces it
    std::optional<time_point> ctrl_c_at_;       // the first Ctrl+C of a pair
    std::string hint_;                          // Tab's candidates, until the next key
    std::string last_failed_;                   // the last prompt that ended in an error
    struct pick_state {
        tui_command::kind k;
        std::vector<std::string> values;
    };
    std::optional<pick_state> pick_;
    tui_command slash(std::string_view input);
    tui_command submit(std::string text);
    std::optional<time_point> countdown_wakeup() const;
    std::optional<time_point> working_since_;  // the current turn's start (the spinner's clock)
    std::vector<transcript_item> transcript_;
    std::vector<std::string> queued_;
    std::string model_label_;
    std::string usage_label_;
    std::string totals_label_;
    limit_kind retry_limit_ = limit_kind::none;
    bool auto_retry_ = true;
    bool thinking_expanded_ = false;
    bool has_thinking_ = false;  // the transcript holds a thinking block (the status names Ctrl+T)
    std::uint64_t revision_ = 1;
};

/// The events that draw a resumed session's transcript as it was live, from its history (root
/// to leaf): the messages, the tool calls and results, an `auto_retry_start` after each failed
/// attempt that was retried (with its `discarded`, so the marker line comes back), the chains'
/// `retry_end` entries as `auto_retry_end` (`Retry failed…`), `compaction` entries as a
/// `compaction_end`, and an `agent_settled` before each new prompt and at the end (a failure
/// that was not retried shows its `Error:` line there). Feed them to tui_controller::on_event.
/// A failed attempt is taken as retried when an assistant message follows it before the next
/// user message, or when its chain ended "Retry cancelled" (cancelled in the backoff).
std::vector<event> resumed_transcript_events(const std::vector<history_entry>& entries);

}  // namespace coagent

#include <coagent/modes/app.hpp>
#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/tui_text.hpp>
#include <coagent/modes/wait_text.hpp>
#include <coagent/runtime/json_input.hpp>

#include <boost/json/serialize.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cwchar>

namespace coagent {

namespace {

constexpr std::string_view ellipsis = "\u2026";
constexpr auto ctrl_c_window = std::chrono::seconds(2);
constexpr auto spinner_frame = std::chrono::milliseconds(100);
constexpr std::string_view spinner[] = {"\u280b", "\u2819", "\u2839", "\u2838", "\u283c",
                                        "\u2834", "\u2826", "\u2827", "\u2807", "\u280f"};

// 340, 1.2k, 12k, 1.2M: a token count in a few columns
std::string compact_count(std::int64_t n) {
    if (n < 1000) return std::to_string(n);
    if (n < 10'000) return fmt::format("{:.1f}k", static_cast<double>(n) / 1e3);
    if (n < 1'000'000) return std::to_string(n / 1000) + "k";
    return fmt::format("{:.1f}M", static_cast<double>(n) / 1e6);
}

bool is_blank(std::string_view s) {
    return std::all_of(s.begin(), s.end(),
                       [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; });
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && is_blank(s.substr(0, 1))) s.remove_prefix(1);
    while (!s.empty() && is_blank(s.substr(s.size() - 1))) s.remove_suffix(1);
    return s;
}

// "/name" of an input whose first word is a slash and letters or '-' only, else empty
std::string_view command_name(std::string_view input) {
    if (input.size() < 2 || input[0] != '/') return {};
    std::size_t i = 1;
    while (i < input.size() && ((input[i] >= 'a' && input[i] <= 'z') || input[i] == '-')) ++i;
    if (i == 1 || (i < input.size() && !is_blank(input.substr(i, 1)))) return {};
    return input.substr(0, i);
}

const std::vector<slash_command_info> commands{
    {"/help", "", "list the commands"},
    {"/model", "[provider/id]", "switch the model (without one: a numbered list to pick from)"},
    {"/new", "", "start a new session"},
    {"/resume", "", "pick one of this directory's recent sessions to continue"},
    {"/compact", "[instructions]", "summarize the conversation so far to free the context"},
    {"/autoretry", "on|off", "turn automatic retry on or off (saved to the settings)"},
    {"/retry", "", "during a backoff: retry now; otherwise send the last failed prompt again"},
    {"/settings", "", "the effective retry settings and the file each value came from"},
    {"/quit", "", "exit coagent"},
};

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

const std::vector<slash_command_info>& slash_commands() {
    return commands;
}

std::optional<completion> complete_slash(std::string_view input) {
    if (input.empty() || input[0] != '/' || input.find_first_of(" \t\n") != input.npos)
        return std::nullopt;
    completion c;
    for (const auto& cmd : commands)
        if (cmd.name.starts_with(input)) c.candidates.emplace_back(cmd.name);
    if (c.candidates.empty()) return std::nullopt;
    if (c.candidates.size() == 1) {
        c.text = c.candidates.front() + " ";
        return c;
    }
    c.text = c.candidates.front();
    for (const auto& n : c.candidates) {
        std::size_t k = 0;
        while (k < c.text.size() && k < n.size() && c.text[k] == n[k]) ++k;
        c.text.resize(k);
    }
    return c;
}

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
    if (k == transcript_item::kind::thinking) has_thinking_ = true;
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
        if (!working_since_) working_since_ = now;  // one clock for the prompt, retries included
        retry_error_.clear();
        retry_limit_ = limit_kind::none;
        parked_until_.reset();
    } else if (const auto* rp = std::get_if<retry_parked_event>(&e)) {
        // retry.longWait "park": the retry loader becomes the park line (also for a park
        // re-entered from the session file, which has no auto_retry_start in this process)
        if (!saved_esc_) saved_esc_ = esc_;
        esc_ = esc_action::abort_retry;
        busy_ = true;
        loader_ = loader_kind::retry;
        parked_until_ = rp->until;
        wait_start_ = now;
        wait_ms_ = std::max<std::int64_t>(0, rp->until - wall_now_ms());
        retry_error_ = rp->error_message;
        retry_limit_ = rp->limit;
        pending_error_.reset();
    } else if (const auto* ms = std::get_if<message_start_event>(&e)) {
        if (ms->message && ms->message->role == message_role::user) {
            std::string text = text_of(*ms->message);
            if (auto it = std::find(queued_.begin(), queued_.end(), text); it != queued_.end())
                queued_.erase(it);
            end_stream();
            for (const auto& b : ms->message->content)  // its images, a marker line each
                if (const auto* img = std::get_if<image_block>(&b))
                    text += (text.empty() ? "" : "\n") + tui::image_marker(*img);
            add(transcript_item::kind::user, std::move(text));
        }
    } else if (const auto* mu = std::get_if<message_update_event>(&e)) {
        // thinking and reply text are items of their own: a thinking delta after text (or text
        // after thinking) starts the next item
        const auto k = mu->kind == delta_kind::thinking ? transcript_item::kind::thinking
                                                        : transcript_item::kind::assistant;
        if (!streaming_ || transcript_.empty() || transcript_.back().type != k) {
            add(k, {});
            streaming_ = true;
        }
        transcript_.back().text.append(mu->delta);
    } else if (const auto* me = std::get_if<message_end_event>(&e)) {
        if (!me->message || me->message->role != message_role::assistant) return;
        const message& m = *me->message;
        if (!streaming_) {
            // a reply that came without updates (a resumed session's) is shown whole: its
            // thinking blocks first, each an item, then its text
            for (const auto& b : m.content)
                if (const auto* th = std::get_if<thinking_block>(&b); th && !th->thinking.empty())
                    add(transcript_item::kind::thinking, th->thinking);
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
        retry_limit_ = rs->limit;
        pending_error_.reset();  // the loader shows that it failed; only a final failure is a line
        // the failed reply's partial text stays in the scrollback: one line says it is discarded
        if (auto marker =
                tui::discarded_marker(rs->discarded.text_chars, rs->discarded.tool_calls)) {
            end_stream();
            add(transcript_item::kind::notice, std::move(*marker));
        }
    } else if (const auto* re = std::get_if<auto_retry_end_event>(&e)) {
        restore_escape();  // only if auto_retry_start saved one (maxRetries 0: end without start)
        parked_until_.reset();
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
        working_since_.reset();
        saved_esc_.reset();
        esc_ = esc_action::none;
        loader_ = loader_kind::none;
        retry_error_.clear();
    }
}

void tui_controller::on_tick(time_point now) {
    const bool timed = loader_ == loader_kind::retry || loader_ == loader_kind::working;
    const std::string before = timed ? loader_text() : std::string();
    now_ = now;
    if (timed && loader_text() != before) ++revision_;      // the countdown, the spinner
    if (ctrl_c_at_ && now - *ctrl_c_at_ > ctrl_c_window) {  // the pair's window has passed
        ctrl_c_at_.reset();
        ++revision_;
    }
}

void tui_controller::on_prompt_done(const std::string& text, const prompt_result& r) {
    if (r.outcome == prompt_result::status::failed) last_failed_ = text;
    if (r.outcome == prompt_result::status::succeeded && last_failed_ == text) last_failed_.clear();
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
            if (pick_) {
                pick_.reset();
                add(transcript_item::kind::notice, "Cancelled");
            }
            break;
        case esc_action::abort:
            c.type = tui_command::kind::abort;
            // the follow-ups waiting go back into the input (the abort drops them from the
            // session; with queued_ empty their completion adds no "dropped" line)
            for (const auto& q : queued_) {
                if (!c.restore.empty()) c.restore += "\n";
                c.restore += q;
            }
            if (!queued_.empty()) {
                queued_.clear();
                ++revision_;
            }
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
    if (is_blank(input)) {
        if (loader_ == loader_kind::retry) c.type = tui_command::kind::retry_now;
        return c;
    }
    if (pick_) {
        const std::string_view t = trim(input);
        std::size_t n = 0;
        const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
        auto pick = std::move(*pick_);
        pick_.reset();
        ++revision_;
        if (ec == std::errc() && ptr == t.data() + t.size() && n >= 1 && n <= pick.values.size()) {
            c.type = pick.k;
            c.text = pick.values[n - 1];
            c.consume = true;
            return c;
        }
        // anything else ends the pick and is what it is
    }
    if (!command_name(input).empty()) {
        c = slash(input);
        c.consume = true;
        return c;
    }
    if (auto files = tui::image_attachments(input); !files.empty()) {
        c.type = tui_command::kind::attach;  // nothing changes until the files are read
        c.text = std::string(input);
        c.attachments = std::move(files);
        return c;
    }
    return submit(std::string(input));
}

tui_command tui_controller::on_attachments_loaded(std::string input,
                                                  const std::vector<std::string>& errors) {
    if (errors.empty()) return submit(std::move(input));
    for (const auto& e : errors) add(transcript_item::kind::error, "Not sent: " + e);
    return tui_command{};
}

tui_command tui_controller::submit(std::string text) {
    tui_command c;
    c.type = tui_command::kind::submit;
    c.text = std::move(text);
    // during a backoff a message is a reason to try now: it joins the chain (issue 26)
    c.join = busy_ && loader_ == loader_kind::retry;
    c.queued = busy_ && !c.join;
    if (c.join) {
        // nothing to queue: the message's own events show it, the retry starts at once
    } else if (busy_) {
        queued_.push_back(c.text);
    } else {
        busy_ = true;  // a second Enter before the turn starts is queued behind it
        if (esc_ == esc_action::none) esc_ = esc_action::abort;
        loader_ = loader_kind::working;
        working_since_.reset();  // the clock starts at agent_start
    }
    ++revision_;
    return c;
}

tui_command tui_controller::slash(std::string_view input) {
    const std::string_view name = command_name(input);
    const std::string arg(trim(input.substr(name.size())));
    tui_command c;
    const auto error = [&](std::string text) {
        add(transcript_item::kind::error, std::move(text));
        return tui_command{};
    };
    const auto idle_only = [&]() -> bool {
        if (!busy_) return true;
        error(std::string(name) + ": wait for the current turn to end (or press Esc)");
        return false;
    };
    if (name == "/help") {
        std::string text = "Commands (Tab completes a name):";
        for (const auto& cmd : commands)
            text += "\n  " + std::string(cmd.name) + (cmd.args.empty() ? "" : " ") +
                    std::string(cmd.args) + " \u2014 " + std::string(cmd.help);
        // the keys that are not in the status line (the reference's hotkeys list has them)
        text +=
            "\nKeys: ctrl+t expands or folds the thinking blocks \u00b7 @FILE attaches an image "
            "(.png .jpg .gif .webp) \u00b7 ctrl+j new line \u00b7 ctrl+r history search \u00b7 "
            "ctrl+z suspend";
        add(transcript_item::kind::notice, std::move(text));
        return c;
    }
    if (name == "/model") {
        if (!arg.empty() &&
            (arg.find('/') == 0 || arg.find('/') == std::string::npos || arg.back() == '/'))
            return error("Usage: /model [provider/id], found \"" + arg + "\"");
        c.type = tui_command::kind::set_model;
        c.text = arg;
        return c;
    }
    if (name == "/new" || name == "/resume") {
        if (!arg.empty()) return error("Usage: " + std::string(name) + " (no argument)");
        if (!idle_only()) return {};
        c.type = name == "/new" ? tui_command::kind::new_session : tui_command::kind::resume;
        return c;
    }
    if (name == "/compact") {
        if (!idle_only()) return {};
        c.type = tui_command::kind::compact;
        c.text = arg;
        return c;
    }
    if (name == "/autoretry") {
        if (!arg.empty() && arg != "on" && arg != "off")
            return error("Usage: /autoretry on|off, found \"" + arg + "\"");
        c.type = tui_command::kind::set_auto_retry;
        c.text = std::string(input);
        c.enabled = arg.empty() ? !auto_retry_ : arg == "on";
        return c;
    }
    if (name == "/retry") {
        if (!arg.empty())
            return error(
                "Usage: /retry (no argument); /autoretry on|off turns automatic retry "
                "on or off");
        if (loader_ == loader_kind::retry) {
            c.type = tui_command::kind::retry_now;
            return c;
        }
        if (busy_) return error("/retry: a request is running; nothing failed yet");
        if (last_failed_.empty()) return error("Nothing to retry: no prompt has failed");
        if (auto files = tui::image_attachments(last_failed_); !files.empty()) {
            c.type = tui_command::kind::attach;  // its images are read again
            c.text = last_failed_;
            c.attachments = std::move(files);
            return c;
        }
        c = submit(last_failed_);
        return c;
    }
    if (name == "/settings") {
        c.type = tui_command::kind::show_settings;
        return c;
    }
    if (name == "/quit") {
        c.type = tui_command::kind::exit;
        return c;
    }
    return error("Unknown command: " + std::string(name) +
                 " (/help lists the commands; it was not sent to the model)");
}

tui_command tui_controller::on_tab(std::string_view input) {
    tui_command c;
    const auto done = complete_slash(input);
    if (!done) {
        c.type = tui_command::kind::edit;
        return c;
    }
    on_other_key();
    c.type = tui_command::kind::set_input;
    c.text = done->text;
    if (done->candidates.size() > 1) {
        for (const auto& n : done->candidates) hint_ += (hint_.empty() ? "" : "  ") + n;
        ++revision_;
    }
    return c;
}

void tui_controller::begin_pick(tui_command::kind k, std::string title,
                                std::vector<std::string> labels, std::vector<std::string> values) {
    for (std::size_t i = 0; i < labels.size(); ++i)
        title += "\n" + std::to_string(i + 1) + ". " + labels[i];
    add(transcript_item::kind::notice, std::move(title));
    pick_ = pick_state{k, std::move(values)};
    ++revision_;
}

void tui_controller::reset_transcript() {
    transcript_.clear();
    has_thinking_ = false;
    streaming_ = false;
    pending_error_.reset();
    last_failed_.clear();
    ++revision_;
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

tui_command tui_controller::on_ctrl_c(bool input_empty, time_point now) {
    (void)input_empty;
    tui_command c;
    if (ctrl_c_at_ && now - *ctrl_c_at_ <= ctrl_c_window) {
        c.type = tui_command::kind::exit;
        return c;
    }
    ctrl_c_at_ = now;
    hint_.clear();
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

tui_command tui_controller::on_ctrl_t() {
    on_other_key();
    thinking_expanded_ = !thinking_expanded_;
    hint_ = thinking_expanded_ ? "Thinking blocks: expanded (ctrl+t folds them)"
                               : "Thinking blocks: folded (ctrl+t expands them)";
    ++revision_;
    tui_command c;
    c.type = tui_command::kind::redraw;
    return c;
}

void tui_controller::on_other_key() {
    if (ctrl_c_at_ || !hint_.empty()) {
        ctrl_c_at_.reset();
        hint_.clear();
        ++revision_;
    }
}

std::int64_t tui_controller::wall_now_ms() const {
    if (wall_ms_) return wall_ms_();
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
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
    std::optional<time_point> at = countdown_wakeup();
    if (loader_ == loader_kind::working && working_since_) {  // the spinner's next frame
        const auto frames = (now_ - *working_since_) / spinner_frame;
        const time_point next = *working_since_ + (frames + 1) * spinner_frame;
        if (!at || next < *at) at = next;
    }
    if (ctrl_c_at_) {  // "Press Ctrl+C again" goes away when the window has passed
        const time_point end = *ctrl_c_at_ + ctrl_c_window + std::chrono::milliseconds(1);
        if (!at || end < *at) at = end;
    }
    return at;
}

std::optional<tui_controller::time_point> tui_controller::countdown_wakeup() const {
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
        case loader_kind::working: {
            // "⠏ Working… 3s": a frame every 100 ms, the seconds since the prompt's first start
            const auto elapsed = working_since_ && now_ > *working_since_
                                     ? now_ - *working_since_
                                     : time_point::duration::zero();
            const auto frame =
                static_cast<std::size_t>(elapsed / spinner_frame) % std::size(spinner);
            const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count();
            return std::string(spinner[frame]) + " Working\u2026 " + format_elapsed(ms) +
                   " (esc to interrupt)";
        }
        case loader_kind::retry:
            if (parked_until_)
                return park_line(retry_limit_, *parked_until_, wait_left_ms(), wall_now_ms());
            return "Retrying (" + std::to_string(attempt_) + "/" + std::to_string(max_attempts_) +
                   ") in " + format_wait(wait_left_ms()) + "\u2026 (esc to cancel)";
        case loader_kind::compaction:
            return overflow_ ? "Context overflow detected, compacting\u2026 (esc to cancel)"
                             : "Compacting context\u2026 (esc to cancel)";
    }
    return {};
}

std::string tui_controller::usage_label(const session_usage& u) {
    const std::int64_t wasted =
        u.wasted.input + u.wasted.output + u.wasted.cache_read + u.wasted.cache_write;
    if (u.retries == 0 && wasted == 0 && u.backoff_ms == 0) return {};
    std::string s = std::to_string(u.retries) + (u.retries == 1 ? " retry" : " retries");
    if (wasted > 0) s += " \u00b7 " + std::to_string(wasted) + " tokens wasted";
    if (u.wasted.cost.total > 0) s += fmt::format(" \u00b7 ${:.4f} wasted", u.wasted.cost.total);
    if (u.backoff_ms > 0)
        s += fmt::format(" \u00b7 {:.1f} s in backoff", static_cast<double>(u.backoff_ms) / 1e3);
    return s;
}

std::string tui_controller::totals_label(const session_totals& t) {
    std::string s = compact_count(t.input) + " in \u00b7 " + compact_count(t.output) + " out";
    if (t.context_window > 0) {
        const double pct =
            100.0 * static_cast<double>(t.context_tokens) / static_cast<double>(t.context_window);
        s += " \u00b7 " + fmt::format("{:.0f}", pct) + "% of " + compact_count(t.context_window) +
             " context";
    }
    if (t.priced)
        s += t.cost < 1 ? fmt::format(" \u00b7 ${:.4f}", t.cost)
                        : fmt::format(" \u00b7 ${:.2f}", t.cost);
    return s;
}

std::string tui_controller::footer_text() const {
    std::string s = model_label_;
    for (const std::string* part : {&totals_label_, &usage_label_})
        if (!part->empty()) s += (s.empty() ? "" : " \u00b7 ") + *part;
    return s;
}

std::string_view limit_words(limit_kind k) noexcept {
    switch (k) {
        case limit_kind::rate:
            return "rate limited";
        case limit_kind::quota:
            return "usage limit";
        case limit_kind::billing:
            return "out of credit";
        case limit_kind::capacity:
            return "provider overloaded";
        case limit_kind::server:
            return "provider error";
        case limit_kind::transport:
            return "connection lost";
        case limit_kind::none:
            break;
    }
    return {};
}

session_totals totals_of(const std::vector<message_ptr>& messages, const model_info& m) {
    session_totals t;
    t.context_window = m.context_window;
    t.priced =
        m.cost.input > 0 || m.cost.output > 0 || m.cost.cache_read > 0 || m.cost.cache_write > 0;
    for (const auto& msg : messages) {
        if (!msg || msg->role != message_role::assistant) continue;
        const token_usage& u = msg->usage;
        t.input = saturating_add(t.input, saturating_add(u.input, u.cache_read));
        t.output = saturating_add(t.output, u.output);
        t.cost += u.cost.total;
        const std::int64_t whole =
            u.total_tokens > 0 ? u.total_tokens
                               : saturating_add(saturating_add(u.input, u.output),
                                                saturating_add(u.cache_read, u.cache_write));
        if (whole > 0) t.context_tokens = whole;  // the last reply that reported its usage
    }
    return t;
}

std::string tui_controller::status_text() const {
    if (ctrl_c_at_) return "Press Ctrl+C again to exit";
    if (!hint_.empty()) return hint_;
    if (pick_) return "a number and enter: pick \u00b7 esc: cancel";
    std::string s;  // the model and the figures are the footer's
    const auto sep = [&] {
        if (!s.empty()) s += " \u00b7 ";
    };
    if (!queued_.empty()) {
        sep();
        s += std::to_string(queued_.size()) + " queued";
    }
    if (has_thinking_ && loader_ != loader_kind::retry) {  // the key that shows them (issue 24)
        sep();
        s += thinking_expanded_ ? "ctrl+t: fold thinking" : "ctrl+t: expand thinking";
    }
    sep();
    if (loader_ == loader_kind::retry) {  // "… · rate limited · 429 Too Many Requests"
        s += "enter: retry now \u00b7 esc: cancel the retry";
        if (const auto words = limit_words(retry_limit_); !words.empty())
            s += " \u00b7 " + std::string(words);
        if (!retry_error_.empty()) s += " \u00b7 " + one_line(retry_error_, 160);
    } else if (busy_) {
        s += "esc: interrupt \u00b7 enter: queue a follow-up";
    } else {
        s += "enter: send \u00b7 ctrl+j: new line \u00b7 ctrl+c twice or ctrl+d: exit";
    }
    return s;
}

// ---- image attachments -----------------------------------------------------------------------

namespace tui {

namespace {

bool has_image_extension(std::string_view path) {
    const auto dot = path.rfind('.');
    if (dot == std::string_view::npos || path.find('/', dot) != std::string_view::npos)
        return false;
    std::string ext(path.substr(dot + 1));
    for (char& ch : ext) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return ext == "png" || ext == "jpg" || ext == "jpeg" || ext == "gif" || ext == "webp";
}

bool is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

}  // namespace

std::vector<std::string> image_attachments(std::string_view input) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < input.size(); ++i) {
        if (input[i] != '@' || (i > 0 && !is_space(input[i - 1]))) continue;
        std::string path;
        if (i + 1 < input.size() && input[i + 1] == '"') {
            const auto close = input.find('"', i + 2);
            if (close == std::string_view::npos) continue;
            path = std::string(input.substr(i + 2, close - i - 2));
            i = close;
        } else {
            std::size_t end = i + 1;
            while (end < input.size() && !is_space(input[end])) ++end;
            path = std::string(input.substr(i + 1, end - i - 1));
            i = end - 1;
            while (!path.empty() && !has_image_extension(path) &&
                   std::string_view(",;:!?).").find(path.back()) != std::string_view::npos)
                path.pop_back();
        }
        if (has_image_extension(path)) out.push_back(std::move(path));
    }
    return out;
}

std::optional<std::string> pasted_image_path(std::string_view pasted) {
    while (!pasted.empty() && is_space(pasted.front())) pasted.remove_prefix(1);
    while (!pasted.empty() && is_space(pasted.back())) pasted.remove_suffix(1);
    if (pasted.size() >= 2 && (pasted.front() == '\'' || pasted.front() == '"') &&
        pasted.back() == pasted.front()) {
        pasted.remove_prefix(1);
        pasted.remove_suffix(1);
    }
    std::string path;
    if (pasted.substr(0, 7) == "file://") {
        pasted.remove_prefix(7);
        for (std::size_t i = 0; i < pasted.size(); ++i) {
            const auto hex = [](char h) {
                return h >= '0' && h <= '9'   ? h - '0'
                       : h >= 'a' && h <= 'f' ? h - 'a' + 10
                       : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                              : -1;
            };
            if (pasted[i] == '%' && i + 2 < pasted.size() && hex(pasted[i + 1]) >= 0 &&
                hex(pasted[i + 2]) >= 0) {
                path.push_back(static_cast<char>(hex(pasted[i + 1]) * 16 + hex(pasted[i + 2])));
                i += 2;
            } else {
                path.push_back(pasted[i]);
            }
        }
    } else {
        for (std::size_t i = 0; i < pasted.size(); ++i) {
            if (pasted[i] == '\\' && i + 1 < pasted.size()) ++i;  // "my\ shot.png"
            path.push_back(pasted[i]);
        }
    }
    if (path.empty() || path.find('\n') != std::string::npos || !has_image_extension(path))
        return std::nullopt;
    return path;
}

std::string attachment_token(std::string_view path) {
    if (path.find(' ') == std::string_view::npos && path.find('\t') == std::string_view::npos)
        return "@" + std::string(path);
    return "@\"" + std::string(path) + "\"";
}

std::string image_marker(const image_block& image) {
    const std::string& d = image.data;
    std::size_t pad = 0;
    if (!d.empty() && d.back() == '=') pad = d.size() >= 2 && d[d.size() - 2] == '=' ? 2 : 1;
    const std::size_t bytes = d.size() / 4 * 3 - std::min(pad, d.size() / 4 * 3);
    std::string size;
    if (bytes < 1024)
        size = std::to_string(bytes) + " B";
    else if (bytes < 1024 * 1024)
        size = std::to_string((bytes + 1023) / 1024) + " KB";
    else
        size = fmt::format("{:.1f} MB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return "[image: " + image.mime_type + ", " + size + "]";
}

std::string attachment_status(const std::vector<std::string>& paths) {
    if (paths.empty()) return {};
    std::string s = std::to_string(paths.size()) + (paths.size() == 1 ? " image: " : " images: ");
    for (std::size_t k = 0; k < paths.size(); ++k) {
        const auto slash = paths[k].rfind('/');
        s += (k ? ", " : "") + (slash == std::string::npos ? paths[k] : paths[k].substr(slash + 1));
    }
    return s;
}

}  // namespace tui

// ---- a resumed session's transcript ---------------------------------------------------------

namespace {

// the failed attempt at entries[i] was retried: an assistant message (the next attempt) follows
// before the next user message, or its chain was cancelled in the backoff
bool retried(const std::vector<history_entry>& entries, std::size_t i) {
    for (std::size_t j = i + 1; j < entries.size(); ++j) {
        const history_entry& e = entries[j];
        if (e.type == "retry_end") {
            const auto* fe = e.raw.if_contains("finalError");
            return fe && fe->is_string() && fe->get_string() == retry_cancelled_text;
        }
        if (e.type == "message" && e.msg) return e.msg->role == message_role::assistant;
    }
    return false;
}

}  // namespace

std::vector<event> resumed_transcript_events(const std::vector<history_entry>& entries) {
    std::vector<event> out;
    bool open = false;  // a prompt is being drawn: it settles before the next one
    const auto settle = [&] {
        if (open) out.emplace_back(agent_settled_event{});
        open = false;
    };
    for (std::size_t i = 0; i < entries.size(); ++i) {
        const history_entry& e = entries[i];
        if (e.type == "message" && e.msg) {
            const message& m = *e.msg;
            if (m.role == message_role::user) {
                settle();
                out.emplace_back(message_start_event{e.msg});
            } else if (m.role == message_role::assistant) {
                out.emplace_back(message_end_event{e.msg});
                if (!is_failed_assistant(m))
                    for (const tool_call_block* c : tool_calls_of(m))
                        out.emplace_back(tool_execution_start_event{c->id, c->name, c->arguments});
                if (m.stop == stop_reason::error && retried(entries, i)) {
                    auto_retry_start_event start;
                    start.error_message = m.error_message.value_or("");
                    start.discarded = discarded_of(&m);
                    out.emplace_back(std::move(start));
                }
            } else {
                json::object text{{"type", "text"}, {"text", text_of(m)}};
                json::object result;
                result["content"] = json::array{std::move(text)};
                out.emplace_back(tool_execution_end_event{m.tool_call_id, m.tool_name,
                                                          std::move(result), m.is_error});
            }
            open = true;
        } else if (e.type == "retry_end") {
            auto_retry_end_event end;
            if (const auto* v = e.raw.if_contains("success"); v && v->is_bool())
                end.success = v->get_bool();
            if (const auto* v = e.raw.if_contains("attempt"); v && v->is_int64())
                end.attempt = static_cast<int>(v->get_int64());
            if (const auto* v = e.raw.if_contains("finalError"); v && v->is_string())
                end.final_error = std::string(v->get_string());
            out.emplace_back(std::move(end));
        } else if (e.type == "compaction") {
            compaction_end_event done;
            done.reason = "manual";
            out.emplace_back(std::move(done));
        }
    }
    settle();
    return out;
}

}  // namespace coagent

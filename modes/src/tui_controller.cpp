#include <coagent/modes/app.hpp>
#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/tui_text.hpp>
#include <coagent/modes/wait_text.hpp>

#include <boost/json/serialize.hpp>

#include <fmt/format.h>

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
        // the failed reply's partial text stays in the scrollback: one line says it is discarded
        if (auto marker =
                tui::discarded_marker(rs->discarded.text_chars, rs->discarded.tool_calls)) {
            end_stream();
            add(transcript_item::kind::notice, std::move(*marker));
        }
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

std::string tui_controller::status_text() const {
    if (ctrl_c_armed_) return "Press Ctrl+C again to exit";
    std::string s = model_label_;
    const auto sep = [&] {
        if (!s.empty()) s += " \u00b7 ";
    };
    if (!usage_label_.empty()) {
        sep();
        s += usage_label_;
    }
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

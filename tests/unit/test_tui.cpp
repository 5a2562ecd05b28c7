// Interactive mode without a terminal (issue 5): the event controller (policy §6: the retry
// loader, the Esc handler saved and restored, the failure line), keys, UTF-8 text layout, the
// key splitter in front of libedit, and the bottom-region renderer checked on a small
// terminal emulator. The real terminal is tested under tmux (tests/integration/tui/*.sh).

#include <coagent/modes/app.hpp>
#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/tui_keys.hpp>
#include <coagent/modes/tui_layout.hpp>
#include <coagent/modes/tui_markdown.hpp>
#include <coagent/modes/tui_screen.hpp>
#include <coagent/modes/tui_text.hpp>
#include <coagent/modes/wait_text.hpp>

#include "support/session_harness.hpp"

#include <catch2/catch.hpp>

#include <clocale>
#include <random>

using namespace coagent;
using namespace std::chrono_literals;
using key = tui::key_decoder::key;
using kind = transcript_item::kind;

namespace {

// wcwidth needs a UTF-8 LC_CTYPE (interactive mode sets one up the same way)
const bool utf8_locale = [] {
    return std::setlocale(LC_CTYPE, "C.UTF-8") != nullptr ||
           std::setlocale(LC_CTYPE, "en_US.UTF-8") != nullptr;
}();

using tp = tui_controller::time_point;
const tp t0 = tp{} + 1000h;

message_ptr user_msg(std::string text) {
    return std::make_shared<message>(make_user_message(std::move(text)));
}

message_ptr assistant_msg(std::string text, stop_reason stop = stop_reason::stop,
                          std::optional<std::string> error = std::nullopt) {
    auto m = std::make_shared<message>();
    m->role = message_role::assistant;
    if (!text.empty()) m->content.emplace_back(text_block{std::move(text)});
    m->stop = stop;
    m->error_message = std::move(error);
    return m;
}

/// Drives a controller with the event sequences of docs/retry-policy.md.
struct driver {
    tui_controller c;
    tp now = t0;

    void ev(const event& e) { c.on_event(e, now); }
    void start_prompt(const std::string& text) {
        auto cmd = c.on_enter(text);
        REQUIRE(cmd.type == tui_command::kind::submit);
        ev(agent_start_event{});
        ev(turn_start_event{});
        auto u = user_msg(text);
        ev(message_start_event{u});
        ev(message_end_event{u});
    }
    void failed_attempt(const std::string& error, bool will_retry) {
        auto m = assistant_msg("", stop_reason::error, error);
        ev(message_start_event{m});
        ev(message_end_event{m});
        turn_end_event te;
        te.message = m;
        ev(te);
        agent_end_event ae;
        ae.will_retry = will_retry;
        ev(ae);
    }
    void retry_start(int attempt, int max, std::int64_t delay_ms, const std::string& error) {
        auto_retry_start_event s;
        s.attempt = attempt;
        s.max_attempts = max;
        s.delay_ms = delay_ms;
        s.error_message = error;
        ev(s);
    }
    void retry_end(bool success, int attempt,
                   std::optional<std::string> final_error = std::nullopt) {
        auto_retry_end_event e;
        e.success = success;
        e.attempt = attempt;
        e.final_error = std::move(final_error);
        ev(e);
    }
    void stream_reply(const std::vector<std::string>& chunks, bool retried_success_at = false,
                      int attempt = 0) {
        std::string all;
        for (const auto& ch : chunks) all += ch;
        auto partial = assistant_msg("");
        ev(message_start_event{partial});
        for (const auto& ch : chunks) {
            message_update_event u;
            u.message = partial;
            u.delta = ch;
            ev(u);
        }
        auto done = assistant_msg(all);
        ev(message_end_event{done});
        if (retried_success_at) retry_end(true, attempt);
        turn_end_event te;
        te.message = done;
        ev(te);
        ev(agent_end_event{});
    }
    void settle() { ev(agent_settled_event{}); }
    void advance(std::chrono::milliseconds d) {
        now += d;
        c.on_tick(now);
    }
    std::vector<std::string> lines(kind k) const {
        std::vector<std::string> out;
        for (const auto& i : c.transcript())
            if (i.type == k) out.push_back(i.text);
        return out;
    }
    bool has_line_containing(std::string_view s) const {
        for (const auto& i : c.transcript())
            if (i.text.find(s) != std::string::npos) return true;
        return false;
    }
};

}  // namespace

// ---- policy §6: the loader and the Esc handler ------------------------------------------------

TEST_CASE("tui: Enter during the retry loader: empty retries now, text joins the backoff",
          "[tui][retry-now]") {
    REQUIRE(utf8_locale);
    driver d;
    CHECK(d.c.on_enter("").type == tui_command::kind::none);  // idle: nothing
    d.start_prompt("hello");
    CHECK(d.c.on_enter("  ").type == tui_command::kind::none);  // streaming: nothing
    d.failed_attempt("503 Service Unavailable", true);
    d.retry_start(1, 3, 2000, "503 Service Unavailable");
    CHECK(d.c.on_enter("").type == tui_command::kind::retry_now);
    CHECK(d.c.on_enter(" \t").type == tui_command::kind::retry_now);
    CHECK(d.c.status_text().find("enter: retry now \u00b7 esc: cancel the retry") !=
          std::string::npos);
    // the loader keeps the policy's text
    CHECK(d.c.loader_text() == "Retrying (1/3) in 2s\u2026 (esc to cancel)");
    // text typed during the backoff joins it and retries now (issue 26): not queued
    auto q = d.c.on_enter("later");
    CHECK(q.type == tui_command::kind::submit);
    CHECK(q.join);
    CHECK_FALSE(q.queued);
    CHECK(d.c.queued().empty());
    d.ev(agent_start_event{});
    CHECK(d.c.on_enter("").type == tui_command::kind::none);  // the retry runs: nothing
    // while the retried attempt streams, text is a queued follow-up again
    auto f = d.c.on_enter("after");
    CHECK(f.queued);
    CHECK_FALSE(f.join);
}

TEST_CASE(
    "tui: two errors then success — loader per attempt, Esc handler saved and restored, no failure "
    "line") {
    REQUIRE(utf8_locale);
    driver d;
    CHECK(d.c.escape_action() == esc_action::none);
    CHECK(d.c.loader() == tui_controller::loader_kind::none);

    d.start_prompt("hello");
    CHECK(d.c.escape_action() == esc_action::abort);
    CHECK(d.c.loader_text() == "\u280b Working\u2026 0s (esc to interrupt)");

    d.failed_attempt("503 Service Unavailable", true);
    d.retry_start(1, 3, 2000, "503 Service Unavailable");
    CHECK(d.c.escape_action() == esc_action::abort_retry);
    CHECK(d.c.saved_escape_action() == esc_action::abort);
    CHECK(d.c.loader() == tui_controller::loader_kind::retry);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 2s\u2026 (esc to cancel)");
    CHECK(d.c.status_text().find("503 Service Unavailable") != std::string::npos);
    d.advance(1000ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 1s\u2026 (esc to cancel)");

    d.advance(1000ms);
    d.ev(agent_start_event{});  // the retry begins: the handler comes back
    CHECK(d.c.escape_action() == esc_action::abort);
    CHECK_FALSE(d.c.saved_escape_action());
    CHECK(d.c.loader_text() == "\u280b Working\u2026 2s (esc to interrupt)");
    d.ev(turn_start_event{});
    d.failed_attempt("503 Service Unavailable", true);
    d.retry_start(2, 3, 4000, "503 Service Unavailable");
    CHECK(d.c.saved_escape_action() == esc_action::abort);  // not abort_retry (pi #578)
    CHECK(d.c.loader_text() == "Retrying (2/3) in 4s\u2026 (esc to cancel)");
    d.advance(4000ms);
    d.ev(agent_start_event{});
    d.ev(turn_start_event{});
    d.stream_reply({"Hello", " there"}, true, 2);
    CHECK(d.c.escape_action() == esc_action::abort);
    d.settle();

    CHECK(d.c.escape_action() == esc_action::none);
    CHECK(d.c.loader() == tui_controller::loader_kind::none);
    CHECK(d.lines(kind::assistant) == std::vector<std::string>{"Hello there"});
    CHECK(d.lines(kind::user) == std::vector<std::string>{"hello"});
    CHECK(d.lines(kind::error).empty());  // neither "Retry failed" nor a per-attempt error
    CHECK_FALSE(d.has_line_containing("Retry failed"));
}

TEST_CASE("tui: the countdown shows ceil(seconds left) and wakes exactly when the number changes") {
    driver d;
    d.start_prompt("x");
    d.failed_attempt("429 Too Many Requests", true);
    d.retry_start(1, 3, 3000, "429 Too Many Requests");
    CHECK(d.c.loader_text() == "Retrying (1/3) in 3s\u2026 (esc to cancel)");
    REQUIRE(d.c.next_wakeup());
    CHECK(*d.c.next_wakeup() == t0 + 1000ms);
    d.advance(999ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 3s\u2026 (esc to cancel)");
    auto rev = d.c.revision();
    d.advance(1ms);
    CHECK(d.c.revision() != rev);  // the shown number changed
    CHECK(d.c.loader_text() == "Retrying (1/3) in 2s\u2026 (esc to cancel)");
    CHECK(*d.c.next_wakeup() == t0 + 2000ms);
    rev = d.c.revision();
    d.advance(400ms);
    CHECK(d.c.revision() == rev);  // nothing to redraw
    d.advance(600ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 1s\u2026 (esc to cancel)");
    CHECK(*d.c.next_wakeup() == t0 + 2100ms);  // under a second: tenths
    d.advance(100ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 0.9s\u2026 (esc to cancel)");
    CHECK(*d.c.next_wakeup() == t0 + 2200ms);
    d.advance(899ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 0.1s\u2026 (esc to cancel)");
    CHECK(*d.c.next_wakeup() == t0 + 3000ms);
    d.advance(1ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 0s\u2026 (esc to cancel)");
    CHECK_FALSE(d.c.next_wakeup());

    SECTION("a delay that is not whole seconds rounds up") {
        driver e;
        e.start_prompt("x");
        e.failed_attempt("503", true);
        e.retry_start(1, 3, 2500, "503");
        CHECK(e.c.loader_text() == "Retrying (1/3) in 3s\u2026 (esc to cancel)");
        CHECK(*e.c.next_wakeup() == t0 + 500ms);
        e.advance(500ms);
        CHECK(e.c.loader_text() == "Retrying (1/3) in 2s\u2026 (esc to cancel)");
    }
    SECTION("a zero delay shows 0s and never wakes") {
        driver e;
        e.start_prompt("x");
        e.failed_attempt("503", true);
        e.retry_start(1, 3, 0, "503");
        CHECK(e.c.loader_text() == "Retrying (1/3) in 0s\u2026 (esc to cancel)");
        CHECK_FALSE(e.c.next_wakeup());
    }
}

TEST_CASE("format_wait: the documented forms, rounded up, saturating (issue 15)", "[wait]") {
    CHECK(format_wait(-5) == "0s");
    CHECK(format_wait(0) == "0s");
    CHECK(format_wait(1) == "0.1s");
    CHECK(format_wait(100) == "0.1s");
    CHECK(format_wait(101) == "0.2s");
    CHECK(format_wait(300) == "0.3s");
    CHECK(format_wait(900) == "0.9s");
    CHECK(format_wait(901) == "1s");
    CHECK(format_wait(1000) == "1s");
    CHECK(format_wait(1001) == "2s");
    CHECK(format_wait(2000) == "2s");
    CHECK(format_wait(59'000) == "59s");
    CHECK(format_wait(59'001) == "1m 0s");
    CHECK(format_wait(60'000) == "1m 0s");
    CHECK(format_wait(65'000) == "1m 5s");
    CHECK(format_wait(64'001) == "1m 5s");
    CHECK(format_wait(3'599'000) == "59m 59s");
    CHECK(format_wait(3'599'001) == "1h 0m");
    CHECK(format_wait(3'600'000) == "1h 0m");
    CHECK(format_wait(7'380'000) == "2h 3m");
    CHECK(format_wait(7'320'001) == "2h 3m");
    CHECK(format_wait(86'340'000) == "23h 59m");
    CHECK(format_wait(86'340'001) == "1d 0h");
    CHECK(format_wait(273'600'000) == "3d 4h");
    CHECK(format_wait(270'000'001) == "3d 4h");
    // saturating: the largest waits still read as days, never wrap
    CHECK(format_wait(99'999'999'999'999'999) == "1157407407d 10h");
    CHECK(format_wait(std::numeric_limits<std::int64_t>::max()) == "106751991167d 8h");
}

TEST_CASE("every place that shows a wait uses format_wait (issue 15)", "[wait]") {
    auto_retry_start_event s;
    s.attempt = 1;
    s.max_attempts = 3;
    s.error_message = "429 slow down";
    s.delay_ms = 99'999'999'999'999'999;
    CHECK(retry_progress_line(s) == "Retrying (1/3) in 1157407407d 10h\u2026 \u2014 429 slow down");
    s.delay_ms = 300;
    CHECK(retry_progress_line(s) == "Retrying (1/3) in 0.3s\u2026 \u2014 429 slow down");
    s.delay_ms = 2000;
    CHECK(retry_progress_line(s) == "Retrying (1/3) in 2s\u2026 \u2014 429 slow down");

    // the terminal loader: a huge wait neither overflows the deadline nor shows 0s
    for (std::int64_t huge :
         {std::int64_t{99'999'999'999'999'999}, std::numeric_limits<std::int64_t>::max()}) {
        driver d;
        d.start_prompt("x");
        d.failed_attempt("429 slow down", true);
        d.retry_start(1, 3, huge, "429 slow down");
        CHECK(d.c.loader_text() ==
              "Retrying (1/3) in " + format_wait(huge) + "\u2026 (esc to cancel)");
        d.advance(1000ms);
        CHECK(d.c.loader_text() ==
              "Retrying (1/3) in " + format_wait(huge - 1000) + "\u2026 (esc to cancel)");
    }
    // longer waits count down in their own unit: minutes, then seconds
    driver d;
    d.start_prompt("x");
    d.failed_attempt("429", true);
    d.retry_start(1, 3, 3'660'000, "429");
    CHECK(d.c.loader_text() == "Retrying (1/3) in 1h 1m\u2026 (esc to cancel)");
    REQUIRE(d.c.next_wakeup());
    CHECK(*d.c.next_wakeup() == t0 + 60'000ms);  // at 1h 0m left
    d.advance(60'000ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 1h 0m\u2026 (esc to cancel)");
    CHECK(*d.c.next_wakeup() == t0 + 61'000ms);  // "1h 0m" until 59m 59s are left
    d.advance(999ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 1h 0m\u2026 (esc to cancel)");
    d.advance(1ms);
    CHECK(d.c.loader_text() == "Retrying (1/3) in 59m 59s\u2026 (esc to cancel)");
    CHECK(*d.c.next_wakeup() == t0 + 62'000ms);
}

TEST_CASE(
    "print mode's stderr lines are sanitised as the TUI does, an empty error names its status",
    "[print][issue-15]") {
    const std::string hostile =
        "500 bad \x1b[31mred\x1b]0;title\x07 \x9b"
        "2J end";
    const std::string safe = tui::sanitize(hostile);
    REQUIRE(safe.find('\x1b') == std::string::npos);
    auto_retry_start_event s;
    s.attempt = 1;
    s.max_attempts = 3;
    s.delay_ms = 2000;
    s.error_message = hostile;
    CHECK(retry_progress_line(s) == "Retrying (1/3) in 2s\u2026 \u2014 " + safe);
    auto_retry_end_event e;
    e.attempt = 3;
    e.final_error = hostile;
    CHECK(retry_failed_line(e) == "Retry failed after 3 attempts: " + safe);

    prompt_result r;
    r.outcome = prompt_result::status::failed;
    r.error = hostile;
    CHECK(print_error_line(r) == "Error: " + safe);
    // an error without text: its status, in the form of an HTTP error without a body
    auto m = std::make_shared<message>();
    m->role = message_role::assistant;
    m->stop = stop_reason::error;
    m->error_message = "";
    m->error_status = 503;
    r.error = "";
    r.last_assistant = m;
    CHECK(print_error_line(r) == "Error: 503 status code (no body)");
    m->error_status.reset();
    CHECK(print_error_line(r) == "Error: Unknown error (the provider gave no text and no status)");
    e.final_error = "";
    CHECK(retry_failed_line(e) == "Retry failed after 3 attempts: Unknown error");
}

TEST_CASE(
    "tui: Esc during the loader cancels the retry, the failure line, the input is usable after") {
    driver d;
    d.start_prompt("hi");
    d.failed_attempt("503 Service Unavailable", true);
    d.retry_start(1, 3, 3000, "503 Service Unavailable");
    d.advance(500ms);
    auto cmd = d.c.on_escape();
    CHECK(cmd.type == tui_command::kind::abort_retry);
    // the session answers abort_retry() with the end event, then settles
    d.retry_end(false, 1, "Retry cancelled");
    CHECK(d.c.escape_action() == esc_action::abort);  // restored: the saved handler
    CHECK_FALSE(d.c.saved_escape_action());
    CHECK(d.c.loader() != tui_controller::loader_kind::retry);
    d.settle();
    CHECK(d.lines(kind::error) ==
          std::vector<std::string>{"Retry failed after 1 attempts: Retry cancelled"});
    CHECK(d.c.escape_action() == esc_action::none);
    CHECK_FALSE(d.c.busy());

    // the input works again: the next Enter starts a new prompt, not a queued one
    auto next = d.c.on_enter("again");
    CHECK(next.type == tui_command::kind::submit);
    CHECK_FALSE(next.queued);
    CHECK(d.c.queued().empty());
}

TEST_CASE("tui: exhausted retries show the failure line with the last error, once") {
    driver d;
    d.start_prompt("hi");
    d.failed_attempt("503 first", true);
    d.retry_start(1, 2, 1000, "503 first");
    d.ev(agent_start_event{});
    d.failed_attempt("502 second", true);
    d.retry_start(2, 2, 2000, "502 second");
    d.ev(agent_start_event{});
    d.failed_attempt("429 last one", false);
    d.retry_end(false, 2, "429 last one");
    d.settle();
    CHECK(d.lines(kind::error) ==
          std::vector<std::string>{"Retry failed after 2 attempts: 429 last one"});
    CHECK(d.c.escape_action() == esc_action::none);
}

TEST_CASE("tui: maxRetries 0 — an end without a start restores nothing") {
    driver d;
    d.start_prompt("hi");
    d.failed_attempt("503 down", false);
    REQUIRE(d.c.escape_action() == esc_action::abort);
    d.retry_end(false, 0, "503 down");
    CHECK(d.c.escape_action() == esc_action::abort);  // unchanged: nothing was saved
    CHECK_FALSE(d.c.saved_escape_action());
    d.settle();
    CHECK(d.lines(kind::error) ==
          std::vector<std::string>{"Retry failed after 0 attempts: 503 down"});
}

TEST_CASE("tui: consecutive retry starts keep the original handler (pi #578)") {
    driver d;
    d.start_prompt("hi");
    d.retry_start(1, 3, 1000, "503");
    CHECK(d.c.saved_escape_action() == esc_action::abort);
    SECTION("agent_start restores before the next start saves") {
        d.ev(agent_start_event{});
        CHECK(d.c.escape_action() == esc_action::abort);
        d.retry_start(2, 3, 2000, "503");
        CHECK(d.c.saved_escape_action() == esc_action::abort);
    }
    SECTION("even two starts in a row do not save abort_retry as the previous handler") {
        d.retry_start(2, 3, 2000, "503");
        CHECK(d.c.saved_escape_action() == esc_action::abort);
    }
    d.retry_end(false, 2, "Retry cancelled");
    CHECK(d.c.escape_action() == esc_action::abort);
}

TEST_CASE("tui: a retry end with no final error says Unknown error") {
    driver d;
    d.start_prompt("hi");
    d.retry_start(1, 3, 1000, "503");
    d.retry_end(false, 1);
    CHECK(d.lines(kind::error) ==
          std::vector<std::string>{"Retry failed after 1 attempts: Unknown error"});
}

TEST_CASE("tui: Esc while streaming aborts, idle Esc does nothing") {
    driver d;
    CHECK(d.c.on_escape().type == tui_command::kind::none);
    d.start_prompt("write a long story");
    auto partial = assistant_msg("");
    d.ev(message_start_event{partial});
    message_update_event u;
    u.message = partial;
    u.delta = "Once upon";
    d.ev(u);
    CHECK(d.c.streaming());
    CHECK(d.c.on_escape().type == tui_command::kind::abort);
    d.ev(
        message_end_event{assistant_msg("Once upon", stop_reason::aborted, "Request was aborted")});
    CHECK_FALSE(d.c.streaming());
    d.ev(agent_end_event{});
    d.settle();
    CHECK(d.lines(kind::assistant) == std::vector<std::string>{"Once upon"});
    CHECK(d.lines(kind::notice).back() == "Aborted");
    CHECK(d.lines(kind::error).empty());
    CHECK(d.c.on_escape().type == tui_command::kind::none);
}

TEST_CASE("tui: a non-retryable error is one Error line when the prompt settles") {
    driver d;
    d.start_prompt("hi");
    d.failed_attempt("401 Incorrect API key", false);
    CHECK(d.lines(kind::error).empty());  // not yet: an auto_retry_end may still replace it
    d.settle();
    CHECK(d.lines(kind::error) == std::vector<std::string>{"Error: 401 Incorrect API key"});
}

TEST_CASE("tui: messages typed while busy are queued follow-ups, shown until they run") {
    driver d;
    auto first = d.c.on_enter("first");
    CHECK(first.type == tui_command::kind::submit);
    CHECK_FALSE(first.queued);
    // a second Enter before the turn even started is queued behind it
    auto second = d.c.on_enter("second");
    CHECK(second.queued);
    CHECK(d.c.queued() == std::vector<std::string>{"second"});
    CHECK(d.c.status_text().find("1 queued") != std::string::npos);
    d.ev(agent_start_event{});
    d.ev(message_start_event{user_msg("first")});
    d.stream_reply({"one"});
    CHECK(d.c.queued() == std::vector<std::string>{"second"});
    // the session runs the follow-up before settling
    d.ev(agent_start_event{});
    d.ev(message_start_event{user_msg("second")});
    CHECK(d.c.queued().empty());
    d.stream_reply({"two"});
    d.settle();
    CHECK(d.lines(kind::user) == std::vector<std::string>{"first", "second"});
    CHECK(d.lines(kind::assistant) == std::vector<std::string>{"one", "two"});

    SECTION("an abort drops queued messages: the transcript says so") {
        d.c.on_enter("third");
        auto q = d.c.on_enter("fourth");
        CHECK(q.queued);
        d.c.on_prompt_done("fourth", prompt_result{prompt_result::status::aborted,
                                                   "Request was aborted", nullptr});
        CHECK(d.c.queued().empty());
        CHECK(d.has_line_containing("Queued message dropped (aborted): fourth"));
    }
    SECTION("a refused prompt shows why") {
        d.c.on_prompt_done("x", prompt_result{prompt_result::status::refused, "busy", nullptr});
        CHECK(d.lines(kind::error).back() == "Not sent: busy");
    }
}

TEST_CASE("tui: blank Enter does nothing") {
    driver d;
    CHECK(d.c.on_enter("").type == tui_command::kind::none);
    CHECK(d.c.on_enter(" \n\t").type == tui_command::kind::none);
    CHECK_FALSE(d.c.busy());
}

TEST_CASE("tui: Ctrl+C clears the input, twice in a row exits, Ctrl+D exits on an empty input") {
    tui_controller c;
    CHECK(c.on_ctrl_c(false, t0).type == tui_command::kind::clear_input);
    CHECK(c.status_text() == "Press Ctrl+C again to exit");
    CHECK(c.on_ctrl_c(true, t0 + 100ms).type == tui_command::kind::exit);

    tui_controller c2;
    CHECK(c2.on_ctrl_c(true, t0).type == tui_command::kind::clear_input);
    c2.on_other_key();  // typing in between: not "in a row"
    CHECK(c2.status_text() != "Press Ctrl+C again to exit");
    CHECK(c2.on_ctrl_c(true, t0).type == tui_command::kind::clear_input);
    CHECK(c2.on_escape().type == tui_command::kind::none);
    CHECK(c2.on_ctrl_c(true, t0).type == tui_command::kind::clear_input);

    tui_controller c3;
    CHECK(c3.on_ctrl_d(false).type == tui_command::kind::edit);  // delete under the cursor
    CHECK(c3.on_ctrl_d(true).type == tui_command::kind::exit);
}

TEST_CASE("tui: compaction loaders and their end lines") {
    driver d;
    d.start_prompt("hi");
    d.failed_attempt("prompt is too long", false);
    compaction_start_event cs;
    cs.reason = "overflow";
    d.ev(cs);
    CHECK(d.c.loader_text() == "Context overflow detected, compacting\u2026 (esc to cancel)");
    CHECK(d.c.escape_action() == esc_action::abort);
    CHECK(d.c.on_escape().type == tui_command::kind::abort);
    compaction_end_event ce;
    ce.reason = "overflow";
    ce.aborted = true;
    ce.error_message = "Compaction aborted";
    d.ev(ce);
    CHECK(d.c.loader_text() == "\u280b Working\u2026 0s (esc to interrupt)");
    d.settle();
    CHECK(d.lines(kind::notice).back() == "Compaction cancelled");
    CHECK(d.lines(kind::error).empty());  // the overflow error went to compaction, not to a line

    driver m;
    m.start_prompt("hi");
    compaction_start_event ms;
    ms.reason = "threshold";
    m.ev(ms);
    CHECK(m.c.loader_text() == "Compacting context\u2026 (esc to cancel)");
    compaction_end_event me;
    me.reason = "threshold";
    me.error_message = "no summariser";
    m.ev(me);
    CHECK(m.lines(kind::error).back() == "Compaction failed: no summariser");

    driver o;
    o.start_prompt("hi");
    o.ev(cs);
    compaction_end_event oe;
    oe.reason = "overflow";
    oe.error_message = "cannot compact";
    o.ev(oe);
    CHECK(o.lines(kind::error).back() == "Context overflow recovery failed: cannot compact");

    driver k;
    k.start_prompt("hi");
    k.ev(cs);
    compaction_end_event ke;
    ke.reason = "overflow";
    ke.will_retry = true;
    k.ev(ke);
    CHECK(k.lines(kind::notice).back() == "Context compacted; continuing");
}

TEST_CASE("tui: tool calls and extension errors are transcript lines") {
    driver d;
    d.start_prompt("hi");
    tool_execution_start_event ts;
    ts.tool_name = "read";
    ts.args["path"] = "a.txt";
    d.ev(ts);
    tool_execution_end_event te;
    te.tool_name = "read";
    te.result = "Tool read not found";
    te.is_error = true;
    d.ev(te);
    extension_error_event xe{"ext.js", "agent_end", "boom"};
    d.ev(xe);
    CHECK(d.has_line_containing("\u2192 read {\"path\":\"a.txt\"}"));
    CHECK(d.has_line_containing("\u2190 read failed: Tool read not found"));
    CHECK(d.has_line_containing("Extension ext.js failed on agent_end: boom"));
}

TEST_CASE("tui: model fallback lines (the reference's wording)") {
    driver d;
    d.start_prompt("hi");
    d.ev(retry_fallback_applied_event{"a/m1", "b/m2", "default"});
    d.ev(retry_fallback_succeeded_event{"b/m2", "default"});
    CHECK(d.lines(kind::notice) ==
          std::vector<std::string>{"Fallback: a/m1 -> b/m2", "Fallback succeeded on b/m2"});
}

TEST_CASE("tui: a reply without updates is shown whole") {
    driver d;
    d.start_prompt("hi");
    auto m = assistant_msg("all at once");
    d.ev(message_start_event{m});
    d.ev(message_end_event{m});
    CHECK(d.lines(kind::assistant) == std::vector<std::string>{"all at once"});
}

// ---- text --------------------------------------------------------------------------------------

TEST_CASE("tui text: character counts and the discarded-reply marker (issue 21)", "[issue-21]") {
    CHECK(tui::char_count_text(0) == "0 chars");
    CHECK(tui::char_count_text(1) == "1 char");
    CHECK(tui::char_count_text(999) == "999 chars");
    CHECK(tui::char_count_text(1000) == "1.0k chars");
    CHECK(tui::char_count_text(1199) == "1.2k chars");
    CHECK(tui::char_count_text(1249) == "1.2k chars");
    CHECK(tui::char_count_text(1250) == "1.3k chars");
    CHECK(tui::char_count_text(9949) == "9.9k chars");
    CHECK(tui::char_count_text(9950) == "10k chars");
    CHECK(tui::char_count_text(8000) == "8.0k chars");
    CHECK(tui::char_count_text(123456) == "123k chars");
    CHECK(tui::char_count_text(999499) == "999k chars");
    CHECK(tui::char_count_text(999500) == "1.0M chars");
    CHECK(tui::char_count_text(25'000'000) == "25M chars");
    CHECK(tui::discarded_marker(0, 0) == std::nullopt);
    CHECK(tui::discarded_marker(1200, 0) ==
          "\u21bb connection lost after 1.2k chars \u2014 retrying; the partial reply above is "
          "discarded");
    CHECK(tui::discarded_marker(40, 1) ==
          "\u21bb connection lost after 40 chars and 1 tool call \u2014 retrying; the partial "
          "reply above is discarded");
    CHECK(tui::discarded_marker(0, 2) ==
          "\u21bb connection lost after 2 tool calls \u2014 retrying; the partial reply above is "
          "discarded");
}

TEST_CASE("tui: a failed partial reply stays, one marker line says it is discarded (issue 21)",
          "[issue-21]") {
    driver d;
    d.start_prompt("long");
    auto partial = assistant_msg("");
    d.ev(message_start_event{partial});
    message_update_event u;
    u.message = partial;
    u.delta = "Once upon a time";
    d.ev(u);
    auto failed = assistant_msg("Once upon a time", stop_reason::error, "connection reset");
    d.ev(message_end_event{failed});
    auto_retry_start_event s;
    s.attempt = 1;
    s.max_attempts = 3;
    s.delay_ms = 2000;
    s.error_message = "connection reset";
    s.discarded = discarded_of(failed.get());
    d.ev(s);
    const auto& t = d.c.transcript();
    REQUIRE(t.size() == 3);
    CHECK(t[1].type == kind::assistant);
    CHECK(t[1].text == "Once upon a time");  // the reply stays as it is
    CHECK(t[2].type == kind::notice);
    CHECK(t[2].text ==
          "\u21bb connection lost after 16 chars \u2014 retrying; the partial reply above is "
          "discarded");
    CHECK_FALSE(d.c.streaming());
    // the retried reply is a new item below the marker; an attempt that streamed nothing adds
    // no marker
    d.ev(agent_start_event{});
    auto nothing = assistant_msg("", stop_reason::error, "503");
    d.ev(message_end_event{nothing});
    s.attempt = 2;
    s.discarded = discarded_of(nothing.get());
    d.ev(s);
    CHECK(d.c.transcript().size() == 3);
}

TEST_CASE("tui: a resumed session's transcript is drawn as it was live (issue 21)", "[issue-21]") {
    settings cfg;
    cfg.provider.stream_idle_timeout_ms = 1000;
    cfg.retry.max_retries = 1;
    std::string words;
    for (int i = 0; i < 400; ++i) words += (i ? " " : "") + std::string("abcde");
    test::harness h(R"([{"text":")" + words +
                        R"(","stallMs":5000},{"text":"Complete answer."},)"
                        R"({"toolCall":{"name":"lookup","arguments":{"q":1}}},{"text":"used it"},)"
                        R"({"error":"400 bad request","status":400},)"
                        R"({"error":"503 overloaded","status":503,"times":2},)"
                        R"({"text":"too late","delayMs":5000},)"
                        R"({"error":"503 again","status":503},{"text":"never"}])",
                    cfg);
    h.session->register_tool({"lookup", "", {}},
                             [](json::object) -> boost::asio::awaitable<tool_output> {
                                 co_return tool_output{"found", false};
                             });
    tui_controller live;
    auto sub = h.session->subscribe([&](const event& e) { live.on_event(e, t0); });
    h.prompt("long");
    h.advance(1000ms);  // the stall times out after 1199 characters
    h.advance(2000ms);
    REQUIRE(h.done());
    h.prompt("use the tool");
    REQUIRE(h.done());
    h.prompt("fail");  // not retryable: an Error line
    REQUIRE(h.done());
    h.prompt("exhaust");  // retries run out
    h.advance(2000ms);
    REQUIRE(h.done());
    h.prompt("abort me");
    h.advance(100ms);
    h.session->abort();
    h.run_ready();
    REQUIRE(h.done());
    h.prompt("cancel the retry");
    h.advance(100ms);
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());

    tui_controller resumed;
    for (const event& e : resumed_transcript_events(h.session->history().entries()))
        resumed.on_event(e, t0);
    std::vector<std::string> lines;
    for (const auto& item : live.transcript())
        lines.push_back(std::to_string(static_cast<int>(item.type)) + " " + item.text);
    std::vector<std::string> again;
    for (const auto& item : resumed.transcript())
        again.push_back(std::to_string(static_cast<int>(item.type)) + " " + item.text);
    CHECK(again == lines);
    const auto has = [&](const std::string& text) {
        return std::find(lines.begin(), lines.end(), text) != lines.end();
    };
    CHECK(
        has("3 \u21bb connection lost after 1.2k chars \u2014 retrying; the partial reply "
            "above is discarded"));
    CHECK(has("1 Complete answer."));
    CHECK(has("4 \u2190 lookup: {\"content\":[{\"type\":\"text\",\"text\":\"found\"}]}"));
    CHECK(has("2 Error: 400 bad request"));
    CHECK(has("2 Retry failed after 1 attempts: 503 overloaded"));
    CHECK(has("3 Aborted"));
    CHECK(has("2 Retry failed after 1 attempts: Retry cancelled"));
    CHECK(resumed.loader() == tui_controller::loader_kind::none);
    CHECK_FALSE(resumed.busy());
}

TEST_CASE("tui text: UTF-8 decoding replaces every invalid sequence with one U+FFFD") {
    const auto decode = [](std::string_view s) {
        std::u32string out;
        for (std::size_t p = 0; p < s.size();) out.push_back(tui::decode_utf8(s, p));
        return out;
    };
    CHECK(decode("a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80") == U"a\u00e9\u4e2d\U0001F600");
    CHECK(decode("\xff") == U"\uFFFD");
    CHECK(decode("\xe4\xb8") == U"\uFFFD");          // truncated: one replacement
    CHECK(decode("\xe4\xb8x") == U"\uFFFDx");        // bad continuation
    CHECK(decode("\xc0\x80") == U"\uFFFD");          // overlong
    CHECK(decode("\xed\xa0\x80") == U"\uFFFD");      // surrogate
    CHECK(decode("\xf4\x90\x80\x80") == U"\uFFFD");  // above U+10FFFF
    CHECK(decode("\x80x") == U"\uFFFDx");            // stray continuation

    CHECK(tui::incomplete_utf8_tail("ab") == 0);
    CHECK(tui::incomplete_utf8_tail("a\xe4") == 1);
    CHECK(tui::incomplete_utf8_tail("a\xe4\xb8") == 2);
    CHECK(tui::incomplete_utf8_tail("a\xe4\xb8\xad") == 0);
    CHECK(tui::incomplete_utf8_tail("\xf0\x9f\x98") == 3);
}

TEST_CASE("tui text: display width of CJK, emoji, combining marks, controls are made safe") {
    REQUIRE(utf8_locale);
    CHECK(tui::char_width(U'a') == 1);
    CHECK(tui::char_width(U'\u4e2d') == 2);
    CHECK(tui::char_width(U'\U0001F600') == 2);
    CHECK(tui::char_width(U'\u0301') == 0);
    CHECK(tui::display_width("e\xcc\x81") == 1);
    CHECK(tui::display_width("\xe4\xb8\xad\xe6\x96\x87") == 4);
    CHECK(tui::char_width(0x1b) == 1);  // shown as U+FFFD
    CHECK(tui::displayable(0x1b) == tui::replacement_char);
    CHECK(tui::displayable(0x9b) == tui::replacement_char);  // C1 CSI
    CHECK(tui::displayable(0x7f) == tui::replacement_char);
    // a model cannot move the cursor or change colours: no ESC survives
    const std::string s = tui::sanitize("red \x1b[31mtext\x1b[0m\tand \xff bytes\r\n");
    CHECK(s.find('\x1b') == std::string::npos);
    CHECK(s.find('\r') == std::string::npos);
    CHECK(s == "red \xef\xbf\xbd[31mtext\xef\xbf\xbd[0m    and \xef\xbf\xbd bytes\xef\xbf\xbd\n");
    CHECK(tui::truncate_to_width("hello world", 8) == "hello w\u2026");
    CHECK(tui::truncate_to_width("\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad", 5) ==
          "\xe4\xb8\xad\xe4\xb8\xad\u2026");
    CHECK(tui::truncate_to_width("short", 8) == "short");
}

namespace {
std::vector<std::string> texts(const std::vector<tui::wrapped_row>& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(r.text);
    return out;
}
}  // namespace

TEST_CASE("tui text: word wrap by display width") {
    REQUIRE(utf8_locale);
    using v = std::vector<std::string>;
    CHECK(texts(tui::wrap("the quick brown fox", 10)) == v{"the quick", "brown fox"});
    CHECK(texts(tui::wrap("abcdefghijklmnopqrstuvwxy", 10)) ==
          v{"abcdefghij", "klmnopqrst", "uvwxy"});
    CHECK(texts(tui::wrap("ab abcdefghijkl", 10)) == v{"ab", "abcdefghij", "kl"});
    CHECK(texts(tui::wrap("one\ntwo\n\nthree", 10)) == v{"one", "two", "", "three"});
    CHECK(texts(tui::wrap("", 10)) == v{""});
    CHECK(texts(tui::wrap("trailing\n", 10)) == v{"trailing", ""});
    // CJK: two columns each, never split across rows
    CHECK(texts(tui::wrap(
              "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad", 5)) ==
          v{"\xe4\xb8\xad\xe4\xb8\xad", "\xe4\xb8\xad\xe4\xb8\xad", "\xe4\xb8\xad\xe4\xb8\xad"});
    CHECK(texts(tui::wrap("hi \xf0\x9f\x98\x80\xf0\x9f\x98\x80", 5)) ==
          v{"hi", "\xf0\x9f\x98\x80\xf0\x9f\x98\x80"});
    // bytes that are not UTF-8 are shown as U+FFFD, escape sequences neutralised
    CHECK(texts(tui::wrap("a\xff\x1b[2Jb", 20)) == v{"a\xef\xbf\xbd\xef\xbf\xbd[2Jb"});
    // tabs are four columns
    CHECK(texts(tui::wrap("a\tb", 20)) == v{"a    b"});
    // row starts are byte offsets into the source
    auto rows = tui::wrap("the quick brown fox", 10);
    CHECK(rows[0].begin == 0);
    CHECK(rows[1].begin == 10);
    // an unfinished character at the end of a stream is held back
    CHECK(texts(tui::wrap("ab\xe4\xb8", 10, true)) == v{"ab"});
    CHECK(texts(tui::wrap("ab\xe4\xb8", 10, false)) == v{"ab\xef\xbf\xbd"});
}

TEST_CASE(
    "tui text: wrapping is prefix-stable (rows above the last never change as text streams in)") {
    REQUIRE(utf8_locale);
    std::mt19937 rng(12345);
    const std::vector<std::string> pieces = {
        "a",  "bb",  "ccc",          "dddddddddddddd",   " ",
        "  ", "\n",  "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "e\xcc\x81",
        "\t", "\xff"};
    for (int round = 0; round < 300; ++round) {
        std::string text;
        const int n = 5 + static_cast<int>(rng() % 40);
        for (int k = 0; k < n; ++k) text += pieces[rng() % pieces.size()];
        const int width = 3 + static_cast<int>(rng() % 15);
        const auto full = tui::wrap(text, width, true);
        for (std::size_t cut = 0; cut <= text.size(); ++cut) {
            const auto part = tui::wrap(std::string_view(text).substr(0, cut), width, true);
            INFO("text=" << text << " width=" << width << " cut=" << cut);
            REQUIRE(part.size() <= full.size());
            for (std::size_t r = 0; r + 1 < part.size(); ++r) {
                REQUIRE(part[r].text == full[r].text);
                REQUIRE(part[r].begin == full[r].begin);
            }
            // re-wrapping from the last row's start gives the same rows (the streaming shortcut)
            const auto from_last = tui::wrap(
                std::string_view(text).substr(0, cut).substr(part.back().begin), width, true);
            REQUIRE(from_last.size() == 1);
            REQUIRE(from_last[0].text == part.back().text);
        }
        for (const auto& r : full) REQUIRE(tui::display_width(r.text) <= std::max(width, 2));
    }
}

// ---- keys
// ----------------------------------------------------------------------------------------

namespace {
std::vector<key> feed(tui::key_decoder& k, std::initializer_list<std::string_view> chunks) {
    std::vector<key> out;
    for (auto c : chunks) k.feed(c, out);
    return out;
}
}  // namespace

TEST_CASE("tui keys: text, Enter, line breaks, control keys") {
    tui::key_decoder k;
    auto ks = feed(k, {"hi\xe4\xb8\xad\r"});
    REQUIRE(ks.size() == 2);
    CHECK(ks[0].type == key::kind::editor);
    CHECK(ks[0].chars == U"hi\u4e2d");
    CHECK(ks[1].type == key::kind::enter);

    ks = feed(k, {"\n", "\x03", "\x04", "\x1a", "\x1b\r", "\x1b[13;2u"});
    REQUIRE(ks.size() == 6);
    CHECK(ks[0].type == key::kind::newline);
    CHECK(ks[1].type == key::kind::ctrl_c);
    CHECK(ks[2].type == key::kind::ctrl_d);
    CHECK(ks[3].type == key::kind::ctrl_z);
    CHECK(ks[4].type == key::kind::newline);
    CHECK(ks[5].type == key::kind::newline);

    ks = feed(k, {"\x7f\x01\x0b"});  // backspace, Ctrl+A, Ctrl+K go to the editor
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].chars == U"\x7f\x01\x0b");
    CHECK_FALSE(k.pending());
}

TEST_CASE(
    "tui keys: a lone ESC is an Esc only after the timeout, sequences split across reads are "
    "whole") {
    tui::key_decoder k;
    auto ks = feed(k, {"\x1b"});
    CHECK(ks.empty());
    CHECK(k.pending());
    k.flush(ks);
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].type == key::kind::escape);
    CHECK_FALSE(k.pending());

    ks = feed(k, {"\x1b", "[", "A"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].type == key::kind::up);
    CHECK(ks[0].chars == U"\x1b[A");
    ks = feed(k, {"\x1bOB", "\x1b[D", "\x1b[3~", "\x1b[1;5C"});
    REQUIRE(ks.size() == 4);
    CHECK(ks[0].type == key::kind::down);
    CHECK(ks[1].type == key::kind::editor);
    CHECK(ks[1].chars == U"\x1b[D");
    CHECK(ks[2].chars == U"\x1b[3~");
    CHECK(ks[3].chars == U"\x1b[1;5C");

    // ESC ESC: the first was pressed alone
    ks = feed(k, {"\x1b\x1b"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].type == key::kind::escape);
    CHECK(k.pending());
    k.flush(ks);
    CHECK(ks.back().type == key::kind::escape);

    // Alt+b for the editor (word left)
    ks = feed(k, {"\x1b"
                  "b"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].type == key::kind::editor);
    CHECK(ks[0].chars ==
          U"\x1b"
          U"b");

    // unknown sequences (F5, mouse, focus) never become text
    ks = feed(k, {"\x1b[15~", "\x1b[I", "\x1bOP", "x"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].chars == U"x");

    // an unfinished sequence at the timeout is dropped
    ks = feed(k, {"\x1b[1;"});
    CHECK(ks.empty());
    k.flush(ks);
    CHECK(ks.empty());
    CHECK_FALSE(k.pending());
}

TEST_CASE("tui keys: UTF-8 split across reads, invalid bytes become U+FFFD") {
    tui::key_decoder k;
    auto ks = feed(k, {"\xe4", "\xb8", "\xad"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].chars == U"\u4e2d");
    ks = feed(k, {"a\xffz"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].chars == U"a\uFFFDz");
    ks = feed(k, {"\xe4"});
    CHECK(ks.empty());
    k.flush(ks);
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].chars == U"\uFFFD");
}

TEST_CASE("tui keys: bracketed paste is one insert, line breaks kept, nothing inside is a key") {
    tui::key_decoder k;
    auto ks = feed(k, {"\x1b[200~line one\r\nline two\rthree\x03\x1b[201~"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].type == key::kind::paste);
    CHECK(ks[0].chars == U"line one\nline two\nthree");

    ks = feed(k, {"\x1b[200~abc", "\x1b[20", "1~", "\r"});
    REQUIRE(ks.size() == 2);
    CHECK(ks[0].chars == U"abc");
    CHECK(ks[1].type == key::kind::enter);

    ks = feed(k, {"\x1b[200~\xe4\xb8", "\xad\x1b"});
    CHECK(ks.empty());
    CHECK(k.in_paste());
    CHECK_FALSE(k.pending());  // no ESC timeout inside a paste
    k.flush(ks);
    CHECK(ks.empty());
    ks = feed(k, {"[201~"});
    REQUIRE(ks.size() == 1);
    CHECK(ks[0].chars == U"\u4e2d");
}

TEST_CASE("tui keys: every sequence passed to the editor is bound") {
    for (const auto& [seq, fn] : tui::key_decoder::editor_bindings()) {
        tui::key_decoder k;
        std::vector<key> ks;
        k.feed(seq, ks);
        REQUIRE(ks.size() == 1);
        CHECK((ks[0].type == key::kind::editor || ks[0].type == key::kind::up ||
               ks[0].type == key::kind::down));
        CHECK_FALSE(fn.empty());
    }
}

// ---- the screen, checked on a small terminal emulator ------------------------------------------

namespace {

/// Enough of a VT100 for what the renderer writes: CR, LF (scrolls), CUU/CUD/CUF, ED, EL,
/// clear screen and scrollback, cursor visibility and SGR (ignored). Cells hold UTF-8 glyphs.
class vt {
  public:
    vt(int w, int h)
        : w_(w),
          h_(h),
          grid_(static_cast<std::size_t>(h),
                std::vector<std::string>(static_cast<std::size_t>(w), " ")) {}

    void write(std::string_view s) {
        for (std::size_t i = 0; i < s.size();) {
            const char c = s[i];
            if (c == '\r') {
                x_ = 0;
                ++i;
            } else if (c == '\n') {
                lf();
                ++i;
            } else if (c == '\x1b') {
                REQUIRE(i + 1 < s.size());
                REQUIRE(s[i + 1] == '[');
                std::size_t j = i + 2;
                std::string params;
                while (j < s.size() && ((s[j] >= '0' && s[j] <= '9') || s[j] == ';' || s[j] == '?'))
                    params += s[j++];
                REQUIRE(j < s.size());
                csi(params, s[j]);
                i = j + 1;
            } else {
                std::size_t p = i;
                const char32_t cp = tui::decode_utf8(s, p);
                const int cw = tui::char_width(cp);
                if (x_ + cw > w_) {  // autowrap
                    x_ = 0;
                    lf();
                }
                if (cw == 0) {
                    if (x_ > 0) cell(x_ - 1).append(s.substr(i, p - i));
                } else {
                    cell(x_) = std::string(s.substr(i, p - i));
                    for (int k = 1; k < cw; ++k) cell(x_ + k) = "";
                    x_ += cw;
                }
                i = p;
            }
        }
    }
    std::vector<std::string> rows() const {
        std::vector<std::string> out;
        for (const auto& r : grid_) {
            std::string line;
            for (const auto& g : r) line += g;
            while (!line.empty() && line.back() == ' ') line.pop_back();
            out.push_back(line);
        }
        return out;
    }
    std::vector<std::string> history_and_screen() const {
        auto out = scrollback_;
        for (auto& r : rows()) out.push_back(r);
        while (!out.empty() && out.back().empty()) out.pop_back();
        return out;
    }
    int x() const { return x_; }
    int y() const { return y_; }

  private:
    std::string& cell(int x) {
        return grid_[static_cast<std::size_t>(y_)][static_cast<std::size_t>(std::min(x, w_ - 1))];
    }
    void lf() {
        if (y_ + 1 < h_) {
            ++y_;
            return;
        }
        std::string line;
        for (const auto& g : grid_.front()) line += g;
        while (!line.empty() && line.back() == ' ') line.pop_back();
        scrollback_.push_back(line);
        grid_.erase(grid_.begin());
        grid_.emplace_back(static_cast<std::size_t>(w_), " ");
    }
    void csi(const std::string& p, char f) {
        const int n = p.empty() || p[0] == '?' ? 1 : std::stoi(p);
        switch (f) {
            case 'A':
                y_ = std::max(0, y_ - n);
                break;
            case 'B':
                y_ = std::min(h_ - 1, y_ + n);
                break;
            case 'C':
                x_ = std::min(w_ - 1, x_ + n);
                break;
            case 'H':
                x_ = y_ = 0;
                break;
            case 'K':
                for (int x = x_; x < w_; ++x) cell(x) = " ";
                break;
            case 'J':
                if (p == "2") {
                    for (auto& r : grid_) std::fill(r.begin(), r.end(), " ");
                } else if (p == "3") {
                    scrollback_.clear();
                } else {
                    for (int x = x_; x < w_; ++x) cell(x) = " ";
                    for (int y = y_ + 1; y < h_; ++y)
                        std::fill(grid_[static_cast<std::size_t>(y)].begin(),
                                  grid_[static_cast<std::size_t>(y)].end(), " ");
                }
                break;
            case 'm':
            case 'h':
            case 'l':
                break;
            default:
                FAIL("unexpected CSI " << p << f);
        }
    }

    int w_, h_;
    int x_ = 0, y_ = 0;
    std::vector<std::vector<std::string>> grid_;
    std::vector<std::string> scrollback_;
};

std::vector<tui::screen_row> rows_of(std::initializer_list<std::string> texts) {
    std::vector<tui::screen_row> out;
    for (const auto& t : texts) out.push_back(tui::screen_row{t, tui::row_style::plain});
    return out;
}

}  // namespace

TEST_CASE("tui screen: the live region is redrawn from its first changed row only") {
    REQUIRE(utf8_locale);
    vt term(20, 8);
    tui::screen s(tui::terminal_caps::ansi());

    term.write(s.render({}, rows_of({"loader", "-----", "> ab", "status"}), 2, 4));
    CHECK(term.rows()[0] == "loader");
    CHECK(term.rows()[2] == "> ab");
    CHECK(term.y() == 2);
    CHECK(term.x() == 4);

    // nothing changed: nothing written
    CHECK(s.render({}, rows_of({"loader", "-----", "> ab", "status"}), 2, 4).empty());
    // only the cursor moved
    auto out = s.render({}, rows_of({"loader", "-----", "> ab", "status"}), 2, 3);
    CHECK(out.find("ab") == std::string::npos);
    term.write(out);
    CHECK(term.x() == 3);

    // only the input changed: the loader row is not rewritten
    out = s.render({}, rows_of({"loader", "-----", "> abc", "status"}), 2, 5);
    CHECK(out.find("loader") == std::string::npos);
    CHECK(out.find("-----") == std::string::npos);
    term.write(out);
    CHECK(term.rows()[2] == "> abc");
    CHECK(term.rows()[3] == "status");
    CHECK(term.y() == 2);
    CHECK(term.x() == 5);

    // the loader counts down: that row and below
    out = s.render({}, rows_of({"in 2s", "-----", "> abc", "status"}), 2, 5);
    term.write(out);
    CHECK(term.rows() ==
          std::vector<std::string>{"in 2s", "-----", "> abc", "status", "", "", "", ""});

    // transcript rows go above the region for good
    term.write(
        s.render(rows_of({"you: hi", "", "reply"}), rows_of({"", "-----", "> ", "status"}), 2, 2));
    CHECK(term.rows() ==
          std::vector<std::string>{"you: hi", "", "reply", "", "-----", ">", "status", ""});
    CHECK(term.y() == 5);
    CHECK(term.x() == 2);

    // the region grows (a queued row) and shrinks again
    term.write(s.render({}, rows_of({"Queued: x", "", "-----", "> ", "status"}), 3, 2));
    CHECK(term.rows() == std::vector<std::string>{"you: hi", "", "reply", "Queued: x", "", "-----",
                                                  ">", "status"});
    term.write(s.render({}, rows_of({"", "-----", "> ", "status"}), 2, 2));
    CHECK(term.rows() ==
          std::vector<std::string>{"you: hi", "", "reply", "", "-----", ">", "status", ""});
    term.write(s.render({}, rows_of({"", "-----", "> ", "status", "more"}), 2, 2));
    CHECK(term.rows()[7] == "more");
    term.write(s.render({}, rows_of({"", "-----", "> "}), 2, 2));
    CHECK(term.rows() ==
          std::vector<std::string>{"you: hi", "", "reply", "", "-----", ">", "", ""});

    // more transcript than the screen holds scrolls into the history
    term.write(s.render(rows_of({"r1", "r2", "r3", "r4", "r5", "r6"}),
                        rows_of({"", "-----", "> z"}), 2, 3));
    CHECK(term.history_and_screen() == std::vector<std::string>{"you: hi", "", "reply", "r1", "r2",
                                                                "r3", "r4", "r5", "r6", "", "-----",
                                                                "> z"});
    CHECK(term.y() == 7);

    // at exit the region goes away
    term.write(s.clear_live());
    CHECK(term.history_and_screen() ==
          std::vector<std::string>{"you: hi", "", "reply", "r1", "r2", "r3", "r4", "r5", "r6"});
}

TEST_CASE("tui screen: a full redraw clears screen and history, then draws everything") {
    REQUIRE(utf8_locale);
    vt term(10, 5);
    tui::screen s(tui::terminal_caps::ansi());
    term.write(s.render(rows_of({"old1", "old2", "old3", "old4"}), rows_of({"> x", "st"}), 0, 3));
    term.write(s.redraw(rows_of({"new1", "new2"}), rows_of({"> x", "st"}), 0, 3));
    CHECK(term.history_and_screen() == std::vector<std::string>{"new1", "new2", "> x", "st"});
    CHECK(term.y() == 2);
    CHECK(term.x() == 3);
}

TEST_CASE("tui screen: wide characters and a full-width row") {
    REQUIRE(utf8_locale);
    vt term(6, 4);
    tui::screen s(tui::terminal_caps::ansi());
    term.write(s.render({},
                        rows_of({"\xe4\xb8\xad\xe6\x96\x87"
                                 "ab",
                                 "> \xe4\xb8\xad", "abcdef"}),
                        1, 4));
    CHECK(term.rows()[0] ==
          "\xe4\xb8\xad\xe6\x96\x87"
          "ab");
    CHECK(term.rows()[2] == "abcdef");
    CHECK(term.y() == 1);
    CHECK(term.x() == 4);
    term.write(s.render({},
                        rows_of({"\xe4\xb8\xad\xe6\x96\x87"
                                 "ab",
                                 "> \xe4\xb8\xadx", "abcdef"}),
                        1, 5));
    CHECK(term.rows()[1] == "> \xe4\xb8\xadx");
    CHECK(term.rows()[2] == "abcdef");
}

// ---- layout: the transcript rows printed for good and the live region -----------------------

namespace {

using tui::row_style;
using tui::screen_row;

std::string rule_of(int w) {
    std::string r;
    for (int k = 0; k < w; ++k) r += "\u2500";
    return r;
}

tui::live_input live_of(std::u32string text, std::size_t cursor, int width, int height = 24) {
    tui::live_input in;
    in.text = std::move(text);
    in.cursor = cursor;
    in.width = width;
    in.height = height;
    in.status = "st";
    return in;
}

}  // namespace

TEST_CASE("tui layout: transcript rows are committed once, the streaming row stays live",
          "[tui][layout]") {
    tui::transcript_printer p;
    std::vector<transcript_item> items{{kind::user, "hello"}, {kind::assistant, "hi there\n\n "}};
    std::vector<screen_row> commit;
    std::vector<screen_row> live;
    p.collect(items, false, 20, commit, live);
    CHECK(commit == std::vector<screen_row>{{"> hello", row_style::user},
                                            {"", row_style::plain},
                                            {"hi there", row_style::assistant}});
    CHECK(live.empty());
    commit.clear();
    p.collect(items, false, 20, commit, live);
    CHECK(commit.empty());  // printed for good: never again

    // a reply streaming: every row but the last is committed, the last stays live
    items.push_back({kind::assistant, "one two three four"});
    p.collect(items, true, 10, commit, live);
    CHECK(commit ==
          std::vector<screen_row>{{"", row_style::plain}, {"one two", row_style::assistant}});
    CHECK(live == std::vector<screen_row>{{"three four", row_style::assistant}});
    items.back().text += " five";
    commit.clear();
    live.clear();
    p.collect(items, true, 10, commit, live);
    CHECK(commit == std::vector<screen_row>{{"three four", row_style::assistant}});
    CHECK(live == std::vector<screen_row>{{"five", row_style::assistant}});
    commit.clear();
    live.clear();
    p.collect(items, false, 10, commit, live);  // the reply ended
    CHECK(commit == std::vector<screen_row>{{"five", row_style::assistant}});
    CHECK(live.empty());

    // a user message wraps with "  " under "> "; the others keep their style; reset reprints
    std::vector<transcript_item> more{{kind::user, "aaaa bbbb"},
                                      {kind::error, "Error: x"},
                                      {kind::notice, "Aborted"},
                                      {kind::tool, "t"}};
    tui::transcript_printer q;
    commit.clear();
    q.collect(more, false, 6, commit, live);
    const std::vector<screen_row> all{{"> aaaa", row_style::user},   {"  bbbb", row_style::user},
                                      {"", row_style::plain},        {"Error:", row_style::error},
                                      {"x", row_style::error},       {"", row_style::plain},
                                      {"Aborte", row_style::notice}, {"d", row_style::notice},
                                      {"", row_style::plain},        {"t", row_style::tool}};
    CHECK(commit == all);
    q.reset();
    commit.clear();
    q.collect(more, false, 6, commit, live);
    CHECK(commit == all);
}

TEST_CASE("tui layout: the live region rows, queued messages and the input cursor",
          "[tui][layout]") {
    struct row {
        const char* name;
        tui::live_input in;
        std::vector<screen_row> rows;
        int cursor_row, cursor_col;
    };
    auto with_queue = live_of(U"", 0, 20);
    with_queue.queued = {"a", "b", "c", "d", "e"};
    with_queue.loader = "Retrying";
    with_queue.stream_rows = {screen_row{"partial", row_style::assistant}};
    const std::string r20 = rule_of(20), r6 = rule_of(6);
    const row rows[] = {
        {"plain input",
         live_of(U"hi", 2, 20),
         {{"", row_style::plain},
          {r20, row_style::rule},
          {"> hi", row_style::input},
          {"st", row_style::status}},
         2,
         4},
        {"cursor inside the text",
         live_of(U"hi", 1, 20),
         {{"", row_style::plain},
          {r20, row_style::rule},
          {"> hi", row_style::input},
          {"st", row_style::status}},
         2,
         3},
        {"three queued shown, the rest counted; loader; streaming row",
         with_queue,
         {{"partial", row_style::assistant},
          {"Queued: a", row_style::notice},
          {"Queued: b", row_style::notice},
          {"Queued: c", row_style::notice},
          {"\u2026 and 2 more queued", row_style::notice},
          {"Retrying", row_style::warning},
          {r20, row_style::rule},
          {"> ", row_style::input},
          {"st", row_style::status}},
         7,
         2},
        {"input hard-wrapped at width - 2",
         live_of(U"abcdefghij", 10, 6),
         {{"", row_style::plain},
          {r6, row_style::rule},
          {"> abcd", row_style::input},
          {"  efgh", row_style::input},
          {"  ij", row_style::input},
          {"st", row_style::status}},
         4,
         4},
        {"words wrap at the last space that fits, the cursor follows",
         live_of(U"one two three", 13, 11),
         {{"", row_style::plain},
          {rule_of(11), row_style::rule},
          {"> one two ", row_style::input},
          {"  three", row_style::input},
          {"st", row_style::status}},
         3,
         7},
        {"a cursor at a word-wrap boundary starts the next row",
         live_of(U"one two three", 8, 11),
         {{"", row_style::plain},
          {rule_of(11), row_style::rule},
          {"> one two ", row_style::input},
          {"  three", row_style::input},
          {"st", row_style::status}},
         3,
         2},
        {"a cursor after a full row goes to the next row",
         live_of(U"abcd", 4, 6),
         {{"", row_style::plain},
          {r6, row_style::rule},
          {"> abcd", row_style::input},
          {"  ", row_style::input},
          {"st", row_style::status}},
         3,
         2},
        {"line breaks end rows, tabs are 4 columns",
         live_of(U"a\tb\nc", 5, 20),
         {{"", row_style::plain},
          {r20, row_style::rule},
          {"> a    b", row_style::input},
          {"  c", row_style::input},
          {"st", row_style::status}},
         3,
         3},
        {"a short terminal shows the input rows around the cursor",
         live_of(U"abcdefghij", 10, 6, 4),
         {{"", row_style::plain},
          {r6, row_style::rule},
          {"  ij", row_style::input},
          {"st", row_style::status}},
         2,
         4},
        {"the same with the cursor on the first row",
         live_of(U"abcdefghij", 1, 6, 4),
         {{"", row_style::plain},
          {r6, row_style::rule},
          {"> abcd", row_style::input},
          {"st", row_style::status}},
         2,
         3},
    };
    for (const auto& r : rows) {
        INFO(r.name);
        const auto out = tui::compose_live(r.in);
        CHECK(out.rows == r.rows);
        CHECK(out.cursor_row == r.cursor_row);
        CHECK(out.cursor_col == r.cursor_col);
    }

    // a terminal smaller than the fixed rows drops rows from the top and keeps the cursor's
    auto tiny = with_queue;
    tiny.height = 2;
    const auto out = tui::compose_live(tiny);
    CHECK(out.rows == std::vector<screen_row>{{"> ", row_style::input}, {"st", row_style::status}});
    CHECK(out.cursor_row == 0);
    CHECK(out.cursor_col == 2);
}

TEST_CASE("tui: /autoretry on|off toggles auto-retry (the design's TUI toggle), not a message") {
    tui_controller c;
    c.set_auto_retry_state(true);
    auto off = c.on_enter("/autoretry off");
    CHECK(off.type == tui_command::kind::set_auto_retry);
    CHECK_FALSE(off.enabled);
    CHECK(off.consume);
    CHECK(off.text == "/autoretry off");
    CHECK(c.on_enter("/autoretry on").enabled);
    CHECK_FALSE(c.on_enter("/autoretry").enabled);  // toggles the current state (on)
    CHECK_FALSE(c.busy());
    c.on_auto_retry_set(false, "/home/u/.coagent/settings.json", "");
    CHECK(c.transcript().back().text ==
          "Auto-retry is off (saved to /home/u/.coagent/settings.json)");
    CHECK(c.on_enter("/autoretry").enabled);  // now off: the toggle turns it on
    c.on_auto_retry_set(true, "x", "read-only file system");
    CHECK(c.transcript().back().type == kind::error);
    CHECK(c.transcript().back().text ==
          "Auto-retry is on for this session, but saving it failed: read-only file system");
    // a wrong argument is a local error; the old "/retry on" says where the toggle went
    CHECK(c.on_enter("/autoretry maybe").type == tui_command::kind::none);
    CHECK(c.transcript().back().text == "Usage: /autoretry on|off, found \"maybe\"");
    CHECK(c.on_enter("/retry on").type == tui_command::kind::none);
    CHECK(c.transcript().back().text ==
          "Usage: /retry (no argument); /autoretry on|off turns automatic retry on or off");
    CHECK_FALSE(c.busy());
}

TEST_CASE("tui: slash commands are local, an unknown one is an error and never a message") {
    tui_controller c;
    const auto n = c.transcript().size();
    auto r = c.on_enter("/frobnicate now");
    CHECK(r.type == tui_command::kind::none);
    CHECK(r.consume);
    CHECK_FALSE(c.busy());
    REQUIRE(c.transcript().size() == n + 1);
    CHECK(c.transcript().back().type == kind::error);
    CHECK(c.transcript().back().text ==
          "Unknown command: /frobnicate (/help lists the commands; it was not sent to the model)");
    // a path or a lone slash is a message
    CHECK(c.on_enter("/usr/bin/env is where?").type == tui_command::kind::submit);
    tui_controller d;
    CHECK(d.on_enter("/ hello").type == tui_command::kind::submit);
    tui_controller e;
    CHECK(e.on_enter("//comment").type == tui_command::kind::submit);

    tui_controller h;
    CHECK(h.on_enter("/help").type == tui_command::kind::none);
    REQUIRE(h.transcript().size() == 1);
    const std::string& help = h.transcript()[0].text;
    CHECK(
        help.starts_with("Commands (Tab completes a name):\n  /help \u2014 list the commands\n"
                         "  /model [provider/id] \u2014 switch the model (without one: a "
                         "numbered list to pick from)\n"));
    CHECK(help.ends_with("\n  /quit \u2014 exit coagent"));
    std::vector<std::string> names;
    for (const auto& cmd : slash_commands()) names.emplace_back(cmd.name);
    CHECK(names == std::vector<std::string>{"/help", "/model", "/new", "/resume", "/compact",
                                            "/autoretry", "/retry", "/settings", "/quit"});

    tui_controller m;
    auto model = m.on_enter("/model  openai/gpt-4o ");
    CHECK(model.type == tui_command::kind::set_model);
    CHECK(model.text == "openai/gpt-4o");
    CHECK(m.on_enter("/model").type == tui_command::kind::set_model);
    CHECK(m.on_enter("/model").text.empty());
    CHECK(m.on_enter("/model gpt-4o").type == tui_command::kind::none);
    CHECK(m.transcript().back().text == "Usage: /model [provider/id], found \"gpt-4o\"");
    CHECK(m.on_enter("/new").type == tui_command::kind::new_session);
    CHECK(m.on_enter("/resume").type == tui_command::kind::resume);
    auto compact = m.on_enter("/compact keep the file names");
    CHECK(compact.type == tui_command::kind::compact);
    CHECK(compact.text == "keep the file names");
    CHECK(m.on_enter("/settings").type == tui_command::kind::show_settings);
    CHECK(m.on_enter("/quit").type == tui_command::kind::exit);

    // while a turn runs: /new, /resume and /compact wait
    driver busy;
    busy.c.on_enter("hi");
    busy.ev(agent_start_event{});
    CHECK(busy.c.on_enter("/new").type == tui_command::kind::none);
    CHECK(busy.c.transcript().back().text ==
          "/new: wait for the current turn to end (or press Esc)");
    CHECK(busy.c.on_enter("/compact").type == tui_command::kind::none);
}

TEST_CASE("tui: Tab completes a slash command name, candidates in the status line") {
    auto one = complete_slash("/mo");
    REQUIRE(one);
    CHECK(one->text == "/model ");
    auto two = complete_slash("/re");
    REQUIRE(two);
    CHECK(two->text == "/re");
    CHECK(two->candidates == std::vector<std::string>{"/resume", "/retry"});
    auto all = complete_slash("/");
    REQUIRE(all);
    CHECK(all->candidates.size() == slash_commands().size());
    CHECK_FALSE(complete_slash("/zz"));
    CHECK_FALSE(complete_slash("/model x"));
    CHECK_FALSE(complete_slash("hello"));
    CHECK_FALSE(complete_slash(""));

    tui_controller c;
    auto r = c.on_tab("/au");
    CHECK(r.type == tui_command::kind::set_input);
    CHECK(r.text == "/autoretry ");
    r = c.on_tab("/re");
    CHECK(r.type == tui_command::kind::set_input);
    CHECK(c.status_text() == "/resume  /retry");
    c.on_other_key();
    CHECK(c.status_text() != "/resume  /retry");
    CHECK(c.on_tab("plain text").type == tui_command::kind::edit);
}

TEST_CASE("tui: a pick list, a number picks, Esc cancels, other input is itself") {
    tui_controller c;
    c.begin_pick(tui_command::kind::set_model, "Models:", {"faux/faux", "local/m1"},
                 {"faux/faux", "local/m1"});
    CHECK(c.picking());
    REQUIRE(c.transcript().size() == 1);
    CHECK(c.transcript()[0].text == "Models:\n1. faux/faux\n2. local/m1");
    CHECK(c.status_text().find("a number and enter: pick") != std::string::npos);
    auto r = c.on_enter(" 2 ");
    CHECK(r.type == tui_command::kind::set_model);
    CHECK(r.text == "local/m1");
    CHECK_FALSE(c.picking());

    c.begin_pick(tui_command::kind::resume, "Sessions:", {"a"}, {"/s/a.jsonl"});
    CHECK(c.on_escape().type == tui_command::kind::none);
    CHECK_FALSE(c.picking());
    CHECK(c.transcript().back().text == "Cancelled");

    c.begin_pick(tui_command::kind::resume, "Sessions:", {"a"}, {"/s/a.jsonl"});
    CHECK(c.on_enter("3").type == tui_command::kind::submit);  // out of range: a message
    CHECK_FALSE(c.picking());
}

TEST_CASE("tui: /retry retries now during a backoff, else resends the last failed prompt") {
    driver d;
    CHECK(d.c.on_enter("/retry").type == tui_command::kind::none);
    CHECK(d.c.transcript().back().text == "Nothing to retry: no prompt has failed");

    d.c.on_enter("fails");
    d.ev(agent_start_event{});
    auto_retry_start_event rs;
    rs.attempt = 1;
    rs.max_attempts = 3;
    rs.delay_ms = 2000;
    rs.error_message = "503";
    d.ev(rs);
    CHECK(d.c.on_enter("/retry").type == tui_command::kind::retry_now);
    d.ev(agent_settled_event{});
    prompt_result failed;
    failed.outcome = prompt_result::status::failed;
    d.c.on_prompt_done("fails", failed);
    auto again = d.c.on_enter("/retry");
    CHECK(again.type == tui_command::kind::submit);
    CHECK(again.text == "fails");
    CHECK(again.consume);
    CHECK(d.c.busy());
    d.ev(agent_settled_event{});
    d.c.on_prompt_done("fails", prompt_result{});  // it worked this time
    CHECK(d.c.on_enter("/retry").type == tui_command::kind::none);
}

TEST_CASE("tui: Esc while streaming puts the queued follow-ups back into the input") {
    driver d;
    d.c.on_enter("first");
    d.ev(agent_start_event{});
    CHECK(d.c.on_enter("second").queued);
    CHECK(d.c.on_enter("third").queued);
    auto esc = d.c.on_escape();
    CHECK(esc.type == tui_command::kind::abort);
    CHECK(esc.restore == "second\nthird");
    CHECK(d.c.queued().empty());
    d.ev(agent_settled_event{});
    prompt_result aborted;
    aborted.outcome = prompt_result::status::aborted;
    const auto n = d.c.transcript().size();
    d.c.on_prompt_done("second", aborted);
    d.c.on_prompt_done("third", aborted);
    CHECK(d.c.transcript().size() == n);  // not "Queued message dropped"
    // nothing queued: Esc restores nothing
    driver e;
    e.c.on_enter("only");
    e.ev(agent_start_event{});
    CHECK(e.c.on_escape().restore.empty());
}

TEST_CASE("tui: a second Ctrl+C exits only within 2 s of the first") {
    tui_controller c;
    CHECK(c.on_ctrl_c(true, t0).type == tui_command::kind::clear_input);
    REQUIRE(c.next_wakeup());
    CHECK(*c.next_wakeup() == t0 + 2001ms);
    CHECK(c.on_ctrl_c(true, t0 + 2000ms).type == tui_command::kind::exit);

    tui_controller late;
    late.on_ctrl_c(true, t0);
    CHECK(late.on_ctrl_c(true, t0 + 2001ms).type == tui_command::kind::clear_input);  // re-armed
    CHECK(late.on_ctrl_c(true, t0 + 2500ms).type == tui_command::kind::exit);

    tui_controller tick;
    tick.on_ctrl_c(true, t0);
    tick.on_tick(t0 + 2001ms);  // the hint goes away by itself
    CHECK(tick.status_text() != "Press Ctrl+C again to exit");
    CHECK_FALSE(tick.next_wakeup());
    CHECK(tick.on_ctrl_c(true, t0 + 2100ms).type == tui_command::kind::clear_input);
}

// ---- the command line (issue 23) -------------------------------------------------------------

TEST_CASE("command line: the model when none is named, settings, then the first key, then faux") {
    const std::vector<provider_candidate> none{
        {"anthropic", "claude-sonnet-4-5", ""}, {"openai", "gpt-4.1", ""}, {"local", "m1", ""}};
    model_selection_settings empty;
    auto c = choose_model(empty, "default", none);
    CHECK(c.provider == "faux");
    CHECK(c.model.empty());
    CHECK(c.reason == "no API key found: the offline faux provider");

    // the order anthropic, openai, then models.json's providers
    auto keys = none;
    keys[2].credential = "/h/models.json (apiKey)";
    c = choose_model(empty, "default", keys);
    CHECK((c.provider == "local" && c.model == "m1"));
    CHECK(c.reason == "a key in /h/models.json (apiKey)");
    keys[1].credential = "OPENAI_API_KEY";
    c = choose_model(empty, "default", keys);
    CHECK((c.provider == "openai" && c.model == "gpt-4.1"));
    keys[0].credential = "ANTHROPIC_API_KEY";
    c = choose_model(empty, "default", keys);
    CHECK((c.provider == "anthropic" && c.model == "claude-sonnet-4-5"));
    CHECK(c.reason == "a key in ANTHROPIC_API_KEY");

    // defaultModel alone picks the model of the chosen provider; "provider/id" both
    model_selection_settings m;
    m.default_model = "gpt-4o";
    c = choose_model(m, "/h/settings.json", keys);
    CHECK((c.provider == "anthropic" && c.model == "gpt-4o"));
    m.default_model = "openai/gpt-4o";
    c = choose_model(m, "/h/settings.json", keys);
    CHECK((c.provider == "openai" && c.model == "gpt-4o"));
    CHECK(c.reason == "defaultModel in /h/settings.json");

    // defaultProvider wins over the keys, with or without a key of its own
    model_selection_settings p;
    p.default_provider = "local";
    c = choose_model(p, "/p/.coagent/settings.json", keys);
    CHECK((c.provider == "local" && c.model.empty()));
    CHECK(c.reason == "defaultProvider in /p/.coagent/settings.json");
    p.default_model = "m2";
    c = choose_model(p, "x", none);
    CHECK((c.provider == "local" && c.model == "m2"));

    const model_info faux_model("faux", "faux", "faux");
    CHECK(model_choice_line(faux_model, choose_model(empty, "default", none)) ==
          "coagent: using faux/faux (no API key found: the offline faux provider; "
          "--provider/--model or defaultProvider choose another)");
}

TEST_CASE("command line: --list-models filters by provider/id, case-insensitive, aligned") {
    const std::vector<app_catalog::listed_model> rows{
        {"faux", "faux", 128000, "not needed"},
        {"openai", "gpt-4o", 128000, "OPENAI_API_KEY"},
        {"anthropic", "claude-haiku-4-5", 200000, ""}};
    CHECK(format_model_list(rows, "") ==
          "provider   model             context  credential\n"
          "faux       faux              128000   not needed\n"
          "openai     gpt-4o            128000   OPENAI_API_KEY\n"
          "anthropic  claude-haiku-4-5  200000   none\n");
    CHECK(format_model_list(rows, "OpenAI/") ==
          "provider  model   context  credential\n"
          "openai    gpt-4o  128000   OPENAI_API_KEY\n");
    CHECK(format_model_list(rows, "gemini") == "no model matches \"gemini\"\n");
}

TEST_CASE("command line: --resume picks by number, anything else is refused") {
    CHECK(parse_session_choice("1\n", 3) == std::optional<std::size_t>(0));
    CHECK(parse_session_choice(" 3 \r\n", 3) == std::optional<std::size_t>(2));
    CHECK_FALSE(parse_session_choice("0", 3));
    CHECK_FALSE(parse_session_choice("4", 3));
    CHECK_FALSE(parse_session_choice("", 3));
    CHECK_FALSE(parse_session_choice("2x", 3));
    CHECK_FALSE(parse_session_choice("-1", 3));

    std::vector<session_summary> s{{"/s/a.jsonl", {}, "first\nquestion"}, {"/s/b.jsonl", {}, ""}};
    const std::string list = format_session_choices(s);
    CHECK(list.find("1. ") == 0);
    CHECK(list.find("  first question\n2. ") != std::string::npos);
    CHECK(list.ends_with("  (no message)\n"));
}

TEST_CASE("tui: the footer shows the session's retries, waste and backoff (issue 22)") {
    tui_controller c;
    c.set_model_label("faux/faux");
    session_usage u;
    CHECK(tui_controller::usage_label(u).empty());
    c.set_usage(u);
    CHECK(c.footer_text() == "faux/faux");
    CHECK(c.status_text().starts_with("enter: send"));
    u.retries = 2;
    u.wasted.input = 15;
    u.wasted.output = 3;
    u.backoff_ms = 3000;
    CHECK(tui_controller::usage_label(u) ==
          "2 retries \u00b7 18 tokens wasted \u00b7 3.0 s in backoff");
    const auto before = c.revision();
    c.set_usage(u);
    CHECK(c.revision() > before);
    CHECK(c.footer_text() ==
          "faux/faux \u00b7 2 retries \u00b7 18 tokens wasted \u00b7 3.0 s in backoff");
    u.retries = 1;
    u.wasted.cost.total = 0.0012;
    CHECK(tui_controller::usage_label(u) ==
          "1 retry \u00b7 18 tokens wasted \u00b7 $0.0012 wasted \u00b7 3.0 s in backoff");
}

TEST_CASE("tui: the working spinner turns every 100 ms and counts the prompt's seconds") {
    driver d;
    d.start_prompt("x");
    CHECK(d.c.loader_text() == "\u280b Working\u2026 0s (esc to interrupt)");
    REQUIRE(d.c.next_wakeup());
    CHECK(*d.c.next_wakeup() == t0 + 100ms);
    d.advance(99ms);
    CHECK(d.c.loader_text() == "\u280b Working\u2026 0s (esc to interrupt)");
    auto rev = d.c.revision();
    d.advance(1ms);
    CHECK(d.c.revision() != rev);  // a new frame
    CHECK(d.c.loader_text() == "\u2819 Working\u2026 0s (esc to interrupt)");
    CHECK(*d.c.next_wakeup() == t0 + 200ms);
    d.advance(2850ms);  // 2950 ms: frame 29 % 10 = 9
    CHECK(d.c.loader_text() == "\u280f Working\u2026 2s (esc to interrupt)");
    d.advance(50ms);
    CHECK(d.c.loader_text() == "\u280b Working\u2026 3s (esc to interrupt)");
    d.advance(62'000ms);
    CHECK(d.c.loader_text() == "\u280b Working\u2026 1m 5s (esc to interrupt)");
    d.settle();
    CHECK(d.c.loader_text().empty());
    CHECK_FALSE(d.c.next_wakeup());  // idle: nothing moves

    CHECK(format_elapsed(0) == "0s");
    CHECK(format_elapsed(59'999) == "59s");
    CHECK(format_elapsed(60'000) == "1m 0s");
    CHECK(format_elapsed(3'600'000 + 180'000) == "1h 3m");
}

TEST_CASE("tui: during a backoff the status line names the limit in words") {
    CHECK(limit_words(limit_kind::rate) == "rate limited");
    CHECK(limit_words(limit_kind::capacity) == "provider overloaded");
    CHECK(limit_words(limit_kind::transport) == "connection lost");
    CHECK(limit_words(limit_kind::quota) == "usage limit");
    CHECK(limit_words(limit_kind::billing) == "out of credit");
    CHECK(limit_words(limit_kind::server) == "provider error");
    CHECK(limit_words(limit_kind::none).empty());

    driver d;
    d.start_prompt("x");
    d.failed_attempt("429 Too Many Requests", true);
    auto_retry_start_event rs;
    rs.attempt = 1;
    rs.max_attempts = 3;
    rs.delay_ms = 2000;
    rs.error_message = "429 Too Many Requests";
    rs.limit = limit_kind::rate;
    d.ev(rs);
    CHECK(d.c.status_text() ==
          "enter: retry now \u00b7 esc: cancel the retry \u00b7 rate limited \u00b7 429 Too Many "
          "Requests");
    d.advance(2000ms);
    d.ev(agent_start_event{});  // the retried attempt: the limit is gone from the status line
    CHECK(d.c.status_text().find("rate limited") == std::string::npos);
}

TEST_CASE("tui: the footer has the model, tokens in and out, context use and cost") {
    model_info m("p", "m", "openai-completions", 200000);
    const auto with_usage = [](std::string text, token_usage u) {
        auto m = std::make_shared<message>(*assistant_msg(std::move(text)));
        m->usage = u;
        return message_ptr(std::move(m));
    };
    token_usage u1;
    u1.input = 1000;
    u1.cache_read = 200;
    u1.output = 300;
    u1.cost.total = 0.01;
    token_usage u2;
    u2.input = 9000;
    u2.output = 1000;
    u2.total_tokens = 10'000;
    u2.cost.total = 0.0023;
    const auto a1 = with_usage("one", u1), a2 = with_usage("two", u2);
    const std::vector<message_ptr> history{user_msg("q1"), a1, user_msg("q2"), a2};
    auto t = totals_of(history, m);
    CHECK(t.input == 10'200);
    CHECK(t.output == 1300);
    CHECK(t.context_tokens == 10'000);  // the last reply's whole context
    CHECK_FALSE(t.priced);              // the model has no prices: no cost shown
    CHECK(tui_controller::totals_label(t) == "10k in \u00b7 1.3k out \u00b7 5% of 200k context");
    m.cost.input = 3;
    t = totals_of(history, m);
    CHECK(t.priced);
    CHECK(tui_controller::totals_label(t) ==
          "10k in \u00b7 1.3k out \u00b7 5% of 200k context \u00b7 $0.0123");
    m.context_window = 0;  // unknown window: no percentage
    CHECK(tui_controller::totals_label(totals_of(history, m)) ==
          "10k in \u00b7 1.3k out \u00b7 $0.0123");

    tui_controller c;
    c.set_model_label("p/m");
    c.set_totals(t);
    session_usage u;
    u.retries = 1;
    c.set_usage(u);
    CHECK(c.footer_text() ==
          "p/m \u00b7 10k in \u00b7 1.3k out \u00b7 5% of 200k context \u00b7 $0.0123 \u00b7 1 "
          "retry");
    const auto rev = c.revision();
    c.set_totals(t);  // the same figures: nothing to redraw
    CHECK(c.revision() == rev);

    // the footer is the live region's last row
    auto in = live_of(U"", 0, 40);
    in.footer = "p/m \u00b7 12 in \u00b7 3 out";
    const auto out = tui::compose_live(in);
    REQUIRE(out.rows.size() == 5);
    CHECK(out.rows[3] == screen_row{"st", row_style::status});
    CHECK(out.rows[4] == screen_row{"p/m \u00b7 12 in \u00b7 3 out", row_style::status});
}

// ---- Markdown (issue 23) ------------------------------------------------------------------------

namespace {

std::vector<std::string> texts_of(const std::vector<screen_row>& rows) {
    std::vector<std::string> out;
    for (const auto& r : rows) out.push_back(r.text);
    return out;
}

std::vector<screen_row> flat(const std::vector<std::vector<screen_row>>& blocks) {
    std::vector<screen_row> out;
    for (const auto& b : blocks) out.insert(out.end(), b.begin(), b.end());
    return out;
}

}  // namespace

TEST_CASE("tui markdown: headings, emphasis, lists, quotes, code, tables and links laid out",
          "[tui][markdown]") {
    REQUIRE(utf8_locale);
    using ss = tui::span_style;
    const auto blocks = tui::markdown_blocks(
        "# Title here\n\nSome *emphasis*, **strong** and `code`, a [link](https://x.org).\n\n"
        "- one\n- two\n  1. nested\n\n> quoted text\n\n```cpp\nint main() { return 0; }\n```\n\n"
        "| a | bb |\n|---|----|\n| 1 | 22 |\n\n---\n",
        40);
    REQUIRE(blocks.size() == 7);
    CHECK(texts_of(flat(blocks)) ==
          std::vector<std::string>{"Title here",
                                   "",
                                   "Some emphasis, strong and code, a link",
                                   "(https://x.org).",
                                   "",
                                   "\u2022 one",
                                   "\u2022 two",
                                   "  1. nested",
                                   "",
                                   "\u2502 quoted text",
                                   "",
                                   "  int main() { return 0; }",
                                   "",
                                   "\u250c\u2500\u2500\u2500\u252c\u2500\u2500\u2500\u2500\u2510",
                                   "\u2502 a \u2502 bb \u2502",
                                   "\u251c\u2500\u2500\u2500\u253c\u2500\u2500\u2500\u2500\u2524",
                                   "\u2502 1 \u2502 22 \u2502",
                                   "\u2514\u2500\u2500\u2500\u2534\u2500\u2500\u2500\u2500\u2518",
                                   "",
                                   rule_of(40)});
    // the heading bold as one span; emphasis italic, strong bold, inline code, the link
    CHECK(blocks[0][0].spans == std::vector<tui::row_span>{{0, 10, ss::bold}});
    CHECK(blocks[1][1].spans ==
          std::vector<tui::row_span>{
              {5, 13, ss::italic}, {15, 21, ss::bold}, {26, 30, ss::code}, {34, 38, ss::link}});
    CHECK(blocks[1][2].spans == std::vector<tui::row_span>{{0, 15, ss::dim}});  // the url
    // fenced code: its own style, indented, never re-flowed
    CHECK(blocks[4][1].spans == std::vector<tui::row_span>{{2, 26, ss::code}});
    // the table's header is bold
    CHECK(blocks[5][2].spans[1] == tui::row_span{4, 5, ss::bold});

    // a paragraph wraps at words with its styles kept; a code line longer than the row is cut
    const auto narrow = tui::markdown_blocks("**two words** here\n\n    abcdefghij\n", 8);
    CHECK(texts_of(narrow[0]) == std::vector<std::string>{"two", "words", "here"});
    CHECK(narrow[0][0].spans == std::vector<tui::row_span>{{0, 3, ss::bold}});
    CHECK(texts_of(narrow[1]) == std::vector<std::string>{"", "  abcdef", "  ghij"});
}

TEST_CASE("tui markdown: escape sequences from the model stay neutralised", "[tui][markdown]") {
    REQUIRE(utf8_locale);
    const auto blocks = tui::markdown_blocks(
        "red \x1b[31mtext\x1b[0m &#27;[2J\n\n```\ncode \x1b]0;title\x07\n```\n", 40);
    for (const auto& r : flat(blocks)) {
        INFO(r.text);
        CHECK(r.text.find('\x1b') == std::string::npos);
        CHECK(r.text.find('\x07') == std::string::npos);
    }
    CHECK(blocks[0][0].text == "red \ufffd[31mtext\ufffd[0m \ufffd[2J");
}

TEST_CASE("tui markdown: a streaming reply commits each finished block once, the last stays live",
          "[tui][markdown]") {
    REQUIRE(utf8_locale);
    tui::transcript_printer p;
    p.set_markdown(true);
    std::vector<transcript_item> items{{kind::assistant, "# Head"}};
    std::vector<screen_row> commit, live;
    p.collect(items, true, 40, commit, live);
    CHECK(commit.empty());
    CHECK(texts_of(live) == std::vector<std::string>{"Head"});

    items[0].text += "\n\nfirst *para";  // the heading is complete: printed for good
    p.collect(items, true, 40, commit, live);
    CHECK(texts_of(commit) == std::vector<std::string>{"Head"});
    CHECK(texts_of(live) == std::vector<std::string>{"", "first *para"});

    commit.clear();
    items[0].text += "graph* done\n\n- item";
    p.collect(items, true, 40, commit, live);
    CHECK(texts_of(commit) == std::vector<std::string>{"", "first paragraph done"});
    CHECK(commit[1].spans == std::vector<tui::row_span>{{6, 15, tui::span_style::italic}});
    CHECK(texts_of(live) == std::vector<std::string>{"", "\u2022 item"});

    commit.clear();
    p.collect(items, true, 40, commit, live);
    CHECK(commit.empty());  // nothing is printed twice

    p.collect(items, false, 40, commit, live);  // the reply ended: the last block too
    CHECK(texts_of(commit) == std::vector<std::string>{"", "\u2022 item"});
    CHECK(live.empty());

    // a list ends at a blank line too: what follows it does not keep it live
    tui::transcript_printer lp;
    lp.set_markdown(true);
    std::vector<transcript_item> li{{kind::assistant, "- one\n- two\n\npara one\n\npara"}};
    commit.clear();
    lp.collect(li, true, 40, commit, live);
    CHECK(texts_of(commit) == std::vector<std::string>{"\u2022 one", "\u2022 two", "", "para one"});
    CHECK(texts_of(live) == std::vector<std::string>{"", "para"});
    // a line that follows a block directly may still change it: both stay live
    li[0].text += "\n| a |\n|---|\n|";
    commit.clear();
    lp.collect(li, true, 40, commit, live);
    CHECK(commit.empty());

    // off: the text as written
    tui::transcript_printer plain;
    commit.clear();
    std::vector<transcript_item> md{{kind::assistant, "**bold**"}};
    plain.collect(md, false, 40, commit, live);
    CHECK(texts_of(commit) == std::vector<std::string>{"**bold**"});
}

TEST_CASE("tui markdown: streamed in pieces, the rows printed equal the whole reply's layout",
          "[tui][markdown]") {
    REQUIRE(utf8_locale);
    const std::string doc =
        "# Title\n\nA paragraph with **bold\ntext** over two lines.\n\n- one\n- two\n\n  still "
        "two\n\n"
        "```\ncode 1\n\ncode 2\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n> quote\n> more\n\nend";
    for (const std::string& text :
         {doc, [&] {
              std::string crlf;  // CR LF line ends: no offsets, the whole text each time
              for (char ch : doc) crlf += ch == '\n' ? std::string("\r\n") : std::string(1, ch);
              return crlf;
          }()}) {
        for (std::size_t step : {1u, 7u, 50u}) {
            INFO("step " << step << (text.find('\r') != std::string::npos ? " CRLF" : " LF"));
            tui::transcript_printer p;
            p.set_markdown(true);
            std::vector<transcript_item> items{{kind::assistant, ""}};
            std::vector<screen_row> printed, live;
            for (std::size_t at = 0; at < text.size(); at += step) {
                items[0].text = text.substr(0, at + step);
                p.collect(items, true, 30, printed, live);
            }
            p.collect(items, false, 30, printed, live);
            CHECK(live.empty());
            CHECK(texts_of(printed) == texts_of(flat(tui::markdown_blocks(doc, 30))));
        }
    }
}

TEST_CASE("tui: thinking is its own item, dimmed and folded to one line (issue 24)", "[content]") {
    driver d;
    d.start_prompt("look");
    auto partial = assistant_msg("");
    d.ev(message_start_event{partial});
    for (const char* piece : {"Let me\n", "look ", "closely."}) {
        message_update_event u;
        u.message = partial;
        u.delta = piece;
        u.kind = delta_kind::thinking;
        d.ev(u);
    }
    message_update_event text;
    text.message = partial;
    text.delta = "A logo.";
    d.ev(text);
    d.ev(message_end_event{assistant_msg("A logo.")});
    const auto& t = d.c.transcript();
    REQUIRE(t.size() == 3);
    CHECK(t[1].type == kind::thinking);
    CHECK(t[1].text == "Let me\nlook closely.");
    CHECK(t[2].type == kind::assistant);
    CHECK(t[2].text == "A logo.");  // the thinking is not part of the reply

    tui::transcript_printer p;
    std::vector<screen_row> commit, live;
    std::vector<transcript_item> items{t[1], t[2]};
    p.collect(items, false, 40, commit, live);
    CHECK(commit ==
          std::vector<screen_row>{{"\u273b Thinking: Let me look closely.", row_style::notice},
                                  {"", row_style::plain},
                                  {"A logo.", row_style::assistant}});
    // one line whatever its length: cut with an ellipsis
    tui::transcript_printer q;
    commit.clear();
    q.collect(items, false, 20, commit, live);
    CHECK(commit.at(0) == screen_row{"\u273b Thinking: Let me \u2026", row_style::notice});
    // while it streams it is the live row, one line too
    tui::transcript_printer r;
    commit.clear();
    std::vector<transcript_item> streaming{{kind::thinking, "a\nb\nc\nd"}};
    r.collect(streaming, true, 40, commit, live);
    CHECK(commit.empty());
    CHECK(live == std::vector<screen_row>{{"\u273b Thinking: a b c d", row_style::notice}});
}

TEST_CASE(
    "tui: a park shows its line with a live countdown, Enter retries now, Esc cancels "
    "(issue 20)",
    "[tui][park]") {
    REQUIRE(utf8_locale);
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    const std::int64_t wall0 = 1'796'140'620'000;                   // 2026-12-01 15:57 UTC
    const std::int64_t until = wall0 + 2 * 3'600'000 + 3 * 60'000;  // 18:00
    driver d;
    d.c.set_wall_clock([&] {
        return wall0 + std::chrono::duration_cast<std::chrono::milliseconds>(d.now - t0).count();
    });
    d.start_prompt("hello");
    d.failed_attempt("429 usage limit", true);
    auto_retry_start_event s;
    s.attempt = 1;
    s.max_attempts = 3;
    s.delay_ms = until - wall0;
    s.error_message = "429 usage limit";
    s.limit = limit_kind::quota;
    d.ev(s);
    d.ev(retry_parked_event{until, limit_kind::quota, "429 usage limit"});
    CHECK(d.c.loader_text() ==
          "Usage limit (quota): resumes at 18:00 (in 2h 3m) \u00b7 enter: retry now \u00b7 esc: "
          "cancel");
    CHECK(d.c.escape_action() == esc_action::abort_retry);
    CHECK(d.c.on_enter("").type == tui_command::kind::retry_now);
    // live: the countdown wakes when its text changes (a minute later it says 2h 2m)
    REQUIRE(d.c.next_wakeup());
    CHECK(*d.c.next_wakeup() == t0 + 60'000ms);
    d.advance(60'000ms);
    CHECK(d.c.loader_text() ==
          "Usage limit (quota): resumes at 18:00 (in 2h 2m) \u00b7 enter: retry now \u00b7 esc: "
          "cancel");
    SECTION("Esc cancels: the failure line, the line goes") {
        CHECK(d.c.on_escape().type == tui_command::kind::abort_retry);
        d.retry_end(false, 1, "Retry cancelled");
        CHECK(d.lines(kind::error) ==
              std::vector<std::string>{"Retry failed after 1 attempts: Retry cancelled"});
        CHECK(d.c.loader_text().find("Usage limit") == std::string::npos);
    }
    SECTION("the park ends: the retried attempt's loader") {
        d.ev(agent_start_event{});
        CHECK(d.c.loader_text().find("Usage limit") == std::string::npos);
    }
    SECTION("another day: the date is shown") {
        driver e;
        e.c.set_wall_clock([&] { return wall0; });
        e.start_prompt("x");
        e.ev(retry_parked_event{wall0 + 3 * 86'400'000, limit_kind::rate, "429"});
        CHECK(e.c.loader_text() ==
              "Usage limit (rate): resumes at 2026-12-04 15:57 (in 3d 0h) \u00b7 enter: retry now "
              "\u00b7 esc: cancel");
    }
}

TEST_CASE(
    "tui: a park re-entered from the session file shows its line without a retry start "
    "(issue 20)",
    "[tui][park]") {
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    const std::int64_t wall0 = 1'796'140'620'000;
    driver d;
    d.c.set_wall_clock([&] { return wall0; });
    d.ev(retry_parked_event{wall0 + 90'000, limit_kind::quota, "429 usage limit"});
    CHECK(d.c.loader_text() ==
          "Usage limit (quota): resumes at 15:58 (in 1m 30s) \u00b7 enter: retry now \u00b7 esc: "
          "cancel");
    CHECK(d.c.escape_action() == esc_action::abort_retry);
    CHECK(d.c.on_enter("").type == tui_command::kind::retry_now);
    d.ev(agent_start_event{});
    CHECK(d.c.escape_action() ==
          esc_action::abort);  // the kept handler is back, the turn can be aborted
}

TEST_CASE("tui: Esc cancels a park re-entered from the session file like a live one (issue 20)",
          "[tui][park]") {
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    const std::int64_t wall0 = 1'796'140'620'000;
    driver d;
    d.c.set_wall_clock([&] { return wall0; });
    d.ev(retry_parked_event{wall0 + 90'000, limit_kind::quota, "429 usage limit"});
    CHECK(d.c.on_escape().type == tui_command::kind::abort_retry);
    d.retry_end(false, 1, "Retry cancelled");
    CHECK(d.lines(kind::error) ==
          std::vector<std::string>{"Retry failed after 1 attempts: Retry cancelled"});
    CHECK(d.c.loader_text().find("Usage limit") == std::string::npos);
}

TEST_CASE("print mode: one line when a prompt parks (issue 20)", "[park][wait]") {
    ::setenv("TZ", "UTC", 1);
    ::tzset();
    const std::int64_t wall0 = 1'796'140'620'000;
    CHECK(park_print_line(limit_kind::quota, wall0 + 7'380'000, 7'380'000, wall0, "429 x") ==
          "Usage limit (quota): resumes at 18:00 (in 2h 3m) \u2014 429 x");
}

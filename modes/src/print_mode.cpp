#include <coagent/modes/app.hpp>
#include <coagent/modes/tui_controller.hpp>
#include <coagent/modes/tui_text.hpp>
#include <coagent/modes/wait_text.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/json/serialize.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

namespace coagent {

// Text from a provider or a server goes to a terminal: sanitised as the TUI does (controls and
// escape sequences become U+FFFD), so a server cannot drive the user's terminal.
std::string retry_progress_line(const auto_retry_start_event& e) {
    return "Retrying (" + std::to_string(e.attempt) + "/" + std::to_string(e.max_attempts) +
           ") in " + format_wait(e.delay_ms) + "\u2026 \u2014 " + tui::sanitize(e.error_message);
}

std::string retry_failed_line(const auto_retry_end_event& e) {
    const std::string error = e.final_error.value_or("");
    return "Retry failed after " + std::to_string(e.attempt) +
           " attempts: " + (error.empty() ? std::string("Unknown error") : tui::sanitize(error));
}

std::string fallback_applied_line(const retry_fallback_applied_event& e) {
    return "Fallback: " + tui::sanitize(e.from) + " -> " + tui::sanitize(e.to);
}

std::string fallback_succeeded_line(const retry_fallback_succeeded_event& e) {
    return "Fallback succeeded on " + tui::sanitize(e.model);
}

std::string print_error_line(const prompt_result& r) {
    if (!r.error.empty()) return "Error: " + tui::sanitize(r.error);
    // no text: the status, in the form of an HTTP error without a body (docs/architecture.md
    // "Error text")
    if (r.last_assistant && r.last_assistant->error_status)
        return "Error: " + std::to_string(*r.last_assistant->error_status) +
               " status code (no body)";
    return "Error: Unknown error (the provider gave no text and no status)";
}

int run_print_mode(app_context& app) {
    auto& io = app.io();
    auto session = app.make_session(true);
    const bool json_mode = app.options().mode == app_mode::json;

    bool retry_failure_shown = false;
    std::optional<limit_kind> parked;  // retry.longWait "park": the limit the prompt waits out
    auto sub = session->subscribe([&](const event& e) {
        if (json_mode) {
            std::string line;
            append_json(line, e);
            line.push_back('\n');
            std::fwrite(line.data(), 1, line.size(), stdout);
            std::fflush(stdout);
            return;
        }
        if (const auto* s = std::get_if<auto_retry_start_event>(&e)) {
            // a wait above retry.maxDelayMs is a park (a backoff is capped at it): its one line
            // comes with retry_parked
            const std::int64_t max = session->config().retry.max_delay_ms;
            if (!(max > 0 && s->delay_ms > max)) std::cerr << retry_progress_line(*s) << std::endl;
        } else if (const auto* p = std::get_if<retry_parked_event>(&e)) {
            const std::int64_t now = wall_clock_ms();
            std::cerr << park_print_line(p->limit, p->until, p->until - now, now,
                                         tui::sanitize(p->error_message))
                      << std::endl;
            parked = p->limit;
        } else if (std::holds_alternative<agent_start_event>(e) && parked) {
            std::cerr << "Resuming after the usage limit (" << to_string(*parked) << ")\u2026"
                      << std::endl;
            parked.reset();
        } else if (const auto* x = std::get_if<auto_retry_end_event>(&e); x && !x->success) {
            std::cerr << retry_failed_line(*x) << std::endl;
            retry_failure_shown = true;
        } else if (const auto* f = std::get_if<retry_fallback_applied_event>(&e)) {
            std::cerr << fallback_applied_line(*f) << std::endl;
        } else if (const auto* fs = std::get_if<retry_fallback_succeeded_event>(&e)) {
            std::cerr << fallback_succeeded_line(*fs) << std::endl;
        }
    });

    int interrupted = 0;
    boost::asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        interrupted = sig;
        if (sig == SIGTERM && session->parked_until()) {
            // a park outlives the process: it stays open in the session file (--continue)
            app.stop_limits();
            io.stop();
            return;
        }
        session->abort();
    });

    std::optional<prompt_result> result;
    std::exception_ptr failure;
    // an open park of a continued session is re-entered first; the message runs after it
    const auto run = [](agent_session& s, std::string text,
                        std::vector<image_block> images) -> boost::asio::awaitable<prompt_result> {
        if (s.open_park_in_history()) {
            prompt_result parked_result = co_await s.resume_park();
            if (parked_result.outcome != prompt_result::status::succeeded) co_return parked_result;
            if (parked_result.last_assistant)
                std::cout << text_of(*parked_result.last_assistant) << std::endl;
        }
        co_return co_await s.prompt(std::move(text), std::move(images));
    };
    boost::asio::co_spawn(io, run(*session, *app.options().message, app.options().images),
                          [&](std::exception_ptr e, prompt_result r) {
                              failure = e;
                              result = std::move(r);
                              signals.cancel();
                              app.stop_limits();
                          });
    io.run();
    if (failure) std::rethrow_exception(failure);
    if (interrupted) return interrupted == SIGINT ? 130 : 143;
    if (!result) return 1;
    switch (result->outcome) {
        case prompt_result::status::succeeded:
            if (!json_mode) std::cout << text_of(*result->last_assistant) << std::endl;
            return 0;
        case prompt_result::status::aborted:
            return 130;
        default:
            // a retry chain's failure was already shown by its "Retry failed" line
            if (!json_mode && !retry_failure_shown)
                std::cerr << print_error_line(*result) << std::endl;
            return 1;
    }
}

}  // namespace coagent

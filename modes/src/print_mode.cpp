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
            std::cerr << retry_progress_line(*s) << std::endl;
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
        session->abort();
    });

    std::optional<prompt_result> result;
    std::exception_ptr failure;
    boost::asio::co_spawn(io, session->prompt(*app.options().message, app.options().images),
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

// Cancelling a prompt from another coroutine. The faux provider answers with 503s, so the
// session sits in a 10 s retry backoff; then:
//  1. another coroutine emits on a cancellation_signal whose slot is bound to async_prompt's
//     completion token: the backoff ends at once (auto_retry_end "Retry cancelled") and the
//     prompt completes with status aborted;
//  2. a deadline: `async_prompt(…) || timer.async_wait(…)` (awaitable operators) — the timer
//     wins, and the parallel group cancels the prompt through the same mechanism;
//  3. the session is still usable: the next prompt gets its reply.
// Exits 0 when all three behave so, and nothing waited out a 10 s backoff.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <cstdio>
#include <exception>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

double seconds_since(clk::time_point t) {
    return std::chrono::duration<double>(clk::now() - t).count();
}

// 1. the prompt, cancellable through `cancel`'s slot
asio::awaitable<void> ask(coagent::agent_session& s, asio::cancellation_signal& cancel, bool& ok) {
    const auto start = clk::now();
    coagent::prompt_result r = co_await s.async_prompt(
        "Say hello", asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
    std::printf("1. prompt completed after %.2f s: %s (%s)\n", seconds_since(start),
                r.outcome == coagent::prompt_result::status::aborted ? "aborted" : "not aborted",
                r.error.c_str());
    ok = r.outcome == coagent::prompt_result::status::aborted && r.error == "Retry cancelled" &&
         seconds_since(start) < 5.0;
}

// 1. …and another coroutine that gives up on it once it sits in a backoff
asio::awaitable<void> give_up(coagent::agent_session& s, asio::cancellation_signal& cancel) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    while (!s.is_retrying()) {
        t.expires_after(10ms);
        co_await t.async_wait(asio::use_awaitable);
    }
    t.expires_after(200ms);
    co_await t.async_wait(asio::use_awaitable);
    std::printf("1. cancelling (retry attempt %d in its backoff)\n", s.retry_attempt());
    cancel.emit(asio::cancellation_type::terminal);
}

// 2. a deadline, then 3. a prompt that succeeds
asio::awaitable<void> deadline_then_retry(coagent::agent_session& s, bool& ok) {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer deadline(co_await asio::this_coro::executor, 500ms);
    const auto start = clk::now();
    auto prompt = s.async_prompt("Say hello", asio::use_awaitable);
    auto timeout = deadline.async_wait(asio::use_awaitable);
    auto first = co_await (std::move(prompt) || std::move(timeout));
    std::printf("2. %s after %.2f s; session busy: %s\n",
                first.index() == 1 ? "deadline hit" : "prompt finished", seconds_since(start),
                s.is_busy() ? "yes" : "no");
    const bool deadline_ok = first.index() == 1 && !s.is_busy() && seconds_since(start) < 5.0;

    coagent::prompt_result r = co_await s.prompt("Say hello");
    std::printf("3. reply: %s\n",
                r.last_assistant ? coagent::text_of(*r.last_assistant).c_str() : "(none)");
    ok = deadline_ok && r.outcome == coagent::prompt_result::status::succeeded;
}

void rethrow(std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
}

}  // namespace

int main() {
    asio::io_context io;
    coagent::faux_options fo;
    fo.script = coagent::faux_script::parse(
        R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2},
            {"text":"Hello at last."}])",
        "<cancel_prompt>");
    coagent::session_options o;
    o.executor = io.get_executor();
    o.model_provider = std::make_shared<coagent::faux_provider>(std::move(fo));
    o.config.retry.base_delay_ms = 10000;  // nobody waits this out: every wait is cancelled
    coagent::agent_session session(std::move(o));
    auto sub = session.subscribe([](const coagent::event& e) {
        if (auto* s = std::get_if<coagent::auto_retry_start_event>(&e))
            std::printf("   auto_retry_start: attempt %d, waiting %lld ms\n", s->attempt,
                        static_cast<long long>(s->delay_ms));
        else if (auto* x = std::get_if<coagent::auto_retry_end_event>(&e))
            std::printf("   auto_retry_end: success %s, %s\n", x->success ? "true" : "false",
                        x->final_error ? x->final_error->c_str() : "");
    });

    asio::cancellation_signal cancel;
    bool cancelled_ok = false;
    asio::co_spawn(io, ask(session, cancel, cancelled_ok), rethrow);
    asio::co_spawn(io, give_up(session, cancel), rethrow);
    io.run();

    bool rest_ok = false;
    io.restart();
    asio::co_spawn(io, deadline_then_retry(session, rest_ok), rethrow);
    io.run();

    std::printf("%s\n", cancelled_ok && rest_ok ? "ok" : "FAILED");
    return cancelled_ok && rest_ok ? 0 : 1;
}

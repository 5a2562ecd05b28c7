// The smallest coagent program: one session on the in-process faux provider, one prompt. The
// provider answers the first request with a 503, so the session waits (a backoff of
// --base-delay-ms, 200 ms here by default) and retries by itself; `co_await prompt()` completes
// only when that retry chain has ended. The retry events are printed as they happen.
//
//   $ minimal
//   auto_retry_start: attempt 1/3 in 200 ms: 503 Service Unavailable: upstream overloaded
//   auto_retry_end: success after 1 retry
//   reply: Hello after one retry.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace asio = boost::asio;

int main() {
    asio::io_context io;

    // the faux provider plays a script, one step per request: a 503, then a reply
    coagent::faux_options fo;
    fo.script = coagent::faux_script::parse(
        R"([{"error":"503 Service Unavailable: upstream overloaded","status":503},
            {"text":"Hello after one retry."}])",
        "<minimal>");

    coagent::session_options o;
    o.executor = io.get_executor();  // the session lives on this executor
    o.model_provider = std::make_shared<coagent::faux_provider>(std::move(fo));
    o.config.retry.base_delay_ms = 200;  // the default is 2000
    coagent::agent_session session(std::move(o));

    // listeners run on the session's executor, synchronously, in event order
    auto sub = session.subscribe([](const coagent::event& e) {
        if (auto* s = std::get_if<coagent::auto_retry_start_event>(&e))
            std::printf("auto_retry_start: attempt %d/%d in %lld ms: %s\n", s->attempt,
                        s->max_attempts, static_cast<long long>(s->delay_ms),
                        s->error_message.c_str());
        else if (auto* x = std::get_if<coagent::auto_retry_end_event>(&e))
            std::printf("auto_retry_end: %s after %d %s\n", x->success ? "success" : "failure",
                        x->attempt, x->attempt == 1 ? "retry" : "retries");
    });

    int exit_code = 1;
    // a captureless coroutine with its state as parameters (docs/contributing.md, g++ 12)
    auto run = [](coagent::agent_session& s, int& rc) -> asio::awaitable<void> {
        coagent::prompt_result r = co_await s.prompt("Say hello");
        if (r.outcome == coagent::prompt_result::status::succeeded) {
            std::printf("reply: %s\n", coagent::text_of(*r.last_assistant).c_str());
            rc = 0;
        } else {
            std::printf("failed: %s\n", r.error.c_str());
        }
    };
    asio::co_spawn(io, run(session, exit_code), [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);  // a bug: let it end the program loudly
    });
    io.run();
    return exit_code;
}

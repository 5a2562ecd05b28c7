// The consumer program of the install_consumer and subdirectory_consumer tests: one session on
// the faux provider, one 503 then a reply, the retry events printed. Exit 0 when the prompt
// succeeded after exactly one retry.
#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <exception>

namespace asio = boost::asio;

int main() {
    asio::io_context io;
    coagent::faux_options fo;
    fo.script = coagent::faux_script::parse(
        R"([{"error":"503 Service Unavailable","status":503},{"text":"Hello, consumer."}])",
        "<consumer>");
    coagent::session_options o;
    o.executor = io.get_executor();
    o.model_provider = std::make_shared<coagent::faux_provider>(std::move(fo));
    o.config.retry.base_delay_ms = 10;
    coagent::agent_session session(std::move(o));

    int starts = 0, ends = 0;
    auto sub = session.subscribe([&](const coagent::event& e) {
        if (auto* s = std::get_if<coagent::auto_retry_start_event>(&e)) {
            ++starts;
            std::printf("auto_retry_start attempt=%d delayMs=%lld error=%s\n", s->attempt,
                        static_cast<long long>(s->delay_ms), s->error_message.c_str());
        } else if (auto* x = std::get_if<coagent::auto_retry_end_event>(&e)) {
            ++ends;
            std::printf("auto_retry_end success=%s attempt=%d\n", x->success ? "true" : "false",
                        x->attempt);
        }
    });

    bool ok = false;
    session.async_prompt("hi", [&](std::exception_ptr e, coagent::prompt_result r) {
        if (e) std::rethrow_exception(e);
        ok = r.outcome == coagent::prompt_result::status::succeeded;
        std::printf("reply: %s\n",
                    r.last_assistant ? coagent::text_of(*r.last_assistant).c_str() : "(none)");
    });
    io.run();
    return ok && starts == 1 && ends == 1 ? 0 : 1;
}

// The HTTP layer's costs:
//  (a) sse_parse: the sans-io SSE parser alone over an OpenAI-style stream in memory, fed in
//      16 KiB reads (events/s, bytes/s);
//  (b) sse_decode: parser + OpenAI stream decoder filling an assistant message;
//  (c) stream_loopback/<api>: one streamed reply of 10k chunks from coagent-fakellm on another
//      thread over 127.0.0.1 through http_provider (events/s and MB/s of SSE body, keep-alive);
//  (d) retried_turn: one session prompt over loopback whose first two attempts get 503 and the
//      third a streamed reply (baseDelayMs 0): wall and CPU time per turn (process CPU, both
//      threads).

#include <coagent/providers/fakellm.hpp>
#include <coagent/providers/http_protocol.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/sse_parser.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

namespace asio = boost::asio;
using namespace coagent;

namespace {

constexpr int chunks_per_reply = 10000;

std::string words(int n) {
    std::string t;
    for (int i = 0; i < n; ++i) t += i == 0 ? "token" : " token";
    return t;
}

// An OpenAI-style SSE body of `n` content chunks, as fakellm sends it.
std::string openai_stream(int n) {
    fakellm::step s;
    s.type = fakellm::step::kind::text;
    s.text = words(n);
    const auto plan = fakellm::plan_stream(s, fakellm::api::openai, "bench-model", 100, 1);
    std::string out;
    for (const auto& v : {plan.head, plan.chunks, plan.tail})
        for (const auto& e : v) out += e;
    return out;
}

struct null_observer final : stream_observer {
    void on_message_start(const message&) override {}
    void on_text_delta(const message&, std::string_view) override {}
};

void sse_parse(benchmark::State& state) {
    const std::string body = openai_stream(chunks_per_reply);
    std::uint64_t events = 0;
    for (auto _ : state) {
        sse_parser p;
        std::string_view rest = body;
        while (!rest.empty()) {
            const auto n = std::min<std::size_t>(rest.size(), 16 * 1024);
            p.feed(rest.substr(0, n), [&](const sse_event& e) { events += e.data.size() > 0; });
            rest.remove_prefix(n);
        }
        p.finish();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
    state.SetItemsProcessed(static_cast<std::int64_t>(events));
    state.counters["events_per_s"] =
        benchmark::Counter(double(events), benchmark::Counter::kIsRate);
}
BENCHMARK(sse_parse)->Unit(benchmark::kMicrosecond);

void sse_decode(benchmark::State& state) {
    const std::string body = openai_stream(chunks_per_reply);
    std::uint64_t events = 0;
    null_observer obs;
    for (auto _ : state) {
        sse_parser p;
        message out;
        auto d = http_protocol::stream_decoder::make(http_protocol::api_kind::openai_completions);
        std::string_view rest = body;
        while (!rest.empty()) {
            const auto n = std::min<std::size_t>(rest.size(), 16 * 1024);
            p.feed(rest.substr(0, n), [&](const sse_event& e) {
                ++events;
                d->on_event(e, out, obs);
            });
            rest.remove_prefix(n);
        }
        d->on_end(out);
        if (out.stop != stop_reason::stop) std::abort();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
    state.SetItemsProcessed(static_cast<std::int64_t>(events));
    state.counters["events_per_s"] =
        benchmark::Counter(double(events), benchmark::Counter::kIsRate);
}
BENCHMARK(sse_decode)->Unit(benchmark::kMicrosecond);

// coagent-fakellm on its own thread and io_context.
struct server_thread {
    asio::io_context io{1};
    std::unique_ptr<fakellm::server> server;
    std::thread thread;
    explicit server_thread(const std::string& script) {
        fakellm::server_options o;
        o.steps = fakellm::script::parse(script, "<bench>");
        server = std::make_unique<fakellm::server>(io.get_executor(), std::move(o));
        server->start();
        thread = std::thread([this] { io.run(); });
    }
    ~server_thread() {
        asio::post(io, [this] { server->stop(); });
        thread.join();
    }
    std::string base_url() const {
        return "http://127.0.0.1:" + std::to_string(server->port()) + "/v1";
    }
};

void stream_loopback(benchmark::State& state) {
    const auto api = state.range(0) == 0 ? http_protocol::api_kind::openai_completions
                                         : http_protocol::api_kind::anthropic_messages;
    server_thread srv(R"([{"text":")" + words(chunks_per_reply) + R"(","times":1000000000}])");
    http_provider_options o;
    o.api = api;
    o.base_url = srv.base_url();
    o.model = model_info{"bench", "bench-model", std::string(http_protocol::to_string(api)), 0, 0};
    http_provider p(o);
    asio::io_context io(1);
    provider_request req;
    req.model = o.model;
    req.messages.push_back(std::make_shared<message>(make_user_message("go")));
    null_observer obs;
    std::uint64_t bytes = 0;
    for (auto _ : state) {
        message out;
        abort_signal abort;
        asio::co_spawn(io, p.stream(req, out, obs, abort), [](std::exception_ptr e) {
            if (e) std::abort();  // the provider reports failures as values
        });
        io.restart();
        io.run();
        if (out.stop != stop_reason::stop) {
            state.SkipWithError(out.error_message.value_or("stream failed").c_str());
            break;
        }
        bytes += text_of(out).size();
    }
    // SSE body bytes per reply, measured once from the same plan fakellm sends
    fakellm::step s;
    s.text = words(chunks_per_reply);
    const auto plan = fakellm::plan_stream(s,
                                           api == http_protocol::api_kind::openai_completions
                                               ? fakellm::api::openai
                                               : fakellm::api::anthropic,
                                           "bench-model", 2, 1);
    std::size_t body = 0, events = 0;
    for (const auto& v : {plan.head, plan.chunks, plan.tail}) {
        events += v.size();
        for (const auto& e : v) body += e.size();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body));
    state.counters["events_per_s"] =
        benchmark::Counter(double(state.iterations() * events), benchmark::Counter::kIsRate);
    state.counters["connections"] = static_cast<double>(p.connections_opened());
    benchmark::DoNotOptimize(bytes);
}
BENCHMARK(stream_loopback)
    ->Arg(0)
    ->Arg(1)
    ->ArgName("anthropic")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void retried_turn(benchmark::State& state) {
    constexpr int max_turns = 5000;
    std::string script = "[";
    for (int i = 0; i < max_turns; ++i)
        script +=
            std::string(i ? "," : "") +
            R"({"status":503,"body":{"error":{"message":"Service Unavailable: upstream overloaded"}},"times":2},)"
            R"({"text":"Hello after two retries, streamed in a few words."})";
    script += "]";
    server_thread srv(script);
    http_provider_options o;
    o.api = http_protocol::api_kind::openai_completions;
    o.base_url = srv.base_url();
    o.model = model_info{"bench", "bench-model", "openai-completions", 0, 0};
    auto p = std::make_shared<http_provider>(o);
    asio::io_context io(1);
    int turns = 0;
    for (auto _ : state) {
        if (++turns > max_turns) {
            state.SkipWithError("script too short");
            break;
        }
        session_options so;
        so.executor = io.get_executor();
        so.model_provider = p;
        so.config.retry.base_delay_ms = 0;
        agent_session s(std::move(so));
        bool ok = false;
        asio::co_spawn(io, s.prompt("hi"), [&](std::exception_ptr e, prompt_result r) {
            ok = !e && r.outcome == prompt_result::status::succeeded;
        });
        io.restart();
        io.run();
        if (!ok) {
            state.SkipWithError("turn failed");
            break;
        }
    }
    state.counters["requests_per_turn"] = 3;
}
BENCHMARK(retried_turn)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime()
    ->MeasureProcessCPUTime()
    ->Iterations(2000);

}  // namespace

BENCHMARK_MAIN();

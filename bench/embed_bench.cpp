// Embedding figures (issue 9), Google Benchmark:
//  (a) server_sessions/<connections>/<baseDelayMs>: sessions per second the example HTTP server's
//      logic (examples/prompt_server.hpp, the very code of examples/http_server) sustains on
//      loopback. The server's io_context runs on its own thread; the client keeps <connections>
//      keep-alive connections busy from the benchmark thread. Every request is one fresh session
//      and one turn; the faux provider fails the first attempt of every other request (50 %)
//      with a 503, retried after baseDelayMs (0: a posted continue; 1: a real timer).
//      Counter sessions_per_s (wall clock).
//  (b) idle_session_bytes/<N>/<own provider>: heap bytes per idle session (mallinfo2 in use
//      — the sanitizer allocator's count in an ASan build — before/after creating N sessions,
//      no prompt), sharing one faux provider (0) or with a provider each (1, as the server
//      does). Counter bytes_per_session.
// Build: cmake -DCOAGENT_BENCH=ON (Release for real figures), target embed_bench.

#include "load_client.hpp"
#include "prompt_server.hpp"

#include <benchmark/benchmark.h>
#include <malloc.h>
#if defined(__SANITIZE_ADDRESS__)
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();  // libasan (g++ ships no header)
#endif

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace coagent_example;

namespace {

constexpr int requests_per_iteration = 500;

// heap bytes in use (under AddressSanitizer, whose allocator mallinfo2 does not see, its own count)
std::size_t heap_in_use() {
#if defined(__SANITIZE_ADDRESS__)
    return __sanitizer_get_current_allocated_bytes();
#else
    return mallinfo2().uordblks;
#endif
}

asio::awaitable<void> request_loop(beast::tcp_stream& s, int& remaining, int& failures) {
    beast::flat_buffer buf;
    while (remaining > 0) {
        --remaining;
        prompt_reply r = co_await post_prompt(s, buf, "hi");
        if (r.status != 200 || r.outcome != "succeeded") ++failures;
    }
}

void server_sessions(benchmark::State& state) {
    const auto connections = static_cast<int>(state.range(0));
    server_options so;
    so.base_delay_ms = state.range(1);
    so.fail_every_other = true;
    asio::io_context server_io(1);
    prompt_server server(server_io, tcp::endpoint(asio::ip::address_v4::loopback(), 0), so);
    server.start();
    std::thread server_thread([&server_io] { server_io.run(); });

    asio::io_context client_io(1);
    std::vector<std::unique_ptr<beast::tcp_stream>> streams;
    for (int i = 0; i < connections; ++i) {
        streams.push_back(std::make_unique<beast::tcp_stream>(client_io));
        streams.back()->connect(server.local_endpoint());
        streams.back()->socket().set_option(tcp::no_delay(true));
    }

    int failures = 0;
    for (auto _ : state) {
        int remaining = requests_per_iteration;
        for (auto& s : streams)
            asio::co_spawn(client_io, request_loop(*s, remaining, failures),
                           [](std::exception_ptr e) {
                               if (e) std::rethrow_exception(e);
                           });
        client_io.restart();
        client_io.run();
    }
    const auto sessions = static_cast<double>(state.iterations()) * requests_per_iteration;
    state.counters["sessions_per_s"] = benchmark::Counter(sessions, benchmark::Counter::kIsRate);
    state.counters["retried"] = static_cast<double>(server.stats().retries.load()) /
                                static_cast<double>(server.stats().completed.load());
    if (failures) state.SkipWithError("requests failed");

    for (auto& s : streams) s->close();
    server.stop();
    server_thread.join();
}
BENCHMARK(server_sessions)
    ->Args({1, 0})
    ->Args({16, 0})
    ->Args({64, 0})
    ->Args({64, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void idle_session_bytes(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    const bool own_provider = state.range(1) != 0;
    asio::io_context io;
    double per_session = 0;
    for (auto _ : state) {
        state.PauseTiming();
        auto shared = std::make_shared<coagent::faux_provider>();
        std::vector<std::unique_ptr<coagent::agent_session>> sessions;
        sessions.reserve(n);
        state.ResumeTiming();
        const auto before = heap_in_use();
        for (std::size_t i = 0; i < n; ++i) {
            coagent::session_options o;
            o.executor = io.get_executor();
            if (own_provider) {
                coagent::faux_options fo;
                fo.record_requests = false;
                o.model_provider = std::make_shared<coagent::faux_provider>(std::move(fo));
            } else {
                o.model_provider = shared;
            }
            sessions.push_back(std::make_unique<coagent::agent_session>(std::move(o)));
        }
        const auto after = heap_in_use();
        per_session = static_cast<double>(after - before) / static_cast<double>(n);
        state.PauseTiming();
        sessions.clear();
        state.ResumeTiming();
    }
    state.counters["bytes_per_session"] = per_session;
}
BENCHMARK(idle_session_bytes)
    ->Args({10000, 0})
    ->Args({10000, 1})
    ->Iterations(3)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();

// Retry bookkeeping against bare Asio baselines, measured in the same process:
//  (a) one full retry cycle with baseDelayMs 0 (classify + events to one subscriber + a
//      delay-0 post + continue into the faux provider) vs a bare post + coroutine resume;
//  (b) abort_retry() -> prompt() resumption latency (p50/p99) vs a bare cancellation_signal
//      round trip to a coroutine parked on a timer;
//  (c) N sessions parked in backoff: heap bytes per session and time to cancel all, vs N bare
//      coroutines parked on timers with a bound cancellation slot;
//  (d) the retry cycle of (a) with the Prometheus telemetry adapter attached vs none (issue 22).
// Run through bench/run, which prints the ratios; --quick runs smaller sizes.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/telemetry/prometheus_telemetry.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace asio = boost::asio;
using namespace coagent;
using clk = std::chrono::steady_clock;

namespace {

constexpr int cycles_per_prompt = 1000;

std::shared_ptr<faux_provider> endless_errors(bool then_ok) {
    faux_options fo;
    std::string script =
        R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":)" +
        std::to_string(then_ok ? cycles_per_prompt : 1'000'000'000) + "}" +
        (then_ok ? R"(,{"text":"ok"}])" : "]");
    fo.script = faux_script::parse(script, "<bench>");
    fo.record_requests = false;
    return std::make_shared<faux_provider>(std::move(fo));
}

std::unique_ptr<agent_session> make_session(asio::io_context& io, std::shared_ptr<provider> p,
                                            std::int64_t base_delay_ms, int max_retries,
                                            std::shared_ptr<telemetry> t = {}) {
    session_options o;
    o.telemetry = std::move(t);
    o.executor = io.get_executor();
    o.model_provider = std::move(p);
    o.config.retry.base_delay_ms = base_delay_ms;
    o.config.retry.max_retries = max_retries;
    return std::make_unique<agent_session>(std::move(o));
}

// (a) ------------------------------------------------------------------------------------

void run_retry_cycles(benchmark::State& state, const std::shared_ptr<telemetry>& t) {
    asio::io_context io;
    std::size_t events = 0;
    for (auto _ : state) {
        state.PauseTiming();
        auto s = make_session(io, endless_errors(true), 0, cycles_per_prompt, t);
        auto sub = s->subscribe([&](const event&) { ++events; });
        bool done = false;
        s->async_prompt("hi", [&](std::exception_ptr e, prompt_result r) {
            if (e || r.outcome != prompt_result::status::succeeded) std::abort();
            done = true;
        });
        state.ResumeTiming();
        io.restart();
        io.run();
        if (!done) std::abort();
    }
    state.counters["ns_per_cycle"] =
        benchmark::Counter(double(state.iterations()) * cycles_per_prompt,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    state.counters["ns_per_cycle"].value *= 1;  // seconds per cycle; scaled below by the reporter
    benchmark::DoNotOptimize(events);
}

void retry_cycle(benchmark::State& state) {
    run_retry_cycles(state, nullptr);
}

// (d) the same with the Prometheus adapter attached (one registry for every session)
void retry_cycle_prometheus(benchmark::State& state) {
    const auto prom = std::make_shared<prometheus_telemetry>();
    run_retry_cycles(state, prom);
    benchmark::DoNotOptimize(prom->text().size());
}

asio::awaitable<void> post_loop(int n) {
    auto ex = co_await asio::this_coro::executor;
    for (int i = 0; i < n; ++i) co_await asio::post(ex, asio::use_awaitable);
}

void baseline_post_resume(benchmark::State& state) {
    asio::io_context io;
    for (auto _ : state) {
        asio::co_spawn(io, post_loop(cycles_per_prompt), [](std::exception_ptr e) {
            if (e) std::abort();
        });
        io.restart();
        io.run();
    }
    state.counters["ns_per_cycle"] =
        benchmark::Counter(double(state.iterations()) * cycles_per_prompt,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// (b) ------------------------------------------------------------------------------------

struct percentiles {
    double p50 = 0, p99 = 0;
};
percentiles summarize(std::vector<double>& ns) {
    std::sort(ns.begin(), ns.end());
    return {ns[ns.size() / 2], ns[std::min(ns.size() - 1, ns.size() * 99 / 100)]};
}

void abort_retry_latency(benchmark::State& state) {
    asio::io_context io;
    auto provider = endless_errors(false);
    std::vector<double> samples;
    for (auto _ : state) {
        auto s = make_session(io, provider, 1'000'000'000, 3);
        clk::time_point resumed{};
        s->async_prompt("hi", [&](std::exception_ptr e, prompt_result) {
            if (e) std::abort();
            resumed = clk::now();
        });
        for (int i = 0; i < 1000 && !s->is_retrying(); ++i) {
            io.restart();
            io.poll();
        }
        if (!s->is_retrying()) std::abort();
        const auto t0 = clk::now();
        s->abort_retry();
        io.restart();
        io.run();
        samples.push_back(std::chrono::duration<double, std::nano>(resumed - t0).count());
    }
    auto p = summarize(samples);
    state.counters["p50_ns"] = p.p50;
    state.counters["p99_ns"] = p.p99;
}

asio::awaitable<void> park(asio::steady_timer& t, asio::cancellation_signal& sig,
                           clk::time_point& resumed) {
    t.expires_after(std::chrono::hours(1000));
    auto [ec] = co_await t.async_wait(
        asio::bind_cancellation_slot(sig.slot(), asio::as_tuple(asio::use_awaitable)));
    (void)ec;
    resumed = clk::now();
}

void baseline_cancel_round_trip(benchmark::State& state) {
    asio::io_context io;
    std::vector<double> samples;
    for (auto _ : state) {
        asio::steady_timer t(io);
        asio::cancellation_signal sig;
        clk::time_point resumed{};
        asio::co_spawn(io, park(t, sig, resumed), [](std::exception_ptr e) {
            if (e) std::abort();
        });
        io.restart();
        io.poll();
        const auto t0 = clk::now();
        sig.emit(asio::cancellation_type::terminal);
        io.restart();
        io.run();
        samples.push_back(std::chrono::duration<double, std::nano>(resumed - t0).count());
    }
    auto p = summarize(samples);
    state.counters["p50_ns"] = p.p50;
    state.counters["p99_ns"] = p.p99;
}

// (c) ------------------------------------------------------------------------------------

std::size_t heap_in_use() {
    malloc_trim(0);
    return mallinfo2().uordblks;
}

void parked_sessions(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        asio::io_context io;
        auto provider = endless_errors(false);
        const std::size_t before = heap_in_use();
        std::vector<std::unique_ptr<agent_session>> sessions;
        sessions.reserve(n);
        std::size_t completed = 0;
        for (std::size_t i = 0; i < n; ++i) {
            sessions.push_back(make_session(io, provider, 1'000'000'000, 3));
            sessions.back()->async_prompt("hi", [&](std::exception_ptr e, prompt_result) {
                if (e) std::abort();
                ++completed;
            });
        }
        io.poll();
        std::size_t parked = 0;
        for (auto& s : sessions) parked += s->is_retrying() ? 1 : 0;
        if (parked != n) std::abort();
        const std::size_t after = heap_in_use();
        const auto t0 = clk::now();
        for (auto& s : sessions) s->abort_retry();
        io.restart();
        io.run();
        const double cancel_s = std::chrono::duration<double>(clk::now() - t0).count();
        if (completed != n) std::abort();
        state.counters["bytes_per_item"] = double(after - before) / double(n);
        state.counters["cancel_all_ms"] = cancel_s * 1e3;
    }
}

struct bare_parked {
    asio::steady_timer timer;
    asio::cancellation_signal sig;
    clk::time_point resumed;
    explicit bare_parked(asio::io_context& io) : timer(io) {}
};

void baseline_parked_coroutines(benchmark::State& state) {
    const auto n = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        asio::io_context io;
        const std::size_t before = heap_in_use();
        std::vector<std::unique_ptr<bare_parked>> items;
        items.reserve(n);
        std::size_t completed = 0;
        for (std::size_t i = 0; i < n; ++i) {
            items.push_back(std::make_unique<bare_parked>(io));
            auto& b = *items.back();
            asio::co_spawn(io, park(b.timer, b.sig, b.resumed), [&](std::exception_ptr e) {
                if (e) std::abort();
                ++completed;
            });
        }
        io.poll();
        const std::size_t after = heap_in_use();
        const auto t0 = clk::now();
        for (auto& b : items) b->sig.emit(asio::cancellation_type::terminal);
        io.restart();
        io.run();
        const double cancel_s = std::chrono::duration<double>(clk::now() - t0).count();
        if (completed != n) std::abort();
        state.counters["bytes_per_item"] = double(after - before) / double(n);
        state.counters["cancel_all_ms"] = cancel_s * 1e3;
    }
}

}  // namespace

BENCHMARK(retry_cycle)->Unit(benchmark::kMicrosecond);
BENCHMARK(retry_cycle_prometheus)->Unit(benchmark::kMicrosecond);
BENCHMARK(baseline_post_resume)->Unit(benchmark::kMicrosecond);
BENCHMARK(abort_retry_latency)->Iterations(20000)->Unit(benchmark::kMicrosecond);
BENCHMARK(baseline_cancel_round_trip)->Iterations(20000)->Unit(benchmark::kMicrosecond);
BENCHMARK(parked_sessions)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(baseline_parked_coroutines)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Arg(1'000'000)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();

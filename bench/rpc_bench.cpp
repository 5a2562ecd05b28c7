// RPC mode through coagent's own rpc_client (issue 3's benchmarks), each beside a baseline
// measured in the same run with the trivial stand-in agent of bench/peer (same protocol, no
// session, no work):
//  (a) rpc_startup: spawn -> {"type":"ready"} and spawn -> first get_state response
//      (p50/p99 over fresh processes; manual time = to the first response);
//  (b) rpc_get_state: get_state round-trip latency on a running process (p50/p99);
//  (c) rpc_stream_events: one long streamed reply (faux provider, 2000 words, one
//      message_update per word): events per second through coagent's stdout into the client,
//      prompt sent -> agent_settled, and the bytes per event.
// The binaries are looked up beside this program (build-bench/bin/), or COAGENT_BIN /
// STANDIN_BIN. Run: build-bench/bin/rpc_bench (bench/run does not run it yet).

#include <coagent/modes/rpc_client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;

namespace {

fs::path beside_me(const char* env, const char* name) {
    if (const char* e = std::getenv(env)) return e;
    return fs::read_symlink("/proc/self/exe").parent_path() / name;
}

/// A COAGENT_DIR for both agents: default settings, and a models.json the stand-in needs to
/// start (it is never asked to connect here).
const fs::path& config_dir() {
    static const fs::path dir = [] {
        fs::path d =
            fs::temp_directory_path() / ("coagent-rpc-bench-" + std::to_string(::getpid()));
        fs::create_directories(d);
        std::ofstream(d / "models.json")
            << R"({"providers":{"fake":{"baseUrl":"http://127.0.0.1:9/v1","api":"openai-completions","apiKey":"x","models":[{"id":"m"}]}}})";
        std::ofstream(d / "settings.json") << "{}";
        return d;
    }();
    return dir;
}

struct agent {
    fs::path exe;
    std::vector<std::string> args;
};
agent coagent_rpc(std::vector<std::string> extra = {}) {
    std::vector<std::string> a{"--provider", "faux", "--no-session"};
    a.insert(a.end(), extra.begin(), extra.end());
    return {beside_me("COAGENT_BIN", "coagent"), a};
}
agent standin() {
    return {beside_me("STANDIN_BIN", "peer-standin-agent"), {}};
}

std::map<std::string, std::string> env() {
    return {{"COAGENT_DIR", config_dir().string()}, {"HOME", config_dir().string()}};
}

/// Runs `body` to completion on a fresh io_context; rethrows what it threw.
void run(std::function<asio::awaitable<void>(asio::io_context&)> body) {
    asio::io_context io;
    std::exception_ptr failure;
    asio::co_spawn(io, body(io), [&](std::exception_ptr e) { failure = e; });
    io.run();
    if (failure) std::rethrow_exception(failure);
}

double ms(clk::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
}

double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100.0 * double(v.size())))];
}

// ---- (a) start-up --------------------------------------------------------------------------

void startup(benchmark::State& state, agent a) {
    std::vector<double> ready, first;
    for (auto _ : state) {
        run([&](asio::io_context& io) -> asio::awaitable<void> {
            coagent::rpc_client c(io);
            const auto t0 = clk::now();
            std::vector<std::string> args = a.args;
            co_await c.start(a.exe, std::move(args), env());
            const auto t1 = clk::now();
            co_await c.get_state();
            const auto t2 = clk::now();
            ready.push_back(ms(t1 - t0));
            first.push_back(ms(t2 - t0));
            co_await c.stop();
        });
        state.SetIterationTime(first.back() / 1000);
    }
    state.counters["ready_p50_ms"] = pct(ready, 50);
    state.counters["ready_p99_ms"] = pct(ready, 99);
    state.counters["first_response_p50_ms"] = pct(first, 50);
    state.counters["first_response_p99_ms"] = pct(first, 99);
}
void rpc_startup(benchmark::State& s) {
    startup(s, coagent_rpc());
}
void baseline_standin_startup(benchmark::State& s) {
    startup(s, standin());
}

// ---- (b) get_state round trip --------------------------------------------------------------

void get_state_rtt(benchmark::State& state, agent a) {
    std::vector<double> us;
    run([&](asio::io_context& io) -> asio::awaitable<void> {
        coagent::rpc_client c(io);
        std::vector<std::string> args = a.args;
        co_await c.start(a.exe, std::move(args), env());
        for (int i = 0; i < 100; ++i) co_await c.get_state();  // warm-up
        for (auto _ : state) {
            const auto t0 = clk::now();
            co_await c.get_state();
            us.push_back(ms(clk::now() - t0) * 1000);
        }
        co_await c.stop();
    });
    state.counters["p50_us"] = pct(us, 50);
    state.counters["p99_us"] = pct(us, 99);
}
void rpc_get_state(benchmark::State& s) {
    get_state_rtt(s, coagent_rpc());
}
void baseline_standin_get_state(benchmark::State& s) {
    get_state_rtt(s, standin());
}

// ---- (c) events per second for a long streamed reply ---------------------------------------

constexpr int reply_words = 2000;

void rpc_stream_events(benchmark::State& state) {
    std::string text;
    for (int i = 0; i < reply_words; ++i) text += i == 0 ? "word" : " word";
    const std::string script = boost::json::serialize(
        boost::json::array{boost::json::object{{"text", text}, {"times", 1000000}}});
    std::uint64_t events = 0, bytes = 0, counted = 0;
    double seconds = 0;
    run([&](asio::io_context& io) -> asio::awaitable<void> {
        coagent::rpc_client c(io);
        agent a = coagent_rpc({"--faux-script", script});
        co_await c.start(a.exe, std::move(a.args), env());
        bool measure_bytes = true;  // the first (warm-up) prompt only: serialising costs time
        auto sub = c.on_event([&](const boost::json::object& e) {
            ++events;
            if (measure_bytes) {
                bytes += boost::json::serialize(e).size() + 1;
                ++counted;
            }
        });
        co_await c.prompt("Tell me a long story");
        co_await c.wait_for_settled();
        measure_bytes = false;
        events = 0;
        for (auto _ : state) {
            const auto t0 = clk::now();
            co_await c.prompt("Tell me a long story");
            co_await c.wait_for_settled();
            seconds += std::chrono::duration<double>(clk::now() - t0).count();
        }
        co_await c.stop();
    });
    state.counters["events_per_s"] = double(events) / seconds;
    state.counters["events_per_reply"] = double(events) / double(state.iterations());
    state.counters["bytes_per_event"] = counted ? double(bytes) / double(counted) : 0;
    state.counters["MB_per_s"] =
        counted ? double(events) * (double(bytes) / double(counted)) / seconds / 1e6 : 0;
}

}  // namespace

BENCHMARK(rpc_startup)->UseManualTime()->Iterations(30)->Unit(benchmark::kMillisecond);
BENCHMARK(baseline_standin_startup)->UseManualTime()->Iterations(30)->Unit(benchmark::kMillisecond);
BENCHMARK(rpc_get_state)->Iterations(5000)->Unit(benchmark::kMicrosecond);
BENCHMARK(baseline_standin_get_state)->Iterations(5000)->Unit(benchmark::kMicrosecond);
BENCHMARK(rpc_stream_events)->Iterations(5)->Unit(benchmark::kMillisecond);

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    std::error_code ec;
    fs::remove_all(config_dir(), ec);
    return 0;
}

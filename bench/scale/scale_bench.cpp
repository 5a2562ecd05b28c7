// The scale benchmark's coagent side (issue 25; bench/scale/run drives it, docs/benchmarks.md):
// N agent sessions in this one process, on one io_context run by --threads threads (each session
// on a strand of its own when there are more than one), prompting at once through the real HTTP
// provider (keep-alive connections, one provider per coagent-fakellm port, sessions spread over
// them) against coagent-fakellm --per-conversation. bench/scale/reference-sdk.mjs is the same
// program for the reference's SDK; both print one JSON object with the same fields.
//
//   scale_bench --port P [--port P2 …] --sessions N [--threads T] [--phase stream|parked]
//               [--chunk-delay-ms D] [--base-delay-ms B] [--max-retries R]
//
// phase stream: every session sends one prompt ("scale <i>", its conversation key); the server
//   paces each reply and fails a fixed share of first attempts. Reported: prompts settled per
//   CPU-second of this process (user + system, getrusage), CPU per prompt and per retried
//   prompt, the latency each prompt had beyond the server's pacing (each attempt's first to last
//   text delta) and the backoff delays the session announced (p50 / p99; it holds the ramp of N
//   prompts started at once), the gap between two text deltas beyond the chunk delay D
//   (p50 / p99 over every delta: the server's timer and the agent's delivery), heap and RSS per
//   session while all N stream, connections, requests and auto_retry_* counts (compared with the
//   reference's by the run script).
// phase parked: every first attempt fails with a 503 and the backoff is 10 minutes; once all N
//   wait, heap and RSS per parked session are taken, then abort_retry() on every session and the
//   time until all N prompts settled.

#include <coagent/classify/classify.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/json/serialize.hpp>

#include "common.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace json = boost::json;
using namespace coagent;
using clock_type = std::chrono::steady_clock;

namespace {

// One session and what its events said (touched only on the session's strand).
struct tracked {
    std::unique_ptr<agent_session> session;
    subscription sub;
    clock_type::time_point start, end;
    int deltas = 0;  // text deltas of the attempt streaming now
    clock_type::time_point first_delta, last_delta;
    double pacing_ms = 0;        // the server's pacing: first to last text delta of each attempt
    std::int64_t delays_ms = 0;  // the backoff delays the session announced
    int attempts = 0, retry_starts = 0, retry_ends = 0;
    bool streaming = false, waiting = false, settled = false, ok = false;
};

}  // namespace

int main(int argc, char** argv) {
    const scale::options opt = scale::parse(
        argc, argv, "scale_bench",
        "scale_bench --port P [--port P2 ...] --sessions N [--threads T] [--phase stream|parked] "
        "[--chunk-delay-ms D] [--base-delay-ms B] [--max-retries R]");
    warm_up_classifier();  // what the coagent executable does at start-up, off the measurement

    asio::io_context io(opt.threads);
    std::vector<std::shared_ptr<http_provider>> providers;
    for (const int port : opt.ports) {
        http_provider_options po;
        po.api = http_protocol::api_kind::openai_completions;
        po.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
        po.model = model_info{"fake", "fake-model", "openai-completions", 1000000, 4096};
        po.api_key = "dummy-key";
        po.max_idle_per_host = static_cast<std::size_t>(opt.sessions);  // keep-alive for all
        providers.push_back(std::make_shared<http_provider>(std::move(po)));
    }

    auto gaps_owner = std::make_unique<scale::gap_histogram>();  // allocated before the baseline
    scale::gap_histogram& gaps = *gaps_owner;
    const std::size_t heap0 = scale::heap_bytes();
    const std::size_t rss0 = scale::rss_bytes();
    std::vector<tracked> all(static_cast<std::size_t>(opt.sessions));
    std::atomic<int> streaming{0}, waiting{0}, settled{0};
    std::atomic<std::size_t> heap_at_peak{0}, rss_at_peak{0};
    const auto sample_peak = [&] {
        heap_at_peak = scale::heap_bytes();
        rss_at_peak = scale::rss_bytes();
    };
    // parked: once all N wait (the last session's listener says so), every backoff is cancelled
    clock_type::time_point all_waiting{}, all_settled{};
    const std::function<void()> on_all_waiting = [&] {
        all_waiting = clock_type::now();
        for (auto& t : all)
            asio::post(t.session->get_executor(), [&t] { t.session->abort_retry(); });
    };
    for (std::size_t i = 0; i < all.size(); ++i) {
        tracked& t = all[i];
        session_options so;
        so.executor = opt.threads > 1 ? asio::any_io_executor(asio::make_strand(io))
                                      : asio::any_io_executor(io.get_executor());
        so.model_provider = providers[i % providers.size()];
        so.config.retry.base_delay_ms = opt.phase == "parked" ? 600000 : opt.base_delay_ms;
        so.config.retry.max_retries = opt.max_retries;
        so.config.compaction.enabled = false;
        t.session = std::make_unique<agent_session>(std::move(so));
        const int n = opt.sessions;
        const std::int64_t pace = opt.chunk_delay_ms;
        t.sub = t.session->subscribe([&t, &streaming, &waiting, &sample_peak, &on_all_waiting,
                                      &gaps, n, pace,
                                      parked = opt.phase == "parked"](const event& e) {
            if (const auto* s = std::get_if<message_start_event>(&e)) {
                if (s->message->role == message_role::assistant) {
                    ++t.attempts;
                    t.deltas = 0;
                }
            } else if (std::get_if<message_update_event>(&e)) {
                const auto at = clock_type::now();
                if (t.deltas > 0)
                    gaps.add(std::chrono::duration<double, std::milli>(at - t.last_delta).count() -
                             static_cast<double>(pace));
                t.last_delta = at;
                if (++t.deltas == 1) t.first_delta = t.last_delta;
                if (t.deltas == 1 && !t.streaming) {
                    t.streaming = true;
                    if (++streaming == n) sample_peak();  // every session streams now
                }
            } else if (const auto* m = std::get_if<message_end_event>(&e)) {
                if (m->message->role == message_role::assistant && t.deltas > 1)
                    t.pacing_ms +=
                        std::chrono::duration<double, std::milli>(t.last_delta - t.first_delta)
                            .count();
            } else if (const auto* r = std::get_if<auto_retry_start_event>(&e)) {
                ++t.retry_starts;
                t.delays_ms += r->delay_ms;
                if (parked && !t.waiting) {
                    t.waiting = true;
                    if (++waiting == n) {  // every session waits in its backoff
                        sample_peak();
                        on_all_waiting();
                    }
                }
            } else if (std::get_if<auto_retry_end_event>(&e)) {
                ++t.retry_ends;
            }
        });
    }
    const std::size_t heap_idle = scale::heap_bytes();

    const double cpu0 = scale::cpu_seconds();
    const auto wall0 = clock_type::now();
    for (std::size_t i = 0; i < all.size(); ++i) {
        tracked& t = all[i];
        asio::post(t.session->get_executor(), [&t, &settled, &all_settled, i, n = opt.sessions] {
            t.start = clock_type::now();
            t.session->async_prompt(
                "scale " + std::to_string(i),
                [&t, &settled, &all_settled, n](std::exception_ptr e, prompt_result r) {
                    if (e) std::abort();
                    t.end = clock_type::now();
                    t.settled = true;
                    t.ok = r.outcome == prompt_result::status::succeeded;
                    if (++settled == n) all_settled = t.end;
                });
        });
    }

    std::vector<std::thread> pool;
    for (int k = 1; k < opt.threads; ++k) pool.emplace_back([&] { io.run(); });
    io.run();
    for (auto& th : pool) th.join();
    const double cpu = scale::cpu_seconds() - cpu0;
    const double wall = std::chrono::duration<double>(clock_type::now() - wall0).count();
    const double cancel_ms =
        std::chrono::duration<double, std::milli>(all_settled - all_waiting).count();

    std::vector<double> added;
    long long requests = 0, retry_starts = 0, retry_ends = 0, retried = 0, ok = 0;
    for (const auto& t : all) {
        requests += t.attempts;
        retry_starts += t.retry_starts;
        retry_ends += t.retry_ends;
        retried += t.retry_starts > 0 ? 1 : 0;
        ok += t.ok ? 1 : 0;
        if (!t.settled) continue;
        const double total = std::chrono::duration<double, std::milli>(t.end - t.start).count();
        added.push_back(total - t.pacing_ms - static_cast<double>(t.delays_ms));
    }
    std::size_t connections = 0;
    for (const auto& p : providers) connections += p->connections_opened();

    scale::run_figures f;
    f.agent = "coagent";
    f.settled = settled.load();
    f.succeeded = ok;
    f.requests = requests;
    f.retried_prompts = retried;
    f.retry_starts = retry_starts;
    f.retry_ends = retry_ends;
    f.cpu_seconds = cpu;
    f.wall_seconds = wall;
    f.added_ms = std::move(added);
    f.gaps = &gaps;
    f.heap0 = heap0;
    f.rss0 = rss0;
    f.heap_at_peak = heap_at_peak.load();
    f.rss_at_peak = rss_at_peak.load();
    f.connections = connections;
    f.cancel_all_ms = cancel_ms;
    json::object out = scale::to_json(opt, f);
    out["idleHeapBytesPerSession"] =
        static_cast<double>(heap_idle - heap0) / static_cast<double>(opt.sessions);
    std::cout << json::serialize(out) << std::endl;
    return settled.load() == opt.sessions ? 0 : 1;
}

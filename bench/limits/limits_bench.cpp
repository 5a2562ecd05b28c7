// Issue 19's figures for the limit store on Redis (docs/benchmarks.md). bench/limits/run starts
// its own redis-server and runs this program three times:
//   limits_bench decision PORT        decision cost per turn, Redis store against local
//   limits_bench turns PORT N MS      N successful turns (agent sessions on the faux provider,
//                                     retry.budget on, the Redis store), one every MS ms; the
//                                     script reads INFO commandstats before and after
//   limits_bench propagation PORT N   N credential blocks set through one store, the time until
//                                     a second store (its own connections) has it in its copy
//   limits_bench outage PORT LLM_PORT N BUDGET
//                                     N sessions prompting at once through the HTTP provider
//                                     against coagent-fakellm (the run script scripts a 10 s
//                                     outage), the retry defaults, retry.budget on (1) or off
//                                     (0), the Redis store: one JSON line (requests, settled,
//                                     succeeded, the time until all settled, requests a second)
// Each prints its figures as Markdown table rows.

#include <coagent/classify/classify.hpp>
#include <coagent/providers/faux_provider.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/redis_limit_store.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/session/auth_storage.hpp>
#include <coagent/session/limit_store.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using namespace coagent;
using clock_type = std::chrono::steady_clock;

namespace {

// A Redis store with its own io_context on its own thread, connected.
struct redis_fixture {
    asio::io_context io;
    asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
    std::shared_ptr<redis_limit_store> store;
    std::thread thread;

    explicit redis_fixture(int port) {
        redis_limit_store_options o;
        o.endpoint.host = "127.0.0.1";
        o.endpoint.port = static_cast<std::uint16_t>(port);
        o.key_prefix = "bench:";
        o.logger = std::make_shared<spdlog::logger>(
            "limits", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        store = std::make_shared<redis_limit_store>(io.get_executor(), std::move(o));
        thread = std::thread([this] { io.run(); });
        const auto deadline = clock_type::now() + std::chrono::seconds(5);
        while (!store->connected() && clock_type::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (!store->connected()) {
            std::fprintf(stderr, "limits_bench: redis on port %d not reached\n", port);
            std::exit(1);
        }
    }
    ~redis_fixture() {
        store->stop();
        work.reset();
        thread.join();
    }
};

// What a successful turn asks the limit state: the key for the request (the auth storage,
// which reads the store's blocks and leases) and the budget's deposit (the run policy).
double ns_per_turn(limit_store& store, int n) {
    in_memory_auth_storage auth;
    for (const char* k : {"sk-bench-AAAA", "sk-bench-BBBB", "sk-bench-CCCC"})
        auth.add_credential("bench", k);
    auth.share_limits(std::shared_ptr<limit_store>(&store, [](limit_store*) {}));
    retry_budget_settings b;
    b.enabled = true;
    std::size_t sink = 0;
    for (int i = 0; i < n / 10; ++i) {  // warm-up
        sink += auth.api_key("bench", "s").size();
        store.budget_on_success("bench", b);
    }
    const auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) {
        sink += auth.api_key("bench", "s").size();
        store.budget_on_success("bench", b);
    }
    const auto t1 = clock_type::now();
    if (sink == 0) std::abort();
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

int decision(int port) {
    constexpr int n = 2'000'000;
    local_limit_store local;
    redis_fixture redis(port);
    std::vector<double> l, r;
    for (int round = 0; round < 5; ++round) {  // interleaved, the median of 5
        l.push_back(ns_per_turn(local, n));
        r.push_back(ns_per_turn(*redis.store, n));
    }
    std::sort(l.begin(), l.end());
    std::sort(r.begin(), r.end());
    std::printf("| decision cost per turn, local store | %.0f ns | |\n", l[2]);
    std::printf(
        "| decision cost per turn, Redis store | %.0f ns | %.2fx local (target <= 1.2x, <= 5 us) "
        "|\n",
        r[2], r[2] / l[2]);
    return 0;
}

int turns(int port, int n, double every_ms) {
    redis_fixture redis(port);
    asio::io_context io;
    settings cfg;
    cfg.budget.enabled = true;
    cfg.compaction.enabled = false;
    auto faux = std::make_shared<faux_provider>(faux_options{});
    int done = 0, ok = 0;
    const auto t0 = clock_type::now();
    std::unique_ptr<agent_session> session;
    for (int i = 0; i < n; ++i) {
        if (i % 100 == 0) {  // a fresh session every 100 turns: the context stays small
            session.reset();
            session_options so;
            so.executor = io.get_executor();
            so.model_provider = faux;
            so.config = cfg;
            so.limits = redis.store;
            so.logger = spdlog::default_logger();
            session = std::make_unique<agent_session>(std::move(so));
        }
        session->async_prompt("turn " + std::to_string(i), streaming_behavior::none,
                              [&](std::exception_ptr e, prompt_result r) {
                                  if (e) std::abort();
                                  ++done;
                                  ok += r.outcome == prompt_result::status::succeeded;
                              });
        io.run();
        io.restart();
        std::this_thread::sleep_until(
            t0 + std::chrono::microseconds(static_cast<std::int64_t>((i + 1) * every_ms * 1000)));
    }
    session.reset();
    const double secs = std::chrono::duration<double>(clock_type::now() - t0).count();
    std::printf("| turns | %d successful of %d in %.1f s |\n", ok, done, secs);
    return ok == n ? 0 : 1;
}

int propagation(int port, int n) {
    redis_fixture a(port), b(port);
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
        const std::string fp = credential_fingerprint("sk-bench-" + std::to_string(i));
        const std::int64_t now = wall_clock_ms();
        const auto t0 = clock_type::now();
        a.store->block_credential("bench", fp, now + 600'000, now);
        const auto deadline = t0 + std::chrono::seconds(2);
        while (b.store->credential_blocked_until("bench", fp) == 0 && clock_type::now() < deadline)
            std::this_thread::yield();
        us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    const auto at = [&](double q) {
        return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))];
    };
    std::printf("| propagation of a block to another store's copy, p50 | %.0f us | |\n", at(0.5));
    std::printf("| propagation, p99 | %.0f us | target <= 50 ms |\n", at(0.99));
    std::printf("| propagation, max | %.0f us | |\n", us.back());
    return 0;
}

int outage(int port, int llm_port, int n, bool budget) {
    warm_up_classifier();
    redis_fixture redis(port);
    asio::io_context io;
    http_provider_options po;
    po.api = http_protocol::api_kind::openai_completions;
    po.base_url = "http://127.0.0.1:" + std::to_string(llm_port) + "/v1";
    po.model = model_info{"fake", "fake-model", "openai-completions", 1000000, 4096};
    po.api_key = "sk-bench-OUT1";
    po.max_idle_per_host = static_cast<std::size_t>(n);
    auto provider = std::make_shared<http_provider>(std::move(po));
    settings cfg;  // the retry defaults: 3 retries, 2 s, 4 s, 8 s
    cfg.budget.enabled = budget;
    cfg.compaction.enabled = false;
    std::vector<std::unique_ptr<agent_session>> sessions;
    std::vector<subscription> subs;
    std::vector<double> request_at;  // seconds since the start, one per request
    int settled = 0, ok = 0;
    const auto t0 = clock_type::now();
    clock_type::time_point last{};
    for (int i = 0; i < n; ++i) {
        session_options so;
        so.executor = io.get_executor();
        so.model_provider = provider;
        so.config = cfg;
        so.limits = redis.store;
        so.logger = spdlog::default_logger();
        sessions.push_back(std::make_unique<agent_session>(std::move(so)));
        subs.push_back(sessions.back()->subscribe([&](const event& e) {
            if (const auto* m = std::get_if<message_start_event>(&e);
                m && m->message->role == message_role::assistant)
                request_at.push_back(std::chrono::duration<double>(clock_type::now() - t0).count());
        }));
    }
    for (auto& s : sessions)
        s->async_prompt("outage", streaming_behavior::none,
                        [&](std::exception_ptr e, prompt_result r) {
                            if (e) std::abort();
                            ++settled;
                            ok += r.outcome == prompt_result::status::succeeded;
                            last = clock_type::now();
                        });
    io.run();
    const double all_settled = std::chrono::duration<double>(last - t0).count();
    std::string per_second = "[";
    std::vector<int> bins;
    for (const double t : request_at) {
        const auto b = static_cast<std::size_t>(t);
        if (bins.size() <= b) bins.resize(b + 1);
        ++bins[b];
    }
    for (std::size_t i = 0; i < bins.size(); ++i)
        per_second += (i ? "," : "") + std::to_string(bins[i]);
    per_second += "]";
    sessions.clear();
    std::printf(
        "{\"budget\":%s,\"sessions\":%d,\"requests\":%zu,\"settled\":%d,\"succeeded\":%d,"
        "\"allSettledSeconds\":%.2f,\"requestsPerSecond\":%s}\n",
        budget ? "true" : "false", n, request_at.size(), settled, ok, all_settled,
        per_second.c_str());
    return settled == n ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    const int port = argc > 2 ? std::atoi(argv[2]) : 0;
    if (mode == "decision" && port > 0) return decision(port);
    if (mode == "turns" && port > 0 && argc > 4)
        return turns(port, std::atoi(argv[3]), std::atof(argv[4]));
    if (mode == "propagation" && port > 0 && argc > 3) return propagation(port, std::atoi(argv[3]));
    if (mode == "outage" && port > 0 && argc > 5)
        return outage(port, std::atoi(argv[3]), std::atoi(argv[4]), std::string(argv[5]) == "1");
    std::fprintf(stderr,
                 "usage: limits_bench decision PORT | turns PORT N EVERY_MS | propagation PORT N | "
                 "outage PORT LLM_PORT N BUDGET(0|1)\n");
    return 2;
}

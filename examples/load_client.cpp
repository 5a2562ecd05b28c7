// Load test for examples/http_server.cpp (ctest example_http_server_load), loopback only:
// opens --requests connections at once, each sending one `POST /prompt`, and checks that
//  - every request succeeded, and --expect-retried of them were retried once (the server fails
//    the first attempt of every other request with a 503);
//  - all of them finished within --max-seconds: a request waiting out its backoff does not block
//    the others (200 requests with 1 s backoffs take about 1 s, not 100 s);
//  - the server saw at least --min-peak-in-flight turns in flight at once.
// Bounded in count (--requests) and time (a watchdog stops everything at --max-seconds).

#include "load_client.hpp"

#include <CLI/CLI.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <sstream>
#include <string>
#include <utility>

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace coagent_example;
using clk = std::chrono::steady_clock;

namespace {

struct tally {
    int done = 0;
    int ok = 0;
    int retried = 0;
    int failed = 0;
    clk::time_point last_done;
};

asio::awaitable<void> one_request(asio::ip::tcp::endpoint ep, int i, tally& t) {
    beast::tcp_stream s(co_await asio::this_coro::executor);
    co_await s.async_connect(ep, asio::use_awaitable);
    beast::flat_buffer buf;
    prompt_reply r = co_await post_prompt(s, buf, "request " + std::to_string(i));
    const std::string expected = "You said: request " + std::to_string(i);
    if (r.status == 200 && r.outcome == "succeeded" && r.reply == expected) {
        ++t.ok;
        if (r.retries > 0) ++t.retried;
    } else {
        ++t.failed;
        std::fprintf(stderr, "load_client: request %d: HTTP %u, %s: %s\n", i, r.status,
                     r.outcome.c_str(), r.error.empty() ? r.reply.c_str() : r.error.c_str());
    }
    boost::system::error_code ignored;
    s.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
}

asio::awaitable<json::object> fetch_stats(asio::ip::tcp::endpoint ep) {
    beast::tcp_stream s(co_await asio::this_coro::executor);
    co_await s.async_connect(ep, asio::use_awaitable);
    beast::flat_buffer buf;
    json::object o = co_await get_stats(s, buf);
    co_return o;
}

asio::awaitable<std::string> fetch_metrics(asio::ip::tcp::endpoint ep) {
    beast::tcp_stream s(co_await asio::this_coro::executor);
    co_await s.async_connect(ep, asio::use_awaitable);
    beast::flat_buffer buf;
    std::string text = co_await get_metrics(s, buf);
    co_return text;
}

// the value of the sample line `name{labels} value` (labels as the server writes them, sorted);
// -1 when absent
double sample(const std::string& text, const std::string& series) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
        if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
            line[series.size()] == ' ')
            return std::stod(line.substr(series.size() + 1));
    return -1;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"load test for examples/http_server (127.0.0.1 only)"};
    unsigned short port = 0;
    int requests = 200;
    double max_seconds = 20;
    int expect_retried = -1;
    long long min_peak = 0;
    app.add_option("--port", port, "the server's port on 127.0.0.1")->required();
    app.add_option("--requests", requests, "concurrent requests (one connection each)")
        ->check(CLI::Range(1, 2000));
    app.add_option("--max-seconds", max_seconds, "all requests must be answered within this")
        ->check(CLI::Range(0.1, 600.0));
    app.add_option("--expect-retried", expect_retried, "exactly this many requests were retried");
    app.add_option("--min-peak-in-flight", min_peak,
                   "the server had at least this many turns in flight at once");
    bool check_metrics = false;
    app.add_flag("--check-metrics", check_metrics,
                 "scrape GET /metrics and check its counters against the requests made "
                 "(needs --expect-retried)");
    CLI11_PARSE(app, argc, argv);

    asio::io_context io;
    const asio::ip::tcp::endpoint ep(asio::ip::address_v4::loopback(), port);
    tally t;
    const auto start = clk::now();

    // watchdog: nothing runs past the time bound
    asio::steady_timer watchdog(
        io, std::chrono::duration_cast<clk::duration>(std::chrono::duration<double>(max_seconds)));
    bool timed_out = false;
    watchdog.async_wait([&](const boost::system::error_code& ec) {
        if (ec) return;
        timed_out = true;
        io.stop();
    });

    for (int i = 0; i < requests; ++i) {
        asio::co_spawn(io, one_request(ep, i, t), [&](std::exception_ptr e) {
            if (e) {
                ++t.failed;
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& x) {
                    std::fprintf(stderr, "load_client: %s\n", x.what());
                }
            }
            t.last_done = clk::now();
            if (++t.done == requests) watchdog.cancel();
        });
    }
    io.run();
    const double elapsed = std::chrono::duration<double>(t.last_done - start).count();
    if (timed_out) {
        std::fprintf(stderr, "load_client: FAIL: only %d of %d requests answered within %.1f s\n",
                     t.done, requests, max_seconds);
        return 1;
    }

    // the server's view: how many turns were in flight at once
    json::object stats;
    io.restart();
    asio::co_spawn(io, fetch_stats(ep), [&](std::exception_ptr e, json::object o) {
        if (e) {
            std::fprintf(stderr, "load_client: GET /stats failed\n");
            return;
        }
        stats = std::move(o);
    });
    io.run();
    const long long peak =
        stats.contains("peakInFlight") ? stats.at("peakInFlight").to_number<long long>() : -1;

    std::printf(
        "%d requests: %d succeeded (%d after a retry), %d failed, in %.2f s; peak in flight %lld\n",
        requests, t.ok, t.retried, t.failed, elapsed, peak);
    bool pass = true;
    if (t.failed || t.ok != requests) {
        std::fprintf(stderr, "load_client: FAIL: %d requests failed\n", requests - t.ok);
        pass = false;
    }
    if (expect_retried >= 0 && t.retried != expect_retried) {
        std::fprintf(stderr, "load_client: FAIL: %d requests retried, expected %d\n", t.retried,
                     expect_retried);
        pass = false;
    }
    if (elapsed > max_seconds) {
        std::fprintf(stderr, "load_client: FAIL: %.2f s, bound %.1f s\n", elapsed, max_seconds);
        pass = false;
    }
    if (peak < min_peak) {
        std::fprintf(stderr, "load_client: FAIL: peak in flight %lld, expected at least %lld\n",
                     peak, min_peak);
        pass = false;
    }
    if (check_metrics) {
        std::string text;
        io.restart();
        asio::co_spawn(io, fetch_metrics(ep), [&](std::exception_ptr e, std::string m) {
            if (e) {
                std::fprintf(stderr, "load_client: GET /metrics failed\n");
                return;
            }
            text = std::move(m);
        });
        io.run();
        // every request: one prompt, one chat; a retried one: a failed attempt, a retry, a wait
        const double n = requests, r = expect_retried;
        const std::pair<const char*, double> expected[] = {
            {R"(coagent_prompts_total{outcome="succeeded"})", n},
            {R"(coagent_chats_total{model="faux",outcome="ok",provider="faux"})", n},
            {R"(coagent_attempts_total{model="faux",provider="faux",result="ok"})", n},
            {R"(coagent_attempts_total{model="faux",provider="faux",result="capacity"})", r},
            {R"(coagent_retries_total{limit="capacity",model="faux",provider="faux"})", r},
            {"coagent_backoff_seconds_count", r},
            {"coagent_chat_duration_seconds_count", n},
            {"coagent_attempts_per_chat_count", n},
            {"coagent_attempts_per_chat_sum", n + r},
            {"coagent_sessions_in_backoff", 0},
        };
        int checked = 0;
        for (const auto& [series, want] : expected) {
            const double got = sample(text, series);
            if (got != want) {
                std::fprintf(stderr, "load_client: FAIL: /metrics %s is %g, expected %g\n", series,
                             got, want);
                pass = false;
            }
            ++checked;
        }
        std::printf("/metrics: %d series checked against %d requests, %d retried\n", checked,
                    requests, expect_retried);
    }
    return pass ? 0 : 1;
}

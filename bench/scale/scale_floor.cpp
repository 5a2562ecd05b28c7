// scale-floor: the harness floor of bench/scale (issue 25; docs/benchmarks.md). What N paced
// streams cost this machine with nothing of an agent: N conversations on one io_context (one
// thread), each a coroutine with its own keep-alive connection that POSTs the same request
// scale_bench's sessions send ("scale <i>", the conversation key of coagent-fakellm
// --per-conversation), reads the SSE reply into a fixed buffer with Beast's parser and looks only
// for `data: [DONE]`. A non-200 status or a reply cut before [DONE] is retried after
// max(B × 2^(n-1), retry-after) up to R retries, so the server answers the same requests it
// answers coagent and the reference (phase parked: B is 10 minutes, as scale_bench's). No JSON,
// no session, no events, no classification.
// It prints the JSON object scale_bench prints (the same fields but idleHeapBytesPerSession: it
// has no sessions to hold before the prompts; "agent":"floor"), so the
// report can set each agent beside the floor: floor / reference is the widest lead this machine
// allows on each figure.
//
//   scale-floor --port P --sessions N [--phase stream|parked] [--chunk-delay-ms D]
//               [--base-delay-ms B] [--max-retries R]

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_static_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/serialize.hpp>

#include "common.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

struct run_state {
    scale::options opt;
    tcp::endpoint server;
    scale::gap_histogram gaps;
    int streaming = 0, waiting = 0, settled = 0, succeeded = 0, connections = 0;
    std::size_t heap_at_peak = 0, rss_at_peak = 0;
    clock_type::time_point all_waiting{}, all_settled{};
    std::vector<asio::steady_timer*> backoffs;  // parked: cancelled once all N wait
    void sample_peak() {
        heap_at_peak = scale::heap_bytes();
        rss_at_peak = scale::rss_bytes();
    }
};

struct conversation_result {
    int attempts = 0, retries = 0;
    double pacing_ms = 0, delays_ms = 0, total_ms = 0;
};

// One attempt on `sock` (connected first when closed): its own coroutine, so that its buffers and
// parser are freed before a backoff. How it ended: status, [DONE] seen, retry-after.
struct attempt_result {
    int status = 0;
    bool done = false;  // a whole 200 reply ending with [DONE]
    std::optional<std::int64_t> retry_after_ms;
};

asio::awaitable<void> attempt(run_state& st, tcp::socket& sock, const std::string& body,
                              bool& counted_streaming, conversation_result& out,
                              attempt_result& r) {
    // a failed connect, write or header read leaves the socket unusable: the next attempt
    // connects anew (async_connect opens the socket and keeps it open when it fails)
    const auto drop = [&sock] {
        beast::error_code ignored;
        sock.shutdown(tcp::socket::shutdown_both, ignored);
        sock.close(ignored);
    };
    if (!sock.is_open()) {
        auto [ec] = co_await sock.async_connect(st.server, use_tuple);
        if (ec) {
            drop();
            co_return;
        }
        ++st.connections;
    }
    {
        http::request<http::string_body> req{http::verb::post, "/v1/chat/completions", 11};
        req.set(http::field::host, "127.0.0.1");
        req.set(http::field::content_type, "application/json");
        req.set(http::field::authorization, "Bearer dummy-key");
        req.body() = body;
        req.prepare_payload();
        auto [ec, n] = co_await http::async_write(sock, req, use_tuple);
        (void)n;
        if (ec) {
            drop();
            co_return;
        }
    }
    beast::flat_static_buffer<1024> buf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    {
        auto [ec, n] = co_await http::async_read_header(sock, buf, p, use_tuple);
        (void)n;
        if (ec) {
            drop();
            co_return;
        }
    }
    r.status = p.get().result_int();
    if (const auto ra = p.get()["retry-after"]; !ra.empty())
        r.retry_after_ms = std::atoll(std::string(ra).c_str()) * 1000;
    std::array<char, 1024> chunk;
    std::string tail;  // the last bytes read, so [DONE] split over two reads is found
    clock_type::time_point first{}, last{};
    int reads = 0;
    bool done = false;
    while (!p.is_done()) {
        p.get().body().data = chunk.data();
        p.get().body().size = chunk.size();
        auto [ec, n] = co_await http::async_read_some(sock, buf, p, use_tuple);
        (void)n;
        if (ec == http::error::need_buffer) ec = {};
        if (ec) break;
        const std::size_t got = chunk.size() - p.get().body().size;
        if (got == 0 || r.status != 200) continue;
        const auto at = clock_type::now();
        if (reads++ == 0)
            first = at;
        else
            st.gaps.add(std::chrono::duration<double, std::milli>(at - last).count() -
                        static_cast<double>(st.opt.chunk_delay_ms));
        last = at;
        if (!counted_streaming) {
            counted_streaming = true;
            if (++st.streaming == st.opt.sessions) st.sample_peak();
        }
        tail.append(chunk.data(), got);
        if (tail.find("data: [DONE]") != std::string::npos) done = true;
        if (tail.size() > 16) tail.erase(0, tail.size() - 16);
    }
    // the server's pacing of every streamed attempt, a cut one's too (as scale_bench counts it)
    if (reads > 1) out.pacing_ms += std::chrono::duration<double, std::milli>(last - first).count();
    r.done = r.status == 200 && done && p.is_done();
    if (!p.is_done() || !p.keep_alive()) drop();
}

// One conversation: attempts until a reply ends with [DONE], the retries run out, or the backoff
// is cancelled. While it waits, it holds its socket, its timer and this frame.
asio::awaitable<void> converse(run_state& st, int index, conversation_result& out) {
    auto ex = co_await asio::this_coro::executor;
    const auto start = clock_type::now();
    tcp::socket sock(ex);
    asio::steady_timer backoff(ex);
    st.backoffs[static_cast<std::size_t>(index)] = &backoff;
    const std::string body =
        R"({"model":"fake-model","stream":true,"messages":[{"role":"user","content":"scale )" +
        std::to_string(index) + "\"}]}";
    bool counted_streaming = false, counted_waiting = false, ok = false;
    for (int n = 0;; ++n) {
        ++out.attempts;
        attempt_result r;
        co_await attempt(st, sock, body, counted_streaming, out, r);
        if (r.done) {
            ok = true;
            break;
        }
        if (n >= st.opt.max_retries) break;
        // parked: a 10-minute base delay, as scale_bench's sessions have
        const std::int64_t base = st.opt.phase == "parked" ? 600000 : st.opt.base_delay_ms;
        std::int64_t delay = base << n;
        if (r.retry_after_ms) delay = std::max(delay, *r.retry_after_ms);
        ++out.retries;
        out.delays_ms += static_cast<double>(delay);
        backoff.expires_after(std::chrono::milliseconds(delay));
        if (st.opt.phase == "parked" && !counted_waiting) {
            counted_waiting = true;
            if (++st.waiting == st.opt.sessions) {
                st.sample_peak();
                st.all_waiting = clock_type::now();
                for (auto* t : st.backoffs)
                    if (t) t->cancel();
                break;  // the last one's own wait has not begun: it ends here
            }
        }
        auto [ec] = co_await backoff.async_wait(use_tuple);
        if (ec) break;  // cancelled
    }
    st.backoffs[static_cast<std::size_t>(index)] = nullptr;
    out.total_ms = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
    st.succeeded += ok ? 1 : 0;
    if (++st.settled == st.opt.sessions) st.all_settled = clock_type::now();
}

}  // namespace

int main(int argc, char** argv) {
    run_state st;
    st.opt = scale::parse(argc, argv, "scale-floor",
                          "scale-floor --port P --sessions N [--phase stream|parked] "
                          "[--chunk-delay-ms D] [--base-delay-ms B] [--max-retries R]");
    const scale::options& opt = st.opt;
    if (opt.ports.size() != 1 || opt.threads != 1) {
        std::cerr << "scale-floor: one --port, and --threads 1 only\n";
        return 2;
    }
    st.server = tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                              static_cast<unsigned short>(opt.ports[0]));
    asio::io_context io(1);
    std::vector<conversation_result> results(static_cast<std::size_t>(opt.sessions));
    st.backoffs.assign(results.size(), nullptr);
    const std::size_t heap0 = scale::heap_bytes();
    const std::size_t rss0 = scale::rss_bytes();
    const double cpu0 = scale::cpu_seconds();
    const auto wall0 = clock_type::now();
    for (int i = 0; i < opt.sessions; ++i)
        asio::co_spawn(io, converse(st, i, results[static_cast<std::size_t>(i)]), asio::detached);
    io.run();
    const double cpu = scale::cpu_seconds() - cpu0;
    const double wall = std::chrono::duration<double>(clock_type::now() - wall0).count();

    std::vector<double> added;
    long long requests = 0, retries = 0, retried = 0;
    for (const auto& r : results) {
        requests += r.attempts;
        retries += r.retries;
        retried += r.retries > 0 ? 1 : 0;
        added.push_back(r.total_ms - r.pacing_ms - r.delays_ms);
    }
    scale::run_figures f;
    f.agent = "floor";
    f.settled = st.settled;
    f.succeeded = st.succeeded;
    f.requests = requests;
    f.retried_prompts = retried;
    f.retry_starts = retries;
    f.retry_ends = retried;
    f.cpu_seconds = cpu;
    f.wall_seconds = wall;
    f.added_ms = std::move(added);
    f.gaps = &st.gaps;
    f.heap0 = heap0;
    f.rss0 = rss0;
    f.heap_at_peak = st.heap_at_peak;
    f.rss_at_peak = st.rss_at_peak;
    f.connections = static_cast<std::size_t>(st.connections);
    f.cancel_all_ms =
        std::chrono::duration<double, std::milli>(st.all_settled - st.all_waiting).count();
    const json::object out = scale::to_json(opt, f);
    std::cout << json::serialize(out) << std::endl;
    return st.settled == opt.sessions ? 0 : 1;
}

// scale-floor: the harness floor of bench/scale (issue 25; docs/benchmarks.md). What N paced
// streams cost this machine with nothing of an agent: N conversations on one io_context (one
// thread), each a coroutine with its own keep-alive connection that POSTs the same request
// scale_bench's sessions send ("scale <i>", the conversation key of coagent-fakellm
// --per-conversation), reads the SSE reply into a fixed buffer with Beast's parser and looks only
// for `data: [DONE]`. A non-200 status or a reply cut before [DONE] is retried after
// max(B × 2^(n-1), retry-after) up to R retries, so the server answers the same requests it
// answers coagent and the reference (phase parked: B is 10 minutes, as scale_bench's). No JSON,
// no session, no events, no classification.
// It prints the JSON object scale_bench prints (the same fields; "agent":"floor"), so the
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

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

struct options {
    int port = 0;
    int sessions = 100;
    std::string phase = "stream";
    std::int64_t chunk_delay_ms = 100;
    std::int64_t base_delay_ms = 100;
    int max_retries = 3;
};

[[noreturn]] void usage(const std::string& why) {
    std::cerr << "scale-floor: " << why
              << "\nusage: scale-floor --port P --sessions N [--phase stream|parked] "
                 "[--chunk-delay-ms D] [--base-delay-ms B] [--max-retries R]\n";
    std::exit(2);
}

options parse(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto number = [&]() -> long long {
            if (i + 1 >= argc) usage(a + " needs a value");
            const std::string v = argv[++i];
            char* end = nullptr;
            const long long n = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || n < 0) usage(a + ": expected a number, found " + v);
            return n;
        };
        if (a == "--port")
            o.port = static_cast<int>(number());
        else if (a == "--sessions")
            o.sessions = static_cast<int>(number());
        else if (a == "--phase") {
            if (i + 1 >= argc) usage("--phase needs a value");
            o.phase = argv[++i];
        } else if (a == "--chunk-delay-ms")
            o.chunk_delay_ms = number();
        else if (a == "--base-delay-ms")
            o.base_delay_ms = number();
        else if (a == "--max-retries")
            o.max_retries = static_cast<int>(number());
        else if (a == "--threads") {
            if (number() != 1) usage("--threads: the floor runs on one thread");
        } else
            usage("unknown option " + a);
    }
    if (o.port == 0) usage("--port is required");
    if (o.sessions < 1) usage("--sessions must be at least 1");
    if (o.phase != "stream" && o.phase != "parked") usage("--phase: stream or parked");
    return o;
}

double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

std::size_t heap_bytes() {
    return mallinfo2().uordblks;
}

std::size_t rss_bytes() {
    std::ifstream in("/proc/self/statm");
    std::size_t pages = 0, resident = 0;
    in >> pages >> resident;
    return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// The gaps between two body reads of a streaming attempt beyond the chunk delay D, as
// scale_bench's histogram (0.05 ms buckets up to 200 ms).
struct gap_histogram {
    static constexpr int buckets = 4000;
    std::array<std::uint32_t, buckets + 1> count{};
    void add(double extra_ms) {
        ++count[static_cast<std::size_t>(
            std::clamp(static_cast<int>(extra_ms / 0.05), 0, buckets))];
    }
    double percentile(double p) const {
        std::uint64_t total = 0;
        for (const auto c : count) total += c;
        if (total == 0) return 0;
        const auto rank = static_cast<std::uint64_t>(p * static_cast<double>(total - 1));
        std::uint64_t seen = 0;
        for (int b = 0; b <= buckets; ++b) {
            seen += count[static_cast<std::size_t>(b)];
            if (seen > rank) return (b + 1) * 0.05;
        }
        return buckets * 0.05;
    }
};

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

struct run_state {
    options opt;
    tcp::endpoint server;
    gap_histogram gaps;
    int streaming = 0, waiting = 0, settled = 0, succeeded = 0, connections = 0;
    std::size_t heap_at_peak = 0, rss_at_peak = 0;
    clock_type::time_point all_waiting{}, all_settled{};
    std::vector<asio::steady_timer*> backoffs;  // parked: cancelled once all N wait
    void sample_peak() {
        heap_at_peak = heap_bytes();
        rss_at_peak = rss_bytes();
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
    if (!sock.is_open()) {
        auto [ec] = co_await sock.async_connect(st.server, use_tuple);
        if (ec) co_return;
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
        if (ec) co_return;
    }
    beast::flat_static_buffer<1024> buf;
    http::response_parser<http::buffer_body> p;
    p.body_limit(boost::none);
    {
        auto [ec, n] = co_await http::async_read_header(sock, buf, p, use_tuple);
        (void)n;
        if (ec) co_return;
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
    if (!p.is_done() || !p.keep_alive()) {
        beast::error_code ignored;
        sock.shutdown(tcp::socket::shutdown_both, ignored);
        sock.close(ignored);
    }
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
    st.opt = parse(argc, argv);
    const options& opt = st.opt;
    st.server =
        tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(opt.port));
    asio::io_context io(1);
    std::vector<conversation_result> results(static_cast<std::size_t>(opt.sessions));
    st.backoffs.assign(results.size(), nullptr);
    const std::size_t heap0 = heap_bytes();
    const std::size_t rss0 = rss_bytes();
    const double cpu0 = cpu_seconds();
    const auto wall0 = clock_type::now();
    for (int i = 0; i < opt.sessions; ++i)
        asio::co_spawn(io, converse(st, i, results[static_cast<std::size_t>(i)]), asio::detached);
    io.run();
    const double cpu = cpu_seconds() - cpu0;
    const double wall = std::chrono::duration<double>(clock_type::now() - wall0).count();

    std::vector<double> added;
    long long requests = 0, retries = 0, retried = 0;
    for (const auto& r : results) {
        requests += r.attempts;
        retries += r.retries;
        retried += r.retries > 0 ? 1 : 0;
        added.push_back(r.total_ms - r.pacing_ms - r.delays_ms);
    }
    const double n = opt.sessions;
    json::object out;
    out["agent"] = "floor";
    out["phase"] = opt.phase;
    out["sessions"] = opt.sessions;
    out["threads"] = 1;
    out["settled"] = st.settled;
    out["succeeded"] = st.succeeded;
    out["requests"] = requests;
    out["retriedPrompts"] = retried;
    out["autoRetryStart"] = retries;
    out["autoRetryEnd"] = retried;
    out["cpuSeconds"] = cpu;
    out["wallSeconds"] = wall;
    out["promptsPerCpuSecond"] = cpu > 0 ? st.settled / cpu : 0.0;
    out["cpuMsPerPrompt"] = st.settled ? cpu * 1000 / st.settled : 0.0;
    out["addedLatencyP50Ms"] = percentile(added, 0.50);
    out["addedLatencyP99Ms"] = percentile(added, 0.99);
    out["chunkGapP50Ms"] = st.gaps.percentile(0.50);
    out["chunkGapP99Ms"] = st.gaps.percentile(0.99);
    const double peak_heap = static_cast<double>(st.heap_at_peak) - static_cast<double>(heap0);
    const double peak_rss = static_cast<double>(st.rss_at_peak) - static_cast<double>(rss0);
    out[opt.phase == "parked" ? "parkedHeapBytesPerSession" : "streamingHeapBytesPerSession"] =
        st.heap_at_peak ? peak_heap / n : -1.0;
    out[opt.phase == "parked" ? "parkedRssBytesPerSession" : "streamingRssBytesPerSession"] =
        st.rss_at_peak ? peak_rss / n : -1.0;
    out["connections"] = st.connections;
    if (opt.phase == "parked")
        out["cancelAllMs"] =
            std::chrono::duration<double, std::milli>(st.all_settled - st.all_waiting).count();
    std::cout << json::serialize(out) << std::endl;
    return st.settled == opt.sessions ? 0 : 1;
}

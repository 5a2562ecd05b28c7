#pragma once
// What bench/scale's two programs (scale_bench, scale-floor) share: their options, what they
// measure the same way (the process's CPU time, heap and RSS, the gaps between two deltas of a
// stream beyond the server's chunk delay, percentiles) and the JSON object they print.

#include <boost/json/object.hpp>

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace scale {

/// The options of both programs (bench/scale/run passes the same to each).
struct options {
    std::vector<int> ports;  // scale-floor: exactly one
    int sessions = 100;
    int threads = 1;  // scale-floor: 1 only
    std::string phase = "stream";
    std::int64_t chunk_delay_ms = 100;
    std::int64_t base_delay_ms = 100;
    int max_retries = 3;
};

/// Parses the command line of `program`; a bad option prints why and `usage_line`, exit 2.
inline options parse(int argc, char** argv, const char* program, const char* usage_line) {
    const auto usage = [&](const std::string& why) {
        std::cerr << program << ": " << why << "\nusage: " << usage_line << "\n";
        std::exit(2);
    };
    options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        const auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage(a + " needs a value");
            return argv[++i];
        };
        const auto number = [&]() -> long long {
            const std::string v = value();
            char* end = nullptr;
            const long long n = std::strtoll(v.c_str(), &end, 10);
            if (v.empty() || *end != '\0' || n < 0) usage(a + ": expected a number, found " + v);
            return n;
        };
        if (a == "--port")
            o.ports.push_back(static_cast<int>(number()));
        else if (a == "--sessions")
            o.sessions = static_cast<int>(number());
        else if (a == "--threads")
            o.threads = static_cast<int>(number());
        else if (a == "--phase")
            o.phase = value();
        else if (a == "--chunk-delay-ms")
            o.chunk_delay_ms = number();
        else if (a == "--base-delay-ms")
            o.base_delay_ms = number();
        else if (a == "--max-retries")
            o.max_retries = static_cast<int>(number());
        else
            usage("unknown option " + a);
    }
    if (o.ports.empty()) usage("--port is required");
    if (o.sessions < 1 || o.threads < 1) usage("--sessions and --threads must be at least 1");
    if (o.phase != "stream" && o.phase != "parked") usage("--phase: stream or parked");
    return o;
}

/// User + system CPU seconds of this process so far (getrusage).
inline double cpu_seconds() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

/// Bytes in use on the heap (glibc mallinfo2).
inline std::size_t heap_bytes() {
    return mallinfo2().uordblks;
}

/// Resident set size in bytes (/proc/self/statm).
inline std::size_t rss_bytes() {
    std::ifstream in("/proc/self/statm");
    std::size_t pages = 0, resident = 0;
    in >> pages >> resident;
    return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

/// The gaps between consecutive deltas of an attempt beyond the server's chunk delay D, in
/// 0.05 ms buckets up to 200 ms (a fixed table: the figure must not grow the memory measured;
/// atomic counts: scale_bench's sessions run on two threads too).
struct gap_histogram {
    static constexpr int buckets = 4000;
    std::array<std::atomic<std::uint32_t>, buckets + 1> count{};
    void add(double extra_ms) {
        const int b = std::clamp(static_cast<int>(extra_ms / 0.05), 0, buckets);
        count[static_cast<std::size_t>(b)].fetch_add(1, std::memory_order_relaxed);
    }
    double percentile(double p) const {
        std::uint64_t total = 0;
        for (const auto& c : count) total += c.load();
        if (total == 0) return 0;
        const auto rank = static_cast<std::uint64_t>(p * static_cast<double>(total - 1));
        std::uint64_t seen = 0;
        for (int b = 0; b <= buckets; ++b) {
            seen += count[static_cast<std::size_t>(b)].load();
            if (seen > rank) return (b + 1) * 0.05;  // the bucket's upper edge
        }
        return buckets * 0.05;
    }
};

/// The p-th percentile (0..1) of `v`, nearest rank; 0 for none.
inline double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

/// What a run found, for the JSON object both programs print (bench/scale/report.mjs reads it).
struct run_figures {
    const char* agent = "";
    int settled = 0;
    long long succeeded = 0, requests = 0, retried_prompts = 0, retry_starts = 0, retry_ends = 0;
    double cpu_seconds = 0, wall_seconds = 0;
    std::vector<double> added_ms;  // each settled prompt's latency beyond pacing and backoffs
    const gap_histogram* gaps = nullptr;
    std::size_t heap0 = 0, rss0 = 0;                // before the sessions
    std::size_t heap_at_peak = 0, rss_at_peak = 0;  // all N streaming or parked (0: never)
    std::size_t connections = 0;
    double cancel_all_ms = 0;  // parked
};

inline boost::json::object to_json(const options& opt, const run_figures& f) {
    boost::json::object out;
    out["agent"] = f.agent;
    out["phase"] = opt.phase;
    out["sessions"] = opt.sessions;
    out["threads"] = opt.threads;
    out["settled"] = f.settled;
    out["succeeded"] = f.succeeded;
    out["requests"] = f.requests;
    out["retriedPrompts"] = f.retried_prompts;
    out["autoRetryStart"] = f.retry_starts;
    out["autoRetryEnd"] = f.retry_ends;
    out["cpuSeconds"] = f.cpu_seconds;
    out["wallSeconds"] = f.wall_seconds;
    out["promptsPerCpuSecond"] = f.cpu_seconds > 0 ? f.settled / f.cpu_seconds : 0.0;
    out["cpuMsPerPrompt"] = f.settled ? f.cpu_seconds * 1000 / f.settled : 0.0;
    out["addedLatencyP50Ms"] = percentile(f.added_ms, 0.50);
    out["addedLatencyP99Ms"] = percentile(f.added_ms, 0.99);
    out["chunkGapP50Ms"] = f.gaps ? f.gaps->percentile(0.50) : 0.0;
    out["chunkGapP99Ms"] = f.gaps ? f.gaps->percentile(0.99) : 0.0;
    const double n = opt.sessions;
    const bool parked = opt.phase == "parked";
    const double peak_heap = static_cast<double>(f.heap_at_peak) - static_cast<double>(f.heap0);
    const double peak_rss = static_cast<double>(f.rss_at_peak) - static_cast<double>(f.rss0);
    out[parked ? "parkedHeapBytesPerSession" : "streamingHeapBytesPerSession"] =
        f.heap_at_peak ? peak_heap / n : -1.0;
    out[parked ? "parkedRssBytesPerSession" : "streamingRssBytesPerSession"] =
        f.rss_at_peak ? peak_rss / n : -1.0;
    out["connections"] = f.connections;
    if (parked) out["cancelAllMs"] = f.cancel_all_ms;
    return out;
}

}  // namespace scale

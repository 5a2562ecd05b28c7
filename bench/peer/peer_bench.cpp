// peer_bench: coagent against the reference agent (pi-coding-agent 0.73.1), side by side, in
// one run on one machine (issue 8). Run through bench/peer/run, which builds everything,
// installs the reference from npm into a cache folder and draws the plot.
//
// One coagent-fakellm on 127.0.0.1 serves every request of the run from one script (the plan
// below, in order). Three agents are driven in RPC mode by coagent's own C++ rpc_client,
// interleaved scenario by scenario:
//   floor      peer-standin-agent: a trivial agent (one blocking HTTP request per attempt, the
//              events written, nothing else), so driver + fake server cost is measured too;
//   coagent    coagent --mode rpc;
//   reference  node pi-coding-agent --mode rpc (through a shim that writes {"type":"ready"}
//              first, because rpc_client waits for it and the reference does not send it).
// Scenarios (each agent the same prompts, the same script steps):
//   cold       S fresh processes: spawn -> first get_state response, then one plain turn;
//   retry2     one process, a warm-up turn, then R x (503, 503, reply) with baseDelayMs 1;
//   exhausted  R x 4 x 503 (maxRetries 3, baseDelayMs 1);
//   abort      R x (503, then abort_retry as soon as auto_retry_start arrives; base 10 s);
//   burst100   100 prompts in a row (each sent when the previous one settled);
//   cpu        T plain turns in one process, one conversation (every request carries the
//              whole history, as agents do): CPU per turn from getrusage(RUSAGE_CHILDREN)
//              around the child's life (reaped by wait), minus a cold process's CPU; peak RSS
//              (VmHWM) before it exits; per-turn latency for the plot;
//   cpu_short  the same with new_session before every 10th turn (short conversations).
// "Settled": coagent and the floor send agent_settled; the reference has no such event, so
// its turn ends at the agent_end whose last message is not an error, or at an
// auto_retry_end with success false (retries exhausted or cancelled).
// Checks: the same number of requests per scenario for every agent (and the statuses the
// script expects, so the shared script cannot drift), and the same auto_retry_start /
// auto_retry_end objects (differences printed).
//
// Usage: peer_bench --coagent BIN --fakellm BIN --standin BIN [--reference SHIM] --work DIR
//                   --json FILE --plot-data FILE [--quick] [--startups S] [--reps R] [--turns T]

#include <coagent/modes/rpc_client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>

#include <spawn.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace asio = boost::asio;
namespace json = boost::json;
namespace fs = std::filesystem;
using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

namespace {

double ms_between(clk::time_point a, clk::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

// ---- statistics ---------------------------------------------------------------------------

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return nan_v;
    std::sort(v.begin(), v.end());
    const double idx = p / 100.0 * double(v.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(idx));
    const auto hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}
double median(const std::vector<double>& v) {
    return percentile(v, 50);
}

// ---- the fake server --------------------------------------------------------------------

const std::string reply_text =
    "Hello! This is a short reply from the fake model, streamed word by word.";
const std::string err503 =
    R"({"status":503,"headers":{"x-should-retry":"false"},"body":{"error":{"message":"Service Unavailable: upstream overloaded"}}})";

struct step {
    int status;  // 200 = a streamed reply
    std::string json() const {
        return status == 200 ? json::serialize(json::object{{"text", reply_text}}) : err503;
    }
};

struct fakellm_proc {
    pid_t pid = -1;
    int port = 0;
    fs::path log;
    std::uintmax_t log_offset = 0;

    void start(const fs::path& exe, const fs::path& script_file, const fs::path& log_file) {
        log = log_file;
        std::error_code ec;
        fs::remove(log, ec);
        int fds[2];
        if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
        posix_spawn_file_actions_addclose(&fa, fds[0]);
        posix_spawn_file_actions_addclose(&fa, fds[1]);
        std::string a0 = exe.string(), a1 = "--port", a2 = "0", a3 = "--script",
                    a4 = script_file.string(), a5 = "--log", a6 = log.string();
        char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(),
                        a4.data(), a5.data(), a6.data(), nullptr};
        if (posix_spawn(&pid, a0.c_str(), &fa, nullptr, argv, environ) != 0)
            throw std::runtime_error("cannot start " + a0);
        posix_spawn_file_actions_destroy(&fa);
        ::close(fds[1]);
        std::string line;
        char c;
        while (::read(fds[0], &c, 1) == 1 && c != '\n') line += c;
        ::close(fds[0]);
        const auto colon = line.rfind(':');
        if (!line.starts_with("listening ") || colon == std::string::npos)
            throw std::runtime_error("coagent-fakellm did not start: '" + line + "'");
        port = std::stoi(line.substr(colon + 1));
    }

    /// The statuses of the requests logged since the last call.
    std::vector<int> new_requests() {
        std::ifstream f(log);
        f.seekg(static_cast<std::streamoff>(log_offset));
        std::vector<int> statuses;
        std::string line;
        while (std::getline(f, line)) {
            if (line.empty()) continue;
            log_offset += line.size() + 1;
            json::value v = json::parse(line);
            statuses.push_back(static_cast<int>(v.at("status").to_number<double>()));
        }
        return statuses;
    }

    /// Stops it; returns its CPU seconds (wait4).
    double stop() {
        if (pid <= 0) return nan_v;
        ::kill(pid, SIGTERM);
        int st = 0;
        rusage ru{};
        ::wait4(pid, &st, 0, &ru);
        pid = -1;
        return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    }
};

// ---- /proc ------------------------------------------------------------------------------

long proc_status_kb(int pid, const char* key) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    const std::size_t n = std::strlen(key);
    while (std::getline(f, line))
        if (line.compare(0, n, key) == 0 && line.size() > n && line[n] == ':')
            return std::atol(line.c_str() + n + 1);
    return -1;
}

/// User and system CPU seconds of the reaped children so far.
std::pair<double, double> children_cpu_s() {
    rusage ru{};
    ::getrusage(RUSAGE_CHILDREN, &ru);
    return {double(ru.ru_utime.tv_sec) + double(ru.ru_utime.tv_usec) / 1e6,
            double(ru.ru_stime.tv_sec) + double(ru.ru_stime.tv_usec) / 1e6};
}

std::string read_first_line(const std::string& path, const std::string& prefix = "") {
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line))
        if (prefix.empty() || line.starts_with(prefix)) return line;
    return "";
}

std::string run_capture(const std::string& cmd) {
    std::string out;
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
        char buf[256];
        while (std::fgets(buf, sizeof buf, p)) out += buf;
        ::pclose(p);
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    return out;
}

// ---- agents and scenarios ---------------------------------------------------------------

struct agent {
    std::string name;
    fs::path exe;
    std::vector<std::string> args;
    std::string dir_var;  // COAGENT_DIR / PI_CODING_AGENT_DIR
    std::map<std::string, std::string> env;
    bool settles_with_event = true;  // agent_settled; else the reference's rule
    bool real_ready = true;          // the ready line is the agent's own
};

struct scenario {
    std::string name;
    std::string label;
    std::string profile = "fast";  // fast: baseDelayMs 1; abort: baseDelayMs 10000
    int processes = 1;
    bool warmup = true;  // one unmeasured plain turn first
    int reps = 0;
    std::vector<step> per_rep;
    double backoff_ms = 0;  // configured backoff per rep, subtracted
    bool abort = false;
    int new_session_every = 0;   // 0: one conversation; N: new_session before every N-th turn
    bool session_files = false;  // --session-dir instead of --no-session (coagent, reference)
};

struct proc_result {
    double ready_ms = nan_v, first_response_ms = nan_v, cpu_s = nan_v, cpu_sys_s = nan_v;
    long hwm_idle_kb = -1, hwm_kb = -1, rss_anon_kb = -1;
    int exit_status = -1;
    std::vector<double> wall_ms, net_ms, abort_ms;
    std::vector<std::string> retry_events;
    std::vector<int> statuses;
};

struct turn_state {
    bool settled = false, retry_started = false;
    clk::time_point t_settled, t_retry;
    std::vector<std::string>* retry_events = nullptr;
};

asio::awaitable<void> wait_flag(asio::steady_timer& t, const bool& flag,
                                std::chrono::milliseconds limit, const std::string& what,
                                coagent::rpc_client& c) {
    const auto deadline = clk::now() + limit;
    while (!flag) {
        if (!c.running())
            throw std::runtime_error(what + ": the agent exited; stderr: " + c.get_stderr());
        t.expires_at(std::min(deadline, clk::now() + 500ms));
        co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        if (!flag && clk::now() >= deadline)
            throw std::runtime_error(what + ": timed out after " + std::to_string(limit.count()) +
                                     " ms; stderr: " + c.get_stderr());
    }
}

struct options {
    fs::path coagent, fakellm, standin, reference, work, json_out, plot_data;
    bool quick = false;
    int startups = 15, reps = 100, turns = 1000;
};

struct bench {
    asio::io_context& io;
    options opt;
    std::vector<agent> agents;
    std::vector<scenario> scenarios;
    fakellm_proc server;
    // results[scenario][agent] = one per process
    std::map<std::string, std::map<std::string, std::vector<proc_result>>> results;
    std::vector<std::string> failures;

    fs::path config_dir(const agent& a, const std::string& profile) const {
        return opt.work / ("cfg-" + a.name + "-" + profile);
    }

    void write_configs() {
        const std::string models =
            R"({"providers":{"fake":{"baseUrl":"http://127.0.0.1:)" + std::to_string(server.port) +
            R"(/v1","api":"openai-completions","apiKey":"dummy-key","compat":{"supportsDeveloperRole":false,"supportsReasoningEffort":false,"supportsUsageInStreaming":true},"models":[{"id":"fake-model","name":"Fake Model","reasoning":false,"input":["text"],"contextWindow":1000000,"maxTokens":4096,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0}}]}}})";
        for (const auto& a : agents)
            for (const std::string profile : {"fast", "abort"}) {
                const fs::path d = config_dir(a, profile);
                fs::create_directories(d);
                std::ofstream(d / "models.json") << models << "\n";
                const int base = profile == "fast" ? 1 : 10000;
                // compaction off (and a context window no run fills): every request is the
                // plan's, never a summary request at a point that differs between the agents
                std::string settings =
                    R"({"compaction":{"enabled":false},"retry":{"enabled":true,"maxRetries":3,"baseDelayMs":)" +
                    std::to_string(base);
                // the reference: no hidden SDK retries below its own policy
                if (!a.settles_with_event)
                    settings += R"(,"provider":{"maxRetries":0}},"quietStartup":true})";
                else
                    settings += "}}";
                std::ofstream(d / "settings.json") << settings << "\n";
            }
        fs::create_directories(opt.work / "home");
    }

    std::vector<step> process_steps(const scenario& s) const {
        std::vector<step> v;
        if (s.warmup) v.push_back({200});
        for (int i = 0; i < s.reps; ++i) v.insert(v.end(), s.per_rep.begin(), s.per_rep.end());
        return v;
    }

    /// The whole run's script, in the order run() takes the steps.
    fs::path write_script() {
        std::vector<std::pair<std::string, int>> merged;
        for (const auto& s : scenarios)
            for (int p = 0; p < s.processes; ++p)
                for (std::size_t ai = 0; ai < agents.size(); ++ai)
                    for (const auto& st : process_steps(s)) {
                        const std::string j = st.json();
                        if (!merged.empty() && merged.back().first == j)
                            ++merged.back().second;
                        else
                            merged.emplace_back(j, 1);
                    }
        std::string script = "[";
        for (std::size_t i = 0; i < merged.size(); ++i) {
            json::object o = json::parse(merged[i].first).as_object();
            if (merged[i].second > 1) o["times"] = merged[i].second;
            script += (i ? ",\n" : "") + json::serialize(o);
        }
        script += "]\n";
        const fs::path f = opt.work / "fakellm-script.json";
        std::ofstream(f) << script;
        return f;
    }

    asio::awaitable<proc_result> run_process(const agent& a, const scenario& s) {
        proc_result r;
        coagent::rpc_client_options ro;
        ro.request_timeout = 60s;
        ro.start_timeout = 60s;
        ro.stop_timeout = 10s;
        coagent::rpc_client c(io, ro);
        std::map<std::string, std::string> env = a.env;
        env[a.dir_var] = config_dir(a, s.profile).string();
        env["PEER_BENCH_SCENARIO"] = s.name;  // for a profiling wrapper (bench/peer/run --profile)
        const auto cpu_before = children_cpu_s();
        const auto t0 = clk::now();
        std::vector<std::string> args;
        for (const auto& x : a.args)
            if (s.session_files && x == "--no-session") {
                const fs::path d = opt.work / "sessions" / (a.name + "-" + s.name);
                fs::create_directories(d);
                args.push_back("--session-dir");
                args.push_back(d.string());
            } else {
                args.push_back(x);
            }
        co_await c.start(a.exe, std::move(args), std::move(env));
        const auto t_ready = clk::now();
        co_await c.get_state();
        const auto t_first = clk::now();
        if (a.real_ready) r.ready_ms = ms_between(t0, t_ready);
        r.first_response_ms = ms_between(t0, t_first);
        r.hwm_idle_kb = proc_status_kb(c.pid(), "VmHWM");

        asio::steady_timer timer(io);
        turn_state ts;
        ts.retry_events = &r.retry_events;
        const bool by_event = a.settles_with_event;
        auto sub = c.on_event([&ts, &timer, by_event](const json::object& e) {
            const auto& type = e.at("type").as_string();
            if (type == "auto_retry_start" || type == "auto_retry_end") {
                // the reference's fields only: coagent's extras (`limit`, `discarded`) are not
                // compared
                json::object same;
                for (const char* k : {"type", "attempt", "maxAttempts", "delayMs", "errorMessage",
                                      "success", "finalError"})
                    if (const auto* v = e.if_contains(k)) same[k] = *v;
                ts.retry_events->push_back(json::serialize(same));
            }
            bool settled = false;
            if (by_event) {
                settled = type == "agent_settled";
            } else if (type == "agent_end") {
                const auto* ms = e.if_contains("messages");
                if (ms && ms->is_array() && !ms->as_array().empty()) {
                    const auto* sr = ms->as_array().back().as_object().if_contains("stopReason");
                    settled = !(sr && sr->is_string() && sr->as_string() == "error");
                }
            } else if (type == "auto_retry_end") {
                const auto* ok = e.if_contains("success");
                settled = ok && ok->is_bool() && !ok->as_bool();
            }
            if (type == "auto_retry_start" && !ts.retry_started) {
                ts.retry_started = true;
                ts.t_retry = clk::now();
                timer.cancel();
            }
            if (settled && !ts.settled) {
                ts.settled = true;
                ts.t_settled = clk::now();
                timer.cancel();
            }
        });

        const int total = s.reps + (s.warmup ? 1 : 0);
        for (int i = 0; i < total; ++i) {
            const bool measured = !(s.warmup && i == 0);
            if (s.new_session_every > 0 && i > 0 && i % s.new_session_every == 0)
                co_await c.new_session();
            ts.settled = ts.retry_started = false;
            const std::size_t events_before = r.retry_events.size();
            const auto tp = clk::now();
            co_await c.prompt("Say hello");
            if (measured && s.abort) {
                co_await wait_flag(timer, ts.retry_started, 60s,
                                   a.name + " " + s.name + ": auto_retry_start", c);
                const auto ta = clk::now();
                co_await c.abort_retry();
                co_await wait_flag(timer, ts.settled, 60s,
                                   a.name + " " + s.name + ": settle after abort_retry", c);
                r.abort_ms.push_back(ms_between(ta, ts.t_settled));
            } else {
                co_await wait_flag(timer, ts.settled, 60s, a.name + " " + s.name + ": settle", c);
            }
            if (!measured) {
                r.retry_events.resize(events_before);
                continue;
            }
            const double wall = ms_between(tp, ts.t_settled);
            r.wall_ms.push_back(wall);
            r.net_ms.push_back(wall - s.backoff_ms);
        }
        // a reference turn "settles" at an event that may precede its last lines; let them come
        if (!a.settles_with_event) {
            timer.expires_after(20ms);
            co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        r.hwm_kb = proc_status_kb(c.pid(), "VmHWM");
        r.rss_anon_kb = proc_status_kb(c.pid(), "RssAnon");
        sub.reset();
        r.exit_status = co_await c.stop();
        const auto cpu_after = children_cpu_s();
        r.cpu_sys_s = cpu_after.second - cpu_before.second;
        r.cpu_s = cpu_after.first - cpu_before.first + r.cpu_sys_s;
        r.statuses = server.new_requests();
        std::vector<int> expected;
        for (const auto& st : process_steps(s)) expected.push_back(st.status);
        if (r.statuses != expected) {
            std::string got, want;
            for (int x : r.statuses) got += std::to_string(x) + " ";
            for (int x : expected) want += std::to_string(x) + " ";
            throw std::runtime_error(
                a.name + " " + s.name + ": the fake server saw requests [" + got +
                "], the plan expects [" + want +
                "]; the shared script is out of step, the figures would be wrong");
        }
        co_return r;
    }

    asio::awaitable<void> run() {
        for (const auto& s : scenarios) {
            std::fprintf(stderr, "peer_bench: %s", s.name.c_str());
            for (int p = 0; p < s.processes; ++p)
                for (const auto& a : agents) {
                    auto r = co_await run_process(a, s);
                    results[s.name][a.name].push_back(std::move(r));
                    std::fputc('.', stderr);
                }
            std::fputc('\n', stderr);
        }
    }

    // ---- report ---------------------------------------------------------------------------

    std::vector<double> all(const std::string& sc, const std::string& ag,
                            std::vector<double> proc_result::*m) {
        std::vector<double> v;
        for (const auto& r : results[sc][ag]) v.insert(v.end(), (r.*m).begin(), (r.*m).end());
        return v;
    }
    std::vector<double> each(const std::string& sc, const std::string& ag, double proc_result::*m) {
        std::vector<double> v;
        for (const auto& r : results[sc][ag]) v.push_back(r.*m);
        return v;
    }
    /// One per process of the run (every scenario starts its processes the same way).
    std::vector<double> startup_samples(const std::string& ag, double proc_result::*m) {
        std::vector<double> v;
        for (const auto& s : scenarios)
            for (const auto& r : results[s.name][ag])
                if (!std::isnan(r.*m)) v.push_back(r.*m);
        return v;
    }

    bool has(const std::string& ag) const {
        return std::any_of(agents.begin(), agents.end(),
                           [&](const agent& a) { return a.name == ag; });
    }
};

struct figure {
    std::string key, label, unit;
    std::map<std::string, double> v;  // by agent
    double target = 0;                // ratio reference/coagent wanted (0: none)
    bool lower_is_better = true;
};

std::string fmt(double x, int prec = 2) {
    if (std::isnan(x)) return "n/a";
    char b[64];
    if (std::fabs(x) >= 1000)
        std::snprintf(b, sizeof b, "%.0f", x);
    else if (std::fabs(x) >= 100)
        std::snprintf(b, sizeof b, "%.1f", x);
    else
        std::snprintf(b, sizeof b, "%.*f", prec, x);
    return b;
}

double ratio(double ref, double co) {
    return (std::isnan(ref) || std::isnan(co) || co <= 0) ? nan_v : ref / co;
}
/// Within 10 % of the floor, coagent's own share is noise: no net ratio then.
bool at_floor(double co, double floor) {
    return !std::isnan(co) && !std::isnan(floor) && co - floor < 0.1 * floor;
}
double net_ratio(double ref, double co, double floor) {
    if (std::isnan(floor) || at_floor(co, floor)) return nan_v;
    const double r = ref - floor, c = co - floor;
    if (std::isnan(r) || std::isnan(c) || c <= 0 || r <= 0) return nan_v;
    return r / c;
}

int usage() {
    std::cerr << "usage: peer_bench --coagent BIN --fakellm BIN --standin BIN [--reference SHIM] "
                 "--work DIR "
                 "--json FILE --plot-data FILE [--quick] [--startups S] [--reps R] [--turns T]\n";
    return 2;
}

}  // namespace

int main(int argc, char** argv) {
    options opt;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) std::exit(usage());
            return argv[++i];
        };
        if (a == "--coagent")
            opt.coagent = next();
        else if (a == "--fakellm")
            opt.fakellm = next();
        else if (a == "--standin")
            opt.standin = next();
        else if (a == "--reference")
            opt.reference = next();
        else if (a == "--work")
            opt.work = next();
        else if (a == "--json")
            opt.json_out = next();
        else if (a == "--plot-data")
            opt.plot_data = next();
        else if (a == "--quick")
            opt.quick = true;
        else if (a == "--startups")
            opt.startups = std::stoi(next());
        else if (a == "--reps")
            opt.reps = std::stoi(next());
        else if (a == "--turns")
            opt.turns = std::stoi(next());
        else
            return usage();
    }
    if (opt.coagent.empty() || opt.fakellm.empty() || opt.standin.empty() || opt.work.empty() ||
        opt.json_out.empty() || opt.plot_data.empty())
        return usage();
    if (opt.quick) {
        opt.startups = std::min(opt.startups, 3);
        opt.reps = std::min(opt.reps, 5);
        opt.turns = std::min(opt.turns, 200);
    }
    opt.work = fs::absolute(opt.work);
    for (auto* p :
         {&opt.coagent, &opt.fakellm, &opt.standin, &opt.reference, &opt.json_out, &opt.plot_data})
        if (!p->empty()) *p = fs::absolute(*p);
    fs::remove_all(opt.work);
    fs::create_directories(opt.work / "cwd");
    // the agents' working directory: no project settings, context files or session files of
    // the caller's directory are seen or written
    fs::current_path(opt.work / "cwd");

    asio::io_context io;
    bench b{io, opt, {}, {}, {}, {}, {}};
    const std::string home = (opt.work / "home").string();
    b.agents.push_back({"floor", opt.standin, {}, "COAGENT_DIR", {{"HOME", home}}, true, true});
    b.agents.push_back({"coagent",
                        opt.coagent,
                        {"--provider", "fake", "--model", "fake-model", "--no-session"},
                        "COAGENT_DIR",
                        {{"HOME", home}},
                        true,
                        true});
    if (!opt.reference.empty())
        b.agents.push_back(
            {"reference",
             opt.reference,
             {"--provider", "fake", "--model", "fake-model", "--no-session", "--no-tools",
              "--no-extensions", "--no-skills", "--no-prompt-templates", "--no-context-files"},
             "PI_CODING_AGENT_DIR",
             {{"HOME", home}, {"PI_OFFLINE", "1"}, {"PI_TELEMETRY", "0"}},
             false,
             false});

    const std::vector<step> ok{{200}}, retry2{{503}, {503}, {200}},
        four503{{503}, {503}, {503}, {503}}, one503{{503}};
    b.scenarios = {
        {"cold", "cold start + first turn", "fast", opt.startups, false, 1, ok, 0, false},
        {"retry2", "2 x 503 then success (baseDelayMs 1)", "fast", 1, true, opt.reps, retry2, 1 + 2,
         false},
        {"exhausted", "4 x 503, retries exhausted", "fast", 1, true, opt.reps, four503, 1 + 2 + 4,
         false},
        {"abort", "abort_retry during a backoff", "abort", 1, true, opt.reps, one503, 0, true},
        {"burst100", "100 prompts in a row", "fast", 1, false, 100, ok, 0, false},
        {"cpu", "plain turns in one conversation (CPU, RSS, plot)", "fast", 1, false, opt.turns, ok,
         0, false},
        // with session files: the reference's new_session starts writing one into its cwd even
        // under --no-session, so both agents write them here (the same work)
        {"cpu_short", "plain turns, new_session every 10 (CPU, plot)", "fast", 1, false, opt.turns,
         ok, 0, false, 10, true},
    };

    std::signal(SIGPIPE, SIG_IGN);
    double loadavg_start[3] = {0, 0, 0}, loadavg_end[3] = {0, 0, 0};
    ::getloadavg(loadavg_start, 3);
    const auto t_run = clk::now();
    double server_cpu = nan_v;
    // the script does not depend on the port (the models.json files do: written after the start)
    const fs::path script = b.write_script();
    try {
        b.server.start(opt.fakellm, script, opt.work / "fakellm.log");
        b.write_configs();
        std::exception_ptr failure;
        asio::co_spawn(io, b.run(), [&](std::exception_ptr e) { failure = e; });
        io.run();
        server_cpu = b.server.stop();
        if (failure) std::rethrow_exception(failure);
    } catch (const std::exception& e) {
        if (b.server.pid > 0) b.server.stop();
        std::cerr << "\npeer_bench FAILED: " << e.what() << "\n";
        return 1;
    }
    ::getloadavg(loadavg_end, 3);
    const double run_s = ms_between(t_run, clk::now()) / 1000;

    // ---- figures ------------------------------------------------------------------------
    const std::vector<std::string> names = [&] {
        std::vector<std::string> v;
        for (const auto& a : b.agents) v.push_back(a.name);
        return v;
    }();
    std::vector<figure> figs;
    auto add = [&](std::string key, std::string label, std::string unit, double target,
                   auto&& value_of) {
        figure f{std::move(key), std::move(label), std::move(unit), {}, target, true};
        for (const auto& n : names) f.v[n] = value_of(n);
        figs.push_back(std::move(f));
    };
    add("startup_ms", "start -> first response (get_state), median", "ms", 100,
        [&](const std::string& n) {
            return median(b.startup_samples(n, &proc_result::first_response_ms));
        });
    add("ready_ms", "start -> ready line, median", "ms", 0,
        [&](const std::string& n) { return median(b.startup_samples(n, &proc_result::ready_ms)); });
    add("cold_turn_ms", "first turn of a fresh process, median", "ms", 0,
        [&](const std::string& n) { return median(b.all("cold", n, &proc_result::wall_ms)); });
    add("turn_ms", "warm plain turn (burst100), median", "ms", 0,
        [&](const std::string& n) { return median(b.all("burst100", n, &proc_result::wall_ms)); });
    add("turn_p99_ms", "warm plain turn (burst100), p99", "ms", 0, [&](const std::string& n) {
        return percentile(b.all("burst100", n, &proc_result::wall_ms), 99);
    });
    add("burst100_total_ms", "100 prompts in a row, total", "ms", 0, [&](const std::string& n) {
        auto v = b.all("burst100", n, &proc_result::wall_ms);
        return std::accumulate(v.begin(), v.end(), 0.0);
    });
    add("retry2_net_ms", "2x503+success, settled - 3 ms backoff, median", "ms", 20,
        [&](const std::string& n) { return median(b.all("retry2", n, &proc_result::net_ms)); });
    add("retry2_first_net_ms", "  the first of them in the process (lazy set-up)", "ms", 0,
        [&](const std::string& n) {
            const auto& runs = b.results["retry2"][n];
            return runs.empty() || runs[0].net_ms.empty() ? nan_v : runs[0].net_ms[0];
        });
    add("exhausted_net_ms", "4x503 exhausted, settled - 7 ms backoff, median", "ms", 0,
        [&](const std::string& n) { return median(b.all("exhausted", n, &proc_result::net_ms)); });
    add("abort_ms", "abort_retry sent -> settled, median", "ms", 0,
        [&](const std::string& n) { return median(b.all("abort", n, &proc_result::abort_ms)); });
    auto cpu_per_turn = [&](const std::string& sc, const std::string& n,
                            double proc_result::*m = &proc_result::cpu_s) {
        const auto& runs = b.results[sc][n];
        const double cold = median(b.each("cold", n, m));
        if (runs.empty()) return nan_v;
        return (runs[0].*m - cold) * 1000 / double(opt.turns - 1);
    };
    add("cpu_per_turn_ms", "CPU per turn, one " + std::to_string(opt.turns) + "-turn conversation",
        "ms", 50, [&](const std::string& n) { return cpu_per_turn("cpu", n); });
    add("cpu_sys_per_turn_ms", "  of which in the kernel (system time)", "ms", 0,
        [&](const std::string& n) { return cpu_per_turn("cpu", n, &proc_result::cpu_sys_s); });
    add("cpu_per_turn_short_ms",
        "CPU per turn, " + std::to_string(opt.turns) + " turns in 10-turn conversations", "ms", 50,
        [&](const std::string& n) { return cpu_per_turn("cpu_short", n); });
    add("cpu_sys_per_turn_short_ms", "  of which in the kernel (system time)", "ms", 0,
        [&](const std::string& n) {
            return cpu_per_turn("cpu_short", n, &proc_result::cpu_sys_s);
        });
    add("turn_short_ms", "plain turn in 10-turn conversations, median", "ms", 0,
        [&](const std::string& n) { return median(b.all("cpu_short", n, &proc_result::wall_ms)); });
    add("cpu_startup_ms", "CPU of a process: start + 1 turn + exit", "ms", 0,
        [&](const std::string& n) {
            return median(b.each("cold", n, &proc_result::cpu_s)) * 1000;
        });
    add("rss_idle_mb", "peak RSS after start (VmHWM)", "MB", 0, [&](const std::string& n) {
        std::vector<double> v;
        for (const auto& r : b.results["cold"][n]) v.push_back(double(r.hwm_idle_kb) / 1024);
        return median(v);
    });
    add("rss_peak_mb", "peak RSS after " + std::to_string(opt.turns) + " turns (VmHWM)", "MB", 20,
        [&](const std::string& n) {
            const auto& cpu = b.results["cpu"][n];
            return cpu.empty() ? nan_v : double(cpu[0].hwm_kb) / 1024;
        });
    add("rss_anon_mb", "RssAnon after " + std::to_string(opt.turns) + " turns (no file pages)",
        "MB", 0, [&](const std::string& n) {
            const auto& cpu = b.results["cpu"][n];
            return cpu.empty() ? nan_v : double(cpu[0].rss_anon_kb) / 1024;
        });

    // ---- requests and retry events --------------------------------------------------------
    json::object req_json, events_json;
    std::vector<std::string> diffs;
    bool requests_equal = true;
    for (const auto& s : b.scenarios) {
        json::object per;
        std::optional<std::size_t> first;
        for (const auto& n : names) {
            std::size_t count = 0;
            for (const auto& r : b.results[s.name][n]) count += r.statuses.size();
            per[n] = count;
            if (!first)
                first = count;
            else if (*first != count)
                requests_equal = false;
        }
        req_json[s.name] = per;
        // retry events: the reference is the yardstick, coagent and the floor are compared
        auto seq = [&](const std::string& n) {
            std::vector<std::string> v;
            for (const auto& r : b.results[s.name][n])
                v.insert(v.end(), r.retry_events.begin(), r.retry_events.end());
            return v;
        };
        json::object ev;
        const std::string yard = b.has("reference") ? "reference" : "coagent";
        const auto ys = seq(yard);
        ev["count"] = ys.size();
        if (!ys.empty()) ev["first"] = json::parse(ys.front());
        json::array d;
        for (const auto& n : names) {
            if (n == yard) continue;
            const auto xs = seq(n);
            const std::size_t m = std::max(xs.size(), ys.size());
            int shown = 0;
            for (std::size_t i = 0; i < m; ++i) {
                const std::string x = i < xs.size() ? xs[i] : "(none)";
                const std::string y = i < ys.size() ? ys[i] : "(none)";
                if (x == y) continue;
                if (shown++ < 3) {
                    diffs.push_back(s.name + " #" + std::to_string(i) + ": " + n + " " + x +
                                    "  vs  " + yard + " " + y);
                    d.push_back(
                        json::object{{"agent", n}, {"index", i}, {"got", x}, {"expected", y}});
                }
            }
            ev[n + "_same_as_" + yard] = shown == 0;
        }
        ev["differences"] = d;
        events_json[s.name] = ev;
    }

    // ---- the table ------------------------------------------------------------------------
    const bool with_ref = b.has("reference");
    std::printf(
        "\nside-by-side: coagent vs the reference agent (pi-coding-agent 0.73.1), floor = driver + "
        "coagent-fakellm + trivial stand-in agent\n");
    std::printf("%-56s %9s %9s %9s %8s %9s  %s\n", "figure", "floor", "coagent", "reference",
                "ratio", "net ratio", "target");
    json::array fig_json;
    std::vector<std::string> missed;
    for (const auto& f : figs) {
        const double fl = f.v.count("floor") ? f.v.at("floor") : nan_v;
        const double co = f.v.at("coagent");
        const double re = with_ref ? f.v.at("reference") : nan_v;
        const double r = ratio(re, co), nr = net_ratio(re, co, fl);
        std::string target = "";
        if (f.target > 0) {
            const bool met = !std::isnan(r) && r >= f.target;
            target = ">= " + std::to_string(int(f.target)) + "x " +
                     (std::isnan(r) ? ""
                      : met         ? "met"
                                    : "MISSED");
            if (!std::isnan(r) && !met) missed.push_back(f.key);
        }
        // net ratio: n/a without a floor; "at floor" when coagent is within 10 % of it
        const std::string net = !std::isnan(nr)    ? fmt(nr, 1) + "x"
                                : at_floor(co, fl) ? "at floor"
                                                   : "n/a";
        std::printf("%-56s %9s %9s %9s %8s %9s  %s\n", (f.label + " [" + f.unit + "]").c_str(),
                    fmt(fl, 3).c_str(), fmt(co, 3).c_str(), fmt(re, 3).c_str(),
                    (fmt(r, 1) + (std::isnan(r) ? "" : "x")).c_str(), net.c_str(), target.c_str());
        json::object o{{"key", f.key}, {"label", f.label}, {"unit", f.unit}};
        for (const auto& [n, v] : f.v) o[n] = std::isnan(v) ? json::value(nullptr) : json::value(v);
        o["ratio"] = std::isnan(r) ? json::value(nullptr) : json::value(r);
        o["net_ratio"] = std::isnan(nr) ? json::value(nullptr) : json::value(nr);
        if (f.target > 0) {
            o["target_ratio"] = f.target;
            o["target_met"] = !std::isnan(r) && r >= f.target;
        }
        fig_json.push_back(std::move(o));
    }
    std::printf("\nrequests sent to coagent-fakellm per scenario (must be equal):\n");
    for (const auto& s : b.scenarios) {
        std::printf("  %-10s", s.name.c_str());
        for (const auto& n : names)
            std::printf(
                "  %s %lld", n.c_str(),
                static_cast<long long>(req_json[s.name].as_object()[n].to_number<long long>()));
        std::printf("\n");
    }
    std::printf("  %s\n", requests_equal ? "equal" : "NOT EQUAL");
    std::printf("\nauto_retry_start / auto_retry_end objects per scenario (vs %s):\n",
                with_ref ? "reference" : "coagent");
    for (const auto& s : b.scenarios) {
        const auto& ev = events_json[s.name].as_object();
        std::printf("  %-10s %3lld objects", s.name.c_str(),
                    static_cast<long long>(ev.at("count").to_number<long long>()));
        for (const auto& [k, v] : ev)
            if (k.ends_with(with_ref ? "_same_as_reference" : "_same_as_coagent"))
                std::printf("  %s: %s", std::string(k.substr(0, k.find('_'))).c_str(),
                            v.as_bool() ? "same" : "DIFFERENT");
        if (ev.contains("first")) std::printf("  e.g. %s", json::serialize(ev.at("first")).c_str());
        std::printf("\n");
    }
    for (const auto& d : diffs) std::printf("  difference: %s\n", d.c_str());
    std::printf(
        "\nrun: %.0f s, load average %.2f at the start, %.2f at the end, %u cores; fake server CPU "
        "%.2f s\n",
        run_s, loadavg_start[0], loadavg_end[0], std::thread::hardware_concurrency(), server_cpu);
    if (!missed.empty()) {
        std::printf("targets missed:");
        for (const auto& m : missed) std::printf(" %s", m.c_str());
        std::printf("\n");
    }

    // ---- plot data and JSON ---------------------------------------------------------------
    {
        // turn, then floor / coagent / reference for the long conversation, then for the short ones
        std::ofstream pd(opt.plot_data);
        pd << "# turn floor_ms coagent_ms reference_ms floor_short_ms coagent_short_ms "
              "reference_short_ms\n";
        auto cell = [&](const std::string& sc, const std::string& n, int i) {
            const auto& runs = b.results[sc][n];
            return runs.empty() || std::size_t(i) >= runs[0].wall_ms.size()
                       ? nan_v
                       : runs[0].wall_ms[std::size_t(i)];
        };
        for (int i = 0; i < opt.turns; ++i) {
            pd << i + 1;
            for (const std::string sc : {"cpu", "cpu_short"})
                for (const std::string n : {"floor", "coagent", "reference"})
                    pd << " " << cell(sc, n, i);
            pd << "\n";
        }
    }
    json::object out;
    utsname u{};
    ::uname(&u);
    out["machine"] =
        json::object{{"cpu",
                      [] {
                          std::string m = read_first_line("/proc/cpuinfo", "model name");
                          const auto colon = m.find(": ");
                          return colon == std::string::npos ? m : m.substr(colon + 2);
                      }()},
                     {"cores", std::thread::hardware_concurrency()},
                     {"kernel", std::string(u.release)},
                     {"loadavg_start", loadavg_start[0]},
                     {"loadavg_end", loadavg_end[0]},
                     {"note", "shared machine, other jobs running: figures are noisy"}};
    out["versions"] =
        json::object{{"coagent", run_capture("'" + opt.coagent.string() + "' --version 2>&1")},
                     {"node", run_capture("node --version 2>&1")},
                     {"reference", "@mariozechner/pi-coding-agent@0.73.1"}};
    out["config"] = json::object{{"quick", opt.quick},
                                 {"startups", opt.startups},
                                 {"reps", opt.reps},
                                 {"turns", opt.turns},
                                 {"run_seconds", run_s}};
    json::array sc_json;
    for (const auto& sc : b.scenarios) {
        json::array steps;
        for (const auto& st : sc.per_rep) steps.push_back(st.status);
        sc_json.push_back(json::object{{"name", sc.name},
                                       {"label", sc.label},
                                       {"processes", sc.processes},
                                       {"warmup_turn", sc.warmup},
                                       {"reps", sc.reps},
                                       {"statuses_per_rep", steps},
                                       {"backoff_ms_subtracted", sc.backoff_ms},
                                       {"base_delay_ms", sc.profile == "fast" ? 1 : 10000},
                                       {"new_session_every", sc.new_session_every},
                                       {"session_files", sc.session_files}});
    }
    out["scenarios"] = sc_json;
    out["figures"] = fig_json;
    out["requests"] = req_json;
    out["requests_equal"] = requests_equal;
    out["retry_events"] = events_json;
    out["fake_server_cpu_s"] = server_cpu;
    json::array missed_json;
    for (const auto& m : missed) missed_json.push_back(json::string(m));
    out["targets_missed"] = missed_json;
    json::object raw;
    for (const auto& s : b.scenarios) {
        json::object per;
        for (const auto& n : names) {
            json::array procs;
            for (const auto& r : b.results[s.name][n]) {
                json::object p{{"first_response_ms", r.first_response_ms},
                               {"cpu_s", r.cpu_s},
                               {"cpu_sys_s", r.cpu_sys_s},
                               {"hwm_idle_kb", r.hwm_idle_kb},
                               {"hwm_kb", r.hwm_kb},
                               {"rss_anon_kb", r.rss_anon_kb},
                               {"exit_status", r.exit_status},
                               {"requests", r.statuses.size()}};
                if (!std::isnan(r.ready_ms)) p["ready_ms"] = r.ready_ms;
                if (!s.name.starts_with("cpu")) {
                    json::array w(r.wall_ms.begin(), r.wall_ms.end());
                    p["wall_ms"] = w;
                    if (!r.abort_ms.empty())
                        p["abort_ms"] = json::array(r.abort_ms.begin(), r.abort_ms.end());
                }
                procs.push_back(std::move(p));
            }
            per[n] = procs;
        }
        raw[s.name] = per;
    }
    out["raw"] = raw;
    std::ofstream(opt.json_out) << json::serialize(out) << "\n";
    return (requests_equal && diffs.empty()) ? 0 : 3;
}

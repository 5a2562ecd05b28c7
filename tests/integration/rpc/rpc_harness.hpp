#pragma once
// Subprocess harness for the RPC tests: `coagent --mode rpc` (COAGENT_BIN) as a child with
// real pipes on a private io_context, a fresh COAGENT_DIR per test, and waits on lines,
// events and exits bounded by a real-time cap (a hang fails the test; nothing sleeps).

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <boost/json.hpp>
#include <boost/process/args.hpp>
#include <boost/process/async.hpp>
#include <boost/process/async_pipe.hpp>
#include <boost/process/child.hpp>
#include <boost/process/env.hpp>
#include <boost/process/environment.hpp>
#include <boost/process/exe.hpp>
#include <boost/process/io.hpp>
#include <boost/process/start_dir.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace coagent::test {

namespace asio = boost::asio;
namespace bp = boost::process;
namespace fs = std::filesystem;
namespace json = boost::json;
using namespace std::chrono_literals;

/// Every wait of a test is bounded by this (real time).
inline constexpr std::chrono::seconds wait_cap{30};

inline std::string coagent_bin() {
    return COAGENT_BIN;
}

/// A fresh directory under /tmp, removed with its contents.
struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string tmpl = (fs::temp_directory_path() / "coagent-rpc-XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
};

inline void write_file(const fs::path& p, std::string_view text) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out.good());
}

inline std::string read_file(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

/// COAGENT_DIR (with a settings.json) and HOME for one test.
struct rpc_env {
    temp_dir dir;
    explicit rpc_env(std::string_view settings = R"({"retry":{"baseDelayMs":100}})") {
        write_file(settings_file(), settings);
    }
    fs::path settings_file() const { return dir.path / "settings.json"; }
    fs::path sessions() const { return dir.path / "sessions"; }
    std::map<std::string, std::string> vars() const {
        // no developer's key reaches a test: an unnamed provider is then faux, never the network
        return {{"COAGENT_DIR", dir.path.string()},
                {"HOME", dir.path.string()},
                {"OPENAI_API_KEY", ""},
                {"ANTHROPIC_API_KEY", ""}};
    }
    json::object settings() const { return json::parse(read_file(settings_file())).as_object(); }
};

/// Runs `io` until `done()` or the cap; false on the cap.
template <class Pred>
bool run_until(asio::io_context& io, Pred done,
               std::chrono::steady_clock::duration cap = wait_cap) {
    const auto deadline = std::chrono::steady_clock::now() + cap;
    while (!done()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        if (io.stopped()) io.restart();
        if (io.run_one_until(deadline) == 0 && io.stopped() && !done()) {
            io.restart();
            if (io.poll() == 0) return done();
        }
    }
    return true;
}

/// Runs an awaitable to completion on `io` (bounded by the cap) and returns its value.
template <class T>
T run_co(asio::io_context& io, asio::awaitable<T> a,
         std::chrono::steady_clock::duration cap = wait_cap) {
    std::optional<T> value;
    std::exception_ptr failure;
    bool done = false;
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
        failure = e;
        if (!e) value = std::move(v);
        done = true;
    });
    if (!run_until(
            io, [&] { return done; }, cap))
        FAIL("timed out waiting for an operation");
    if (failure) std::rethrow_exception(failure);
    return std::move(*value);
}

inline void run_co(asio::io_context& io, asio::awaitable<void> a,
                   std::chrono::steady_clock::duration cap = wait_cap) {
    std::exception_ptr failure;
    bool done = false;
    asio::co_spawn(io, std::move(a), [&](std::exception_ptr e) {
        failure = e;
        done = true;
    });
    if (!run_until(
            io, [&] { return done; }, cap))
        FAIL("timed out waiting for an operation");
    if (failure) std::rethrow_exception(failure);
}

/// `coagent --mode rpc <args>` with raw pipes: send any bytes, read every stdout line.
class rpc_process {
  public:
    rpc_process(const rpc_env& env, std::vector<std::string> args,
                std::optional<fs::path> cwd = std::nullopt)
        : in_(io_), out_(io_), err_(io_) {
        std::vector<std::string> argv{"--mode", "rpc"};
        // the faux provider, named, unless the test chooses the model (or resumes a session,
        // whose recorded model is what it checks)
        const auto names = [&](std::string_view flag) {
            return std::find(args.begin(), args.end(), flag) != args.end();
        };
        if (!names("--provider") && !names("--model") && !names("--session") &&
            !names("--continue"))
            argv.insert(argv.end(), {"--provider", "faux"});
        argv.insert(argv.end(), args.begin(), args.end());
        bp::environment e = boost::this_process::environment();
        for (const auto& [k, v] : env.vars()) e[k] = v;
        std::function<void(int, const std::error_code&)> on_exit =
            [this](int, const std::error_code& ec) {
                const int raw = child_.native_exit_code();
                if (ec || raw < 0)
                    status_ = -1;
                else if (WIFEXITED(raw))
                    status_ = WEXITSTATUS(raw);
                else
                    status_ = 128 + WTERMSIG(raw);
            };
        const fs::path dir = cwd ? *cwd : env.dir.path;
        child_ = bp::child(bp::exe = coagent_bin(), bp::args = argv,
                           bp::std_in<in_, bp::std_out> out_, bp::std_err > err_, e,
                           bp::start_dir = dir.string(), io_, bp::on_exit = on_exit);
        read_out();
        read_err();
    }
    ~rpc_process() {
        if (!status_) {
            std::error_code ec;
            child_.terminate(ec);
        }
    }
    rpc_process(const rpc_process&) = delete;
    rpc_process& operator=(const rpc_process&) = delete;

    // ---- input --------------------------------------------------------------------------
    void send_raw(std::string bytes) {
        writes_.push_back(std::move(bytes));
        if (writes_.size() == 1) write_next();
    }
    void send(std::string_view line) { send_raw(std::string(line) + "\n"); }
    void send(const json::object& o) { send(json::serialize(o)); }
    /// Runs until every queued byte was written.
    void flush() {
        REQUIRE(run_until(io_, [&] { return writes_.empty() || write_failed_; }));
    }
    void close_stdin() {
        flush();
        boost::system::error_code ec;
        in_.close(ec);
    }

    // ---- output -------------------------------------------------------------------------
    /// The next stdout line (REQUIREs one within the cap).
    std::string next_raw() {
        const bool ok = run_until(io_, [&] { return pos_ < lines_.size() || out_eof_; });
        INFO("stderr: " << err_text_);
        REQUIRE(ok);
        REQUIRE(pos_ < lines_.size());
        return lines_[pos_++];
    }
    json::object next() {
        std::string line = next_raw();
        INFO("line: " << line);
        boost::system::error_code ec;
        json::value v = json::parse(line, ec);
        REQUIRE(!ec);
        REQUIRE(v.is_object());
        return std::move(v.as_object());
    }
    /// The next line whose "type" is `type` (the lines before it stay in lines()).
    json::object next_of(std::string_view type) {
        for (;;) {
            json::object o = next();
            if (o.at("type").as_string() == type) return o;
        }
    }
    /// The response with this id.
    json::object response(std::string_view id) {
        for (;;) {
            json::object o = next();
            if (o.at("type").as_string() != "response") continue;
            const auto* i = o.if_contains("id");
            if (i && i->is_string() && i->as_string() == id) return o;
        }
    }
    /// Sends {"id":id,"type":type,...fields} and returns its response.
    json::object call(std::string_view id, std::string_view type, json::object fields = {}) {
        json::object o;
        o["id"] = id;
        o["type"] = type;
        for (auto& [k, v] : fields) o[k] = v;
        send(o);
        return response(id);
    }
    /// True when stdout ends without another line (after any remaining lines were read).
    bool at_eof() {
        REQUIRE(run_until(io_, [&] { return pos_ < lines_.size() || out_eof_; }));
        return pos_ >= lines_.size() && out_eof_;
    }
    std::size_t position() const { return pos_; }
    /// The parsed lines [from, position()).
    std::vector<json::object> since(std::size_t from) const {
        std::vector<json::object> out;
        for (std::size_t i = from; i < pos_; ++i) out.push_back(json::parse(lines_[i]).as_object());
        return out;
    }

    // ---- process ------------------------------------------------------------------------
    int wait_exit() {
        const bool ok = run_until(io_, [&] { return status_.has_value() && out_eof_ && err_eof_; });
        INFO("stderr: " << err_text_);
        REQUIRE(ok);
        return *status_;
    }
    void signal(int sig) { REQUIRE(::kill(child_.id(), sig) == 0); }
    int pid() const { return child_.id(); }
    const std::string& stderr_text() const { return err_text_; }
    /// Peak resident set size of the child (VmHWM), in bytes.
    std::size_t peak_rss() const {
        std::ifstream in("/proc/" + std::to_string(child_.id()) + "/status");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
        return 0;
    }
    asio::io_context& io() { return io_; }

  private:
    void write_next() {
        asio::async_write(in_, asio::buffer(writes_.front()),
                          [this](boost::system::error_code ec, std::size_t) {
                              writes_.pop_front();
                              if (ec) {
                                  write_failed_ = true;
                                  writes_.clear();
                                  return;
                              }
                              if (!writes_.empty()) write_next();
                          });
    }
    void read_out() {
        out_.async_read_some(
            asio::buffer(obuf_), [this](boost::system::error_code ec, std::size_t n) {
                partial_.append(obuf_.data(), n);
                std::size_t start = 0;
                for (std::size_t lf; (lf = partial_.find('\n', start)) != std::string::npos;
                     start = lf + 1)
                    lines_.push_back(partial_.substr(start, lf - start));
                partial_.erase(0, start);
                if (ec) {
                    if (!partial_.empty()) lines_.push_back(std::move(partial_));
                    out_eof_ = true;
                    return;
                }
                read_out();
            });
    }
    void read_err() {
        err_.async_read_some(asio::buffer(ebuf_),
                             [this](boost::system::error_code ec, std::size_t n) {
                                 err_text_.append(ebuf_.data(), n);
                                 if (ec) {
                                     err_eof_ = true;
                                     return;
                                 }
                                 read_err();
                             });
    }

    asio::io_context io_;
    bp::async_pipe in_, out_, err_;
    bp::child child_;
    std::deque<std::string> writes_;
    bool write_failed_ = false;
    std::array<char, 65536> obuf_{};
    std::array<char, 4096> ebuf_{};
    std::string partial_;
    std::vector<std::string> lines_;
    std::size_t pos_ = 0;
    bool out_eof_ = false, err_eof_ = false;
    std::string err_text_;
    std::optional<int> status_;
};

/// Event types with roles / flags folded in, as in tests/support/session_harness.hpp
/// ("message_end:assistant:error", "agent_end{retry}", "auto_retry_start{1}").
inline std::vector<std::string> brief(const std::vector<json::object>& lines) {
    std::vector<std::string> out;
    for (const auto& e : lines) {
        std::string t(e.at("type").as_string());
        if (t == "message_update" || t == "response") continue;
        if (t == "message_start" || t == "message_end") {
            const auto& m = e.at("message").as_object();
            t += ":" + std::string(m.at("role").as_string());
            if (auto* sr = m.if_contains("stopReason"); sr && t.starts_with("message_end"))
                t += ":" + std::string(sr->as_string());
        }
        if (t == "agent_end") t += e.at("willRetry").as_bool() ? "{retry}" : "{final}";
        if (t == "auto_retry_start") t += "{" + std::to_string(e.at("attempt").as_int64()) + "}";
        if (t == "auto_retry_end")
            t += std::string("{") + (e.at("success").as_bool() ? "ok," : "fail,") +
                 std::to_string(e.at("attempt").as_int64()) + "}";
        out.push_back(std::move(t));
    }
    return out;
}

inline json::object obj(std::string_view s) {
    return json::parse(s).as_object();
}

}  // namespace coagent::test

#pragma once
// The logic of examples/http_server.cpp, header-only so bench/embed_bench.cpp measures the very
// same code: a Boost.Beast HTTP/1.1 server where every `POST /prompt` (the body is the prompt
// text) runs one coagent session turn, answered as JSON:
//
//   {"reply":"You said: hi","retries":1,"outcome":"succeeded","request":7}
//
// Every request gets its own agent_session on its connection's strand; all of them share one
// io_context, so thousands of sessions can be parked in retry backoffs at once without holding
// a thread each. Sessions talk to the in-process faux provider: with `fail_every_other`, the
// first attempt of every other request (0, 2, 4, …) meets a `503 Service Unavailable` and the
// session retries by itself after retry.baseDelayMs.
//
// `GET /stats` answers {"requests","completed","retries","inFlight","peakInFlight"}; with
// server_options::metrics, `GET /metrics` answers the Prometheus text of every session's
// telemetry (docs/observability.md).
//
// Threading (docs/guide.md "Threading"): a session lives on one executor. Each connection runs on
// its own strand of the io_context, and the session of each request is created on that strand,
// so the server is correct with any number of threads calling io_context::run().

#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/telemetry/prometheus_telemetry.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/serialize.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

namespace coagent_example {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;

struct server_options {
    std::int64_t base_delay_ms = 1000;      ///< retry.baseDelayMs of every session
    bool fail_every_other = true;           ///< a 503 on the first attempt of requests 0, 2, 4, …
    std::chrono::seconds idle_timeout{30};  ///< a keep-alive connection idle that long is closed
    std::shared_ptr<spdlog::logger> logger;  ///< sessions' logger (default: warnings to stderr)
    /// every session's telemetry, served at GET /metrics (none: no /metrics)
    std::shared_ptr<coagent::prometheus_telemetry> metrics;
};

struct server_stats {
    std::atomic<std::uint64_t> requests{0};   ///< POST /prompt received
    std::atomic<std::uint64_t> completed{0};  ///< turns answered
    std::atomic<std::uint64_t> retries{0};    ///< auto_retry_start events, all sessions
    std::atomic<std::int64_t> in_flight{0};   ///< turns running now (streaming or in a backoff)
    std::atomic<std::int64_t> peak_in_flight{0};
};

/// What one turn produced.
struct turn_result {
    coagent::prompt_result::status outcome = coagent::prompt_result::status::succeeded;
    std::string reply;
    std::string error;
    int retries = 0;
};

/// One session turn on the calling coroutine's executor (the connection's strand): a fresh
/// session on a faux provider that answers "You said: <text>", after a 503 when `fail_first`.
inline asio::awaitable<turn_result> run_turn(std::string text, bool fail_first,
                                             std::int64_t base_delay_ms,
                                             std::shared_ptr<spdlog::logger> logger,
                                             std::shared_ptr<coagent::telemetry> metrics = {}) {
    coagent::faux_script script;
    if (fail_first) {
        coagent::faux_step e;
        e.type = coagent::faux_step::kind::error;
        e.text = "503 Service Unavailable: upstream overloaded";
        e.status = 503;
        script.steps.push_back(std::move(e));
    }
    coagent::faux_step ok;
    ok.type = coagent::faux_step::kind::text;
    ok.text = "You said: " + text;
    script.steps.push_back(std::move(ok));
    coagent::faux_options fo;
    fo.script = std::move(script);
    fo.record_requests = false;

    coagent::session_options o;
    o.executor = co_await asio::this_coro::executor;
    o.model_provider = std::make_shared<coagent::faux_provider>(std::move(fo));
    o.config.retry.base_delay_ms = base_delay_ms;
    o.logger = std::move(logger);
    o.telemetry = std::move(metrics);
    coagent::agent_session session(std::move(o));

    turn_result t;
    auto sub = session.subscribe([&t](const coagent::event& e) {
        if (std::holds_alternative<coagent::auto_retry_start_event>(e)) ++t.retries;
    });
    coagent::prompt_result r = co_await session.prompt(std::move(text));
    t.outcome = r.outcome;
    t.error = std::move(r.error);
    if (r.last_assistant) t.reply = coagent::text_of(*r.last_assistant);
    co_return t;
}

class prompt_server {
  public:
    /// Binds and listens on `ep` (port 0: the OS picks one, see local_endpoint()).
    prompt_server(asio::io_context& io, const tcp::endpoint& ep, server_options opts)
        : io_(io), acceptor_(asio::make_strand(io)), opts_(std::move(opts)) {
        acceptor_.open(ep.protocol());
        acceptor_.set_option(asio::socket_base::reuse_address(true));
        acceptor_.bind(ep);
        acceptor_.listen(asio::socket_base::max_listen_connections);
    }
    prompt_server(const prompt_server&) = delete;
    prompt_server& operator=(const prompt_server&) = delete;

    tcp::endpoint local_endpoint() const { return acceptor_.local_endpoint(); }
    const server_stats& stats() const noexcept { return stats_; }

    /// Starts accepting. The server must outlive every connection (run the io_context to the
    /// end, or stop it, before destroying the server).
    void start() {
        asio::co_spawn(acceptor_.get_executor(), accept_loop(this), log_failure{"accept loop"});
    }

    /// Graceful stop, callable from any thread: stops accepting and closes idle keep-alive
    /// connections; a request in progress finishes its turn and is answered (Connection: close).
    void stop() {
        asio::post(acceptor_.get_executor(), [this] {
            boost::system::error_code ec;
            acceptor_.close(ec);
        });
        std::lock_guard lock(mutex_);
        for (auto& [id, c] : connections_) {
            asio::post(c->stream.get_executor(), [c = c] {
                c->stopping = true;
                if (!c->busy) c->stream.cancel();  // ends the pending read of the next request
            });
        }
    }

  private:
    struct connection {
        explicit connection(tcp::socket s) : stream(std::move(s)) {}
        beast::tcp_stream stream;
        bool busy = false;      // between a request and its response (strand-local)
        bool stopping = false;  // strand-local
    };

    // completion handler of the spawned coroutines: a failure is logged, never swallowed
    struct log_failure {
        const char* what;
        void operator()(std::exception_ptr e) const {
            if (!e) return;
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                std::fprintf(stderr, "prompt_server: %s failed: %s\n", what, x.what());
            }
        }
    };

    static asio::awaitable<void> accept_loop(prompt_server* self) {
        for (;;) {
            // each connection gets its own strand: its sessions live there
            auto [ec, sock] = co_await self->acceptor_.async_accept(
                asio::make_strand(self->io_), asio::as_tuple(asio::use_awaitable));
            if (ec) {
                if (!self->acceptor_.is_open()) co_return;
                continue;  // e.g. too many open files: keep serving the others
            }
            boost::system::error_code ignored;
            sock.set_option(tcp::no_delay(true), ignored);
            auto c = std::make_shared<connection>(std::move(sock));
            std::uint64_t id = 0;
            {
                std::lock_guard lock(self->mutex_);
                id = self->next_id_++;
                self->connections_.emplace(id, c);
            }
            auto ex = c->stream.get_executor();
            const log_failure on_done{"connection"};  // named: no braced temporary in a coroutine
            asio::co_spawn(ex, serve(self, std::move(c), id), on_done);
        }
    }

    static asio::awaitable<void> serve(prompt_server* self, std::shared_ptr<connection> c,
                                       std::uint64_t id) {
        beast::flat_buffer buf;
        while (!c->stopping) {
            http::request_parser<http::string_body> parser;
            parser.body_limit(1 << 20);
            c->stream.expires_after(self->opts_.idle_timeout);
            auto [ec, n] = co_await http::async_read(c->stream, buf, parser,
                                                     asio::as_tuple(asio::use_awaitable));
            (void)n;
            if (ec) break;  // closed, idle timeout, stop(), or a malformed request
            c->busy = true;
            c->stream.expires_never();  // the turn may wait out long backoffs
            http::request<http::string_body> req = parser.release();
            http::response<http::string_body> res = co_await self->answer(req);
            res.keep_alive(req.keep_alive() && !c->stopping);
            res.prepare_payload();
            c->stream.expires_after(self->opts_.idle_timeout);
            auto [wec, wn] =
                co_await http::async_write(c->stream, res, asio::as_tuple(asio::use_awaitable));
            (void)wn;
            c->busy = false;
            if (wec || !res.keep_alive()) break;
        }
        boost::system::error_code ignored;
        c->stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
        c->stream.close();
        std::lock_guard lock(self->mutex_);
        self->connections_.erase(id);
    }

    asio::awaitable<http::response<http::string_body>> answer(
        const http::request<http::string_body>& req) {
        http::response<http::string_body> res{http::status::ok, req.version()};
        res.set(http::field::content_type, "application/json");
        if (req.target() == "/prompt" && req.method() == http::verb::post) {
            const std::uint64_t n = stats_.requests.fetch_add(1);
            const bool fail_first = opts_.fail_every_other && n % 2 == 0;
            const std::int64_t now = stats_.in_flight.fetch_add(1) + 1;
            std::int64_t peak = stats_.peak_in_flight.load();
            while (peak < now && !stats_.peak_in_flight.compare_exchange_weak(peak, now)) {
            }
            turn_result t = co_await run_turn(req.body(), fail_first, opts_.base_delay_ms,
                                              opts_.logger, opts_.metrics);
            stats_.in_flight.fetch_sub(1);
            stats_.completed.fetch_add(1);
            stats_.retries.fetch_add(static_cast<std::uint64_t>(t.retries));
            json::object o;
            o["reply"] = t.reply;
            o["retries"] = t.retries;
            o["outcome"] = std::string(coagent::to_string(t.outcome));
            o["request"] = n;
            if (!t.error.empty()) o["error"] = t.error;
            if (t.outcome != coagent::prompt_result::status::succeeded)
                res.result(http::status::bad_gateway);
            res.body() = json::serialize(o);
        } else if (req.target() == "/stats" && req.method() == http::verb::get) {
            json::object o;
            o["requests"] = stats_.requests.load();
            o["completed"] = stats_.completed.load();
            o["retries"] = stats_.retries.load();
            o["inFlight"] = stats_.in_flight.load();
            o["peakInFlight"] = stats_.peak_in_flight.load();
            res.body() = json::serialize(o);
        } else if (req.target() == "/metrics" && req.method() == http::verb::get && opts_.metrics) {
            res.set(http::field::content_type, "text/plain; version=0.0.4");
            res.body() = opts_.metrics->text();
        } else if (req.target() == "/prompt" || req.target() == "/stats") {
            res.result(http::status::method_not_allowed);
            res.body() = R"({"error":"POST /prompt, GET /stats"})";
        } else {
            res.result(http::status::not_found);
            res.body() = R"({"error":"POST /prompt, GET /stats"})";
        }
        co_return res;
    }

    asio::io_context& io_;
    tcp::acceptor acceptor_;
    server_options opts_;
    server_stats stats_;
    std::mutex mutex_;
    std::unordered_map<std::uint64_t, std::shared_ptr<connection>> connections_;
    std::uint64_t next_id_ = 0;
};

}  // namespace coagent_example

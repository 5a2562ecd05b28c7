#pragma once
// Client side of examples/prompt_server.hpp over Beast (used by examples/load_client.cpp and
// bench/embed_bench.cpp): one `POST /prompt` or `GET /stats` over an open keep-alive stream.
// Transport and protocol failures throw boost::system::system_error (this is a test client).

#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <utility>

namespace coagent_example {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

struct prompt_reply {
    unsigned status = 0;  ///< HTTP status
    std::string outcome;  ///< "succeeded" | "failed" | "aborted" | "refused"
    std::string reply;
    std::string error;
    int retries = 0;
};

/// Sends one request and reads its response (the stream stays open for the next one).
inline asio::awaitable<http::response<http::string_body>> round_trip(
    beast::tcp_stream& s, beast::flat_buffer& buf, http::request<http::string_body> req) {
    req.set(http::field::host, "127.0.0.1");
    req.prepare_payload();
    co_await http::async_write(s, req, asio::use_awaitable);
    http::response<http::string_body> res;
    co_await http::async_read(s, buf, res, asio::use_awaitable);
    co_return res;
}

inline asio::awaitable<prompt_reply> post_prompt(beast::tcp_stream& s, beast::flat_buffer& buf,
                                                 std::string text) {
    http::request<http::string_body> req(http::verb::post, "/prompt", 11);
    req.set(http::field::content_type, "text/plain");
    req.body() = std::move(text);
    http::response<http::string_body> res = co_await round_trip(s, buf, std::move(req));
    prompt_reply r;
    r.status = res.result_int();
    const json::value v = json::parse(res.body());
    const json::object& o = v.as_object();
    if (auto* p = o.if_contains("outcome")) r.outcome = p->as_string();
    if (auto* p = o.if_contains("reply")) r.reply = p->as_string();
    if (auto* p = o.if_contains("error")) r.error = p->as_string();
    if (auto* p = o.if_contains("retries"))
        r.retries = static_cast<int>(p->to_number<std::int64_t>());
    co_return r;
}

/// GET /stats: {"requests","completed","retries","inFlight","peakInFlight"}.
inline asio::awaitable<json::object> get_stats(beast::tcp_stream& s, beast::flat_buffer& buf) {
    http::request<http::string_body> req(http::verb::get, "/stats", 11);
    http::response<http::string_body> res = co_await round_trip(s, buf, std::move(req));
    json::value v = json::parse(res.body());
    co_return std::move(v.as_object());
}

/// GET /metrics: the Prometheus text.
inline asio::awaitable<std::string> get_metrics(beast::tcp_stream& s, beast::flat_buffer& buf) {
    http::request<http::string_body> req(http::verb::get, "/metrics", 11);
    http::response<http::string_body> res = co_await round_trip(s, buf, std::move(req));
    co_return std::move(res.body());
}

}  // namespace coagent_example

// The HTTP providers' I/O (Beast + OpenSSL): connect (bounded), one request, the streamed
// response through the sans-io SSE parser and stream decoder, keep-alive pooling, abort by
// closing the socket. The wire formats live in http_protocol.cpp.

#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/stream_deadline.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>
#include <boost/url/parse.hpp>

#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <sys/socket.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <mutex>

namespace coagent {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using namespace http_protocol;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t max_error_body = std::size_t{1} << 20;

// Beast reads the socket into a connection's buffer asking for max(512, capacity - size) bytes
// (beast::read_size). A read that brought at least half the buffer's capacity (512 at first)
// means more was waiting — a fast server's whole reply at once — so the buffer doubles, up to
// 16 KiB: the rest comes in fewer reads, and its events in fewer handler runs and writes of
// event lines. It keeps its size while the connection lives; a paced stream (one small event a
// read) on a new connection stays at 512 bytes (the memory of a streaming session).
constexpr std::size_t max_read_size = 16 * 1024;

void grow_after_big_read(beast::flat_buffer& b, std::size_t brought) {
    // flat_buffer::reserve(n) allocates max(n, 2 × size): only while size <= 8 KiB does the
    // capacity stay within max_read_size
    if (brought >= 512 && 2 * brought >= b.capacity() && b.capacity() < max_read_size &&
        2 * b.size() <= max_read_size)
        b.reserve(std::min(2 * b.capacity(), max_read_size));
}

struct connection {
    explicit connection(const asio::any_io_executor& ex) : plain(ex) {}
    beast::tcp_stream plain;                                    // http
    std::unique_ptr<beast::ssl_stream<beast::tcp_stream>> tls;  // https
    beast::flat_buffer buffer;

    beast::tcp_stream& lowest() { return tls ? tls->next_layer() : plain; }
    void close() {
        beast::error_code ec;
        lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
        lowest().close();
    }
};

// What abort() and the connect watchdog may cancel; shared with their handlers.
struct attempt_state {
    std::shared_ptr<connection> conn;
    std::optional<tcp::resolver> resolver;
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    bool aborted = false;
    bool connect_timed_out = false;
    bool finished = false;

    // The exchange's time limits (idle and attempt), kept by one watchdog timer per exchange
    // that is re-armed only when it fires before a moved deadline: a read of the body arms no
    // timer (Beast's per-operation timeouts armed and cancelled one for every read).
    std::optional<stream_deadline> deadline;
    std::optional<asio::steady_timer> watchdog;
    bool exchanging = false;
    bool timed_out = false;

    void close_all() {
        if (resolver) resolver->cancel();
        if (conn) conn->close();
    }
};

bool is_ip_literal(const std::string& host) {
    boost::system::error_code ec;
    asio::ip::make_address(host, ec);
    return !ec;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

}  // namespace

struct http_provider::impl {
    http_provider_options opts;
    bool https = false;
    std::string cleartext_refusal;  // "" when a key may be sent (http_provider::cleartext_refusal)
    std::string host;               // for DNS, SNI and certificate checks (no brackets)
    std::string port;
    std::string host_header;  // Host: host[:port]
    std::string target;       // path + endpoint (+ query)
    std::optional<ssl::context> tls;

    mutable std::mutex mutex;
    std::vector<std::shared_ptr<connection>> idle;
    std::size_t opened = 0;
    std::atomic<std::size_t> body_reads{0};  // body_reads(): counted relaxed, read by tests

    std::string where() const { return host + ":" + port; }

    std::int64_t now() const { return opts.now_ms ? opts.now_ms() : wall_clock_ms(); }

    std::shared_ptr<connection> acquire(const asio::any_io_executor& ex) {
        std::lock_guard lock(mutex);
        while (!idle.empty()) {
            auto c = std::move(idle.back());
            idle.pop_back();
            if (c->lowest().get_executor() == ex && alive(*c)) return c;
            c->close();
        }
        return nullptr;
    }

    void release(std::shared_ptr<connection> c) {
        c->lowest().expires_never();
        std::lock_guard lock(mutex);
        if (idle.size() >= opts.max_idle_per_host) {
            c->close();
            return;
        }
        idle.push_back(std::move(c));
    }

    // An idle connection the server has not closed (checked without blocking).
    static bool alive(connection& c) {
        if (!c.lowest().socket().is_open()) return false;
        if (!c.tls && c.buffer.size() > 0) return false;  // unexpected bytes
        char ch;
        const auto n = ::recv(c.lowest().socket().native_handle(), &ch, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
        if (n == 0) return false;  // closed by the server
        return c.tls != nullptr;   // TLS records (session tickets) may wait; plain data may not
    }
};

namespace {

using impl_ptr = std::shared_ptr<http_provider::impl>;

void set_error(message& out, std::string text) {
    out.stop = stop_reason::error;
    out.error_message = std::move(text);
}

void set_aborted(message& out) {
    out.stop = stop_reason::aborted;
    out.error_message = "Request was aborted";
}

// Connects a new connection (resolve, TCP, TLS) within connectTimeoutMs. Returns an error text,
// empty on success; on abort returns empty with st->aborted set.
asio::awaitable<std::string> connect(impl_ptr self, std::shared_ptr<attempt_state> st) {
    auto ex = co_await asio::this_coro::executor;
    const auto timeout = std::chrono::milliseconds(self->opts.connect_timeout_ms);
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const std::string timed_out = "Connection error: connecting to " + self->where() +
                                  " timed out after " +
                                  std::to_string(self->opts.connect_timeout_ms) + " ms";

    st->resolver.emplace(ex);
    asio::steady_timer watchdog(ex);
    watchdog.expires_at(deadline);
    watchdog.async_wait([st](boost::system::error_code ec) {
        if (ec || st->finished) return;
        st->connect_timed_out = true;
        if (st->resolver) st->resolver->cancel();
    });
    auto [rec, results] =
        co_await st->resolver->async_resolve(self->host, self->port, tuple_awaitable);
    watchdog.cancel();
    st->resolver.reset();
    if (st->aborted) co_return std::string();
    if (st->connect_timed_out) co_return timed_out;
    if (rec) co_return "Connection error: cannot resolve " + self->host + ": " + rec.message();

    auto conn = std::make_shared<connection>(ex);
    if (self->https)
        conn->tls = std::make_unique<beast::ssl_stream<beast::tcp_stream>>(ex, *self->tls);
    st->conn = conn;
    conn->lowest().expires_at(deadline);
    auto [cec, ep] = co_await conn->lowest().async_connect(results, tuple_awaitable);
    (void)ep;
    if (st->aborted) co_return std::string();
    if (cec == beast::error::timeout) co_return timed_out;
    if (cec)
        co_return "Connection error: cannot connect to " + self->where() + ": " + cec.message();
    {
        boost::system::error_code ig;
        conn->lowest().socket().set_option(tcp::no_delay(true), ig);
    }
    {
        std::lock_guard lock(self->mutex);
        ++self->opened;
    }
    if (!conn->tls) co_return std::string();

    SSL* ssl_handle = conn->tls->native_handle();
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_handle);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (is_ip_literal(self->host)) {
        X509_VERIFY_PARAM_set1_ip_asc(param, self->host.c_str());
    } else {
        X509_VERIFY_PARAM_set1_host(param, self->host.c_str(), 0);
        SSL_set_tlsext_host_name(ssl_handle, self->host.c_str());  // SNI
    }
    conn->tls->set_verify_mode(ssl::verify_peer);
    auto [hec] = co_await conn->tls->async_handshake(ssl::stream_base::client, tuple_awaitable);
    if (st->aborted) co_return std::string();
    if (hec == beast::error::timeout) co_return timed_out;
    if (hec) {
        const long verify = SSL_get_verify_result(ssl_handle);
        if (verify != X509_V_OK)
            co_return "TLS certificate verification failed for " + self->where() + ": " +
                X509_verify_cert_error_string(verify);
        co_return "Connection error: TLS handshake with " + self->where() +
            " failed: " + hec.message();
    }
    co_return std::string();
}

// x-should-retry is kept on the message when message has the field (runtime/message.hpp).

// Arms the exchange's watchdog at the deadline; when it fires with the deadline not moved past
// now, the attempt has timed out: the connection is closed, so the read in flight ends.
void arm_watchdog(const std::shared_ptr<attempt_state>& st) {
    st->watchdog->expires_at(st->deadline->expiry());
    st->watchdog->async_wait([st](boost::system::error_code ec) {
        if (ec || !st->exchanging) return;
        if (std::chrono::steady_clock::now() < st->deadline->expiry()) {
            arm_watchdog(st);  // progress moved the deadline since it was armed
            return;
        }
        st->timed_out = true;
        if (st->conn) st->conn->close();
    });
}

// exchange's watchdog for as long as it runs (whichever way it ends)
struct watchdog_guard {
    attempt_state& st;
    ~watchdog_guard() {
        st.exchanging = false;
        st.watchdog->cancel();
    }
};

struct slot_guard {
    asio::cancellation_slot slot;
    ~slot_guard() { slot.clear(); }
};

http_protocol::header_list headers_of(const http::fields& f) {
    http_protocol::header_list h;
    for (const auto& field : f)
        h.emplace_back(lower(field.name_string()), std::string(field.value()));
    return h;
}

// The request and the response on an open connection. Fills `out`; returns true when the
// connection may be reused.
template <typename Stream>
asio::awaitable<bool> exchange(impl_ptr self, std::shared_ptr<attempt_state> st, Stream& stream,
                               std::string body, const std::string& key, message& out,
                               stream_observer& observer) {
    auto& conn = *st->conn;
    const auto& o = self->opts;
    // idle timer (restarted by progress, not by SSE comments) and the attempt's deadline
    auto& deadline =
        st->deadline.emplace(st->started, o.stream_idle_timeout_ms, o.attempt_timeout_ms);
    deadline.on_progress(std::chrono::steady_clock::now());
    const auto timeout_text = [&] {
        return deadline.timeout_text(std::chrono::steady_clock::now());
    };
    conn.lowest().expires_never();  // the connect's deadline is not the exchange's
    st->watchdog.emplace(conn.lowest().get_executor());
    st->exchanging = true;
    st->timed_out = false;
    watchdog_guard watching{*st};
    arm_watchdog(st);

    {
        // the request (its fields, the body moved in) is freed once sent: a streaming session
        // does not hold it
        http::request<http::string_body> req{http::verb::post, self->target, 11};
        req.set(http::field::host, self->host_header);
        req.set(http::field::user_agent, "coagent/0.1");
        req.set(http::field::content_type, "application/json");
        req.set(http::field::accept, "text/event-stream");
        if (o.api == api_kind::anthropic_messages) {
            req.set("anthropic-version", "2023-06-01");
            if (!key.empty()) req.set("x-api-key", key);
        } else if (!key.empty()) {
            req.set(http::field::authorization, "Bearer " + key);
        }
        for (const auto& [k, v] : o.headers) req.set(k, v);
        req.keep_alive(true);
        req.body() = std::move(body);
        req.prepare_payload();

        auto [ec, n] = co_await http::async_write(stream, req, tuple_awaitable);
        (void)n;
        if (st->aborted) co_return false;
        if (st->timed_out) {
            set_error(out, timeout_text());
            co_return false;
        }
        if (ec) {
            set_error(out, "Connection error: sending the request to " + self->where() +
                               " failed: " + ec.message());
            co_return false;
        }
    }

    deadline.on_progress(std::chrono::steady_clock::now());  // the request went out
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    parser.header_limit(64 * 1024);
    {
        auto [ec, n] =
            co_await http::async_read_header(stream, conn.buffer, parser, tuple_awaitable);
        (void)n;
        if (st->aborted) co_return false;
        if (st->timed_out) {
            set_error(out, timeout_text());
            co_return false;
        }
        if (ec) {
            set_error(out,
                      "Connection error: no response from " + self->where() + ": " + ec.message());
            co_return false;
        }
    }
    deadline.on_progress(std::chrono::steady_clock::now());  // the headers came
    const int status = static_cast<int>(parser.get().result_int());
    const std::string content_type = lower(parser.get()[http::field::content_type]);
    const bool streamed = status >= 200 && status < 300 &&
                          content_type.find("text/event-stream") != std::string::npos;

    // the body's bytes of one read, in this frame (which lives as long as the stream): 2 KiB
    // (16 KiB made a streaming session's memory 29 KiB, 4 KiB 16 KiB; the socket's bytes wait in
    // conn.buffer, so a smaller one costs more loops here, not more reads of the socket: a paced
    // stream's read is one event of a few hundred bytes)
    std::array<char, 2 * 1024> buf;
    std::string collected;  // error (or unexpected) body
    sse_parser sse;
    auto decoder = stream_decoder::make(o.api);
    if (streamed) observer.on_message_start(out);

    bool body_error = false;
    while (!parser.is_done()) {
        parser.get().body().data = buf.data();
        parser.get().body().size = buf.size();
        const std::size_t held = conn.buffer.size();
        auto [ec, n] = co_await http::async_read_some(stream, conn.buffer, parser, tuple_awaitable);
        // n: the bytes the parser took (from what the buffer held, then from the socket)
        const std::size_t brought = conn.buffer.size() + n - held;
        if (brought > 0) {
            self->body_reads.fetch_add(1, std::memory_order_relaxed);
            grow_after_big_read(conn.buffer, brought);
        }
        if (ec == http::error::need_buffer) ec = {};
        const std::size_t got = buf.size() - parser.get().body().size;
        if (st->aborted) co_return false;
        if (st->timed_out) {
            set_error(out, timeout_text());
            co_return false;
        }
        if (got > 0) {
            const std::string_view bytes(buf.data(), got);
            const std::uint64_t progress_before = sse.progress();
            if (streamed) {
                const auto s = sse.feed(
                    bytes, [&](const sse_event& ev) { decoder->on_event(ev, out, observer); });
                if (s == sse_parser::status::event_too_large) {
                    set_error(out, "Invalid stream from " + self->where() + ": an event exceeded " +
                                       std::to_string(sse_parser::default_max_event_bytes) +
                                       " bytes");
                    co_return false;
                }
                if (decoder->status() == stream_decoder::state::error) co_return false;
                if (sse.progress() != progress_before)
                    deadline.on_progress(std::chrono::steady_clock::now());
            } else {
                deadline.on_progress(std::chrono::steady_clock::now());
            }
            if (!streamed && collected.size() < max_error_body) {
                collected.append(bytes.substr(0, max_error_body - collected.size()));
            }
        }
        if (ec) {
            body_error = true;
            if (streamed || collected.empty()) {
                set_error(out, "Connection error: the connection to " + self->where() +
                                   " closed before the response ended (" + ec.message() + ")");
                co_return false;
            }
            break;  // an error body cut short still says what went wrong
        }
    }

    if (streamed) {
        sse.finish();
        decoder->on_end(out);
        co_return decoder->status() == stream_decoder::state::done&& parser.get().keep_alive();
    }

    // Not a stream: an HTTP error (or an unexpected answer).
    error_details d;
    if (status >= 200 && status < 300) {
        d = http_error_text(status, collected);
        if (collected.find("\"error\"") == std::string::npos)
            d.text = "Unexpected response from " + self->where() + " (status " +
                     std::to_string(status) + ", content-type " +
                     (content_type.empty() ? std::string("none") : content_type) +
                     "): " + d.text.substr(d.text.find(' ') + 1);
    } else {
        d = http_error_text(status, collected);
    }
    // the response's headers as the protocol reads them, only for an error (the parser keeps them)
    const auto headers = headers_of(parser.get().base());
    append_retry_hint(d.text, retry_hint_from_headers(headers, self->now()));
    out.stop = stop_reason::error;
    out.error_message = std::move(d.text);
    out.error_status = status;
    out.error_type = std::move(d.type);
    out.should_retry = should_retry_header(headers);
    co_return !body_error && parser.get().keep_alive();
}

}  // namespace

http_provider::http_provider(http_provider_options opts) : impl_(std::make_shared<impl>()) {
    auto& i = *impl_;
    i.opts = std::move(opts);
    // errors never quote the userinfo or the query (keys travel there)
    const std::string shown = http_protocol::redact_url(i.opts.base_url);
    auto parsed = boost::urls::parse_uri(i.opts.base_url);
    if (!parsed)
        throw http_provider_error("baseUrl \"" + shown +
                                  "\" is not a URL: " + parsed.error().message());
    const auto& u = *parsed;
    const std::string scheme = lower(u.scheme());
    if (scheme != "http" && scheme != "https")
        throw http_provider_error("baseUrl \"" + shown + "\": the scheme must be http or https");
    i.https = scheme == "https";
    i.host = std::string(u.encoded_host());
    if (i.host.size() > 1 && i.host.front() == '[' && i.host.back() == ']')
        i.host = i.host.substr(1, i.host.size() - 2);
    if (i.host.empty()) throw http_provider_error("baseUrl \"" + shown + "\" has no host");
    if (!i.https && !i.opts.allow_insecure_http && !http_protocol::is_loopback_host(i.host))
        i.cleartext_refusal = "baseUrl " + shown + " would send the API key in cleartext to " +
                              i.host +
                              ", which is not a loopback address: use https://, or set "
                              "\"allowInsecureHttp\": true in this provider's entry of "
                              "models.json to allow it";
    if (!i.cleartext_refusal.empty() && !i.opts.api_key.empty())
        throw http_provider_error(i.cleartext_refusal);
    i.port = u.has_port() ? std::string(u.port()) : (i.https ? "443" : "80");
    const bool v6 = i.host.find(':') != std::string::npos;
    i.host_header = v6 ? "[" + i.host + "]" : i.host;
    if (u.has_port()) i.host_header += ":" + i.port;
    std::string path(u.encoded_path());
    while (!path.empty() && path.back() == '/') path.pop_back();
    i.target = path + std::string(endpoint_path(i.opts.api));
    if (u.has_query()) i.target += "?" + std::string(u.encoded_query());
    if (i.opts.connect_timeout_ms <= 0) i.opts.connect_timeout_ms = 10000;
    if (i.opts.stream_idle_timeout_ms <= 0) i.opts.stream_idle_timeout_ms = 120000;

    if (i.https) {
        i.tls.emplace(ssl::context::tls_client);
        i.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                           ssl::context::no_sslv3 | ssl::context::no_tlsv1 |
                           ssl::context::no_tlsv1_1);
        boost::system::error_code ec;
        i.tls->set_default_verify_paths(ec);
        if (ec) throw http_provider_error("cannot load the system CA store: " + ec.message());
        if (i.opts.ca_file) {
            i.tls->load_verify_file(i.opts.ca_file->string(), ec);
            if (ec)
                throw http_provider_error(i.opts.ca_file->string() +
                                          ": cannot load CA certificates: " + ec.message());
        }
        i.tls->set_verify_mode(ssl::verify_peer);
    }
}

http_provider::~http_provider() {
    std::lock_guard lock(impl_->mutex);
    for (auto& c : impl_->idle) c->close();
    impl_->idle.clear();
}

model_info http_provider::model() const {
    return impl_->opts.model;
}

std::shared_ptr<auth_storage> http_provider::auth() const {
    return impl_->opts.auth;
}

const std::string& http_provider::cleartext_refusal() const noexcept {
    return impl_->cleartext_refusal;
}

std::size_t http_provider::idle_connections() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->idle.size();
}

std::size_t http_provider::body_reads() const {
    return impl_->body_reads.load(std::memory_order_relaxed);
}

std::size_t http_provider::connections_opened() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->opened;
}

asio::awaitable<void> http_provider::stream(const provider_request& req, message& out,
                                            stream_observer& observer, abort_signal& abort) {
    impl_ptr self = impl_;
    if (abort.requested()) {
        set_aborted(out);
        co_return;
    }
    auto ex = co_await asio::this_coro::executor;
    auto st = std::make_shared<attempt_state>();
    slot_guard guard{abort.slot()};
    guard.slot.assign([st](asio::cancellation_type) {
        st->aborted = true;
        st->close_all();
    });

    std::string key;
    if (self->opts.auth) key = self->opts.auth->api_key(self->opts.model.provider, req.session_id);
    if (key.empty()) key = self->opts.api_key;
    if (!key.empty() && !self->cleartext_refusal.empty()) {  // a key stored after construction
        set_error(out, self->cleartext_refusal);
        co_return;
    }
    std::string body = build_request_body(self->opts.api, req);

    st->conn = self->acquire(ex);
    if (!st->conn) {
        std::string err = co_await connect(self, st);
        st->finished = true;
        if (st->aborted || abort.requested()) {
            st->close_all();
            set_aborted(out);
            co_return;
        }
        if (!err.empty()) {
            st->close_all();
            set_error(out, std::move(err));
            co_return;
        }
    }

    bool reuse = false;
    if (st->conn->tls)
        reuse = co_await exchange(self, st, *st->conn->tls, std::move(body), key, out, observer);
    else
        reuse = co_await exchange(self, st, st->conn->plain, std::move(body), key, out, observer);

    if (st->aborted || abort.requested()) {
        st->close_all();
        set_aborted(out);
        co_return;
    }
    auto conn = std::move(st->conn);
    if (reuse)
        self->release(std::move(conn));
    else
        conn->close();
}

}  // namespace coagent

// coagent-fakellm, the I/O half: a Beast HTTP/1.1 server (plain or TLS) on loopback that answers
// each request with the next script step.

#include <coagent/providers/fakellm.hpp>

#include <chrono>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <unordered_map>

namespace coagent::fakellm {

namespace json = boost::json;

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;

namespace {

struct connection {
    explicit connection(tcp::socket s) : plain(std::move(s)), timer(plain.get_executor()) {}
    tcp::socket plain;
    std::optional<ssl::stream<tcp::socket>> tls;
    asio::steady_timer timer;

    tcp::socket& lowest() { return tls ? tls->next_layer() : plain; }
    void close() {
        boost::system::error_code ec;
        lowest().close(ec);
        timer.cancel();
    }
};

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

}  // namespace

struct server::impl {
    impl(asio::any_io_executor ex, server_options o) : opts(std::move(o)), acceptor(ex) {}
    ~impl() {
        if (log) std::fclose(log);
    }

    server_options opts;
    tcp::acceptor acceptor;
    std::optional<ssl::context> tls;
    std::FILE* log = nullptr;

    mutable std::mutex mutex;
    // where the script stands: one position for all requests, or one a conversation
    struct position {
        std::size_t index = 0;
        int repeat = 0;
    };
    position shared;
    std::unordered_map<std::string, position> conversations;
    std::size_t calls = 0;
    std::vector<request_record> records;

    bool stopped = false;
    std::vector<std::weak_ptr<connection>> conns;

    // a failFor step's window (one for the whole server): until when its answer is every
    // request's
    const step* window = nullptr;
    std::chrono::steady_clock::time_point window_end;

    // The next step of the request's conversation (nullopt when exhausted): a step answers
    // `times` requests; a step that does not belong to the conversation (forConversations) is
    // skipped.
    std::optional<step> next_step(const std::string& conversation) {
        std::lock_guard lock(mutex);
        const auto now = std::chrono::steady_clock::now();
        if (window && now < window_end) return *window;
        window = nullptr;
        position& at = opts.per_conversation ? conversations[conversation] : shared;
        const auto& steps = opts.steps.steps;
        const double share = conversation_share(conversation);
        while (at.index < steps.size()) {
            const step& s = steps[at.index];
            if (s.for_conversations &&
                (share < s.for_conversations->first || share >= s.for_conversations->second)) {
                ++at.index;
                continue;
            }
            if (++at.repeat >= s.times) {
                ++at.index;
                at.repeat = 0;
            }
            if (s.fail_for_ms > 0) {  // the window opens with this request
                window = &s;
                window_end = now + std::chrono::milliseconds(s.fail_for_ms);
            }
            return s;
        }
        return std::nullopt;
    }

    std::size_t record(request_record r) {
        std::lock_guard lock(mutex);
        r.index = records.size() + 1;
        if (log) {
            std::string line = json::serialize(to_json(r));
            line.push_back('\n');
            std::fwrite(line.data(), 1, line.size(), log);
            std::fflush(log);
        }
        records.push_back(std::move(r));
        return records.size();
    }

    void track(const std::shared_ptr<connection>& c) {
        std::erase_if(conns, [](const auto& w) { return w.expired(); });
        conns.push_back(c);
    }
};

namespace {

using impl_ptr = std::shared_ptr<server::impl>;
using string_response = http::response<http::string_body>;

string_response make_response(int status, unsigned version, bool keep_alive) {
    string_response res{static_cast<http::status>(status), version};
    res.set(http::field::server, "coagent-fakellm");
    res.keep_alive(keep_alive);
    return res;
}

string_response json_error(int status, unsigned version, bool keep_alive,
                           const std::string& message) {
    auto res = make_response(status, version, keep_alive);
    json::object err;
    err["message"] = message;
    err["type"] = "invalid_request_error";
    json::object body;
    body["error"] = std::move(err);
    res.set(http::field::content_type, "application/json");
    res.body() = json::serialize(body);
    res.prepare_payload();
    return res;
}

// The text of a message's content: a string, or its first {"type":"text","text":…} block.
std::string first_text(const json::object& m) {
    const auto* c = m.if_contains("content");
    if (!c) return {};
    if (c->is_string()) return std::string(c->get_string());
    if (c->is_array())
        for (const auto& b : c->get_array())
            if (const auto* t = b.is_object() ? b.get_object().if_contains("text") : nullptr;
                t && t->is_string())
                return std::string(t->get_string());
    return {};
}

// Counts the image and thinking blocks of a request message into `r`: Anthropic `image` and
// `thinking` / `redacted_thinking` blocks (also images inside a tool_result's content), OpenAI
// `image_url` parts, Responses `input_image` parts (also in a function_call_output's output).
void count_blocks(const json::object& m, request_record& r, std::string_view key = "content") {
    const auto* c = m.if_contains(key);
    if (!c || !c->is_array()) return;
    for (const auto& b : c->get_array()) {
        const auto* bo = b.if_object();
        if (!bo) continue;
        const auto* t = bo->if_contains("type");
        if (!t || !t->is_string()) continue;
        const auto type = t->get_string();
        if (type == "image" || type == "image_url" || type == "input_image") ++r.images;
        if (type == "thinking" || type == "redacted_thinking") ++r.thinking;
        if (type == "tool_result") count_blocks(*bo, r);
    }
}

// Reads what the request says about itself into `r`; returns an error text if the body is not
// a JSON object.
std::string inspect(const http::request<http::string_body>& req, request_record& r) {
    r.path = std::string(req.target());
    r.kind = api_of_path(req.target());
    r.authorization = std::string(req[http::field::authorization]);
    r.x_api_key = std::string(req["x-api-key"]);
    r.body = req.body();
    boost::system::error_code ec;
    json::value v = json::parse(req.body(), ec);
    if (ec) return "request body is not JSON: " + ec.message();
    if (!v.is_object()) return "request body is not a JSON object";
    const auto& o = v.get_object();
    if (const auto* m = o.if_contains("model"); m && m->is_string()) r.model = m->get_string();
    if (const auto* s = o.if_contains("stream"); s && s->is_bool()) r.stream = s->get_bool();
    if (const auto* sys = o.if_contains("system"); sys && !sys->is_null())
        r.roles.emplace_back("system");
    if (const auto* ms = o.if_contains("messages"); ms && ms->is_array())
        for (const auto& m : ms->get_array())
            if (const auto* role = m.is_object() ? m.get_object().if_contains("role") : nullptr;
                role && role->is_string()) {
                r.roles.emplace_back(role->get_string());
                if (r.conversation.empty() && role->get_string() == "user")
                    r.conversation = first_text(m.get_object());
                count_blocks(m.get_object(), r);
            }
    // the Responses API: `input` items, messages (with a role) and typed items
    if (const auto* in = o.if_contains("input"); in && in->is_array())
        for (const auto& item : in->get_array()) {
            const auto* io = item.if_object();
            if (!io) continue;
            const auto* role = io->if_contains("role");
            const auto* type = io->if_contains("type");
            if (role && role->is_string()) {
                r.roles.emplace_back(role->get_string());
                if (r.conversation.empty() && role->get_string() == "user")
                    r.conversation = first_text(*io);
                count_blocks(*io, r);
            } else if (type && type->is_string()) {
                r.roles.emplace_back(type->get_string());
                if (type->get_string() == "reasoning") ++r.thinking;
                if (type->get_string() == "function_call_output") count_blocks(*io, r, "output");
            }
        }
    return {};
}

template <typename Stream>
asio::awaitable<bool> write_response(Stream& stream, string_response& res) {
    auto [ec, n] = co_await http::async_write(stream, res, tuple_awaitable);
    (void)n;
    co_return !ec;
}

// Waits `ms` on the connection's timer; false when stopped / cancelled.
asio::awaitable<bool> pause(const impl_ptr& self, connection& c, std::int64_t ms) {
    if (ms <= 0) co_return !self->stopped;
    c.timer.expires_after(std::chrono::milliseconds(ms));
    auto [ec] = co_await c.timer.async_wait(tuple_awaitable);
    co_return !ec && !self->stopped;
}

template <typename Stream>
asio::awaitable<bool> write_chunk(Stream& stream, const std::string& s) {
    auto [ec, n] =
        co_await asio::async_write(stream, http::make_chunk(asio::buffer(s)), tuple_awaitable);
    (void)n;
    co_return !ec;
}

// Answers one request; returns false when the connection must close.
template <typename Stream>
asio::awaitable<bool> answer(impl_ptr self, std::shared_ptr<connection> c, Stream& stream,
                             const http::request<http::string_body>& req) {
    const unsigned version = req.version();
    const bool keep = req.keep_alive();
    request_record rec;
    const std::string bad_body = inspect(req, rec);

    if (rec.kind == api::unknown || req.method() != http::verb::post) {
        rec.status = 404;
        self->record(rec);
        auto res = json_error(404, version, keep,
                              "fakellm: no such endpoint: " + std::string(req.method_string()) +
                                  " " + rec.path +
                                  " (POST .../chat/completions, .../messages or .../responses)");
        co_return co_await write_response(stream, res) && keep;
    }
    if (!bad_body.empty()) {
        rec.status = 400;
        self->record(rec);
        auto res = json_error(400, version, keep, "fakellm: " + bad_body);
        co_return co_await write_response(stream, res) && keep;
    }

    std::optional<step> s = self->next_step(rec.conversation);
    if (!s) {
        rec.status = 500;
        self->record(rec);
        auto res = make_response(500, version, keep);
        res.set(http::field::content_type, "text/plain; charset=utf-8");
        res.body() = server::exhausted_text;
        res.prepare_payload();
        co_return co_await write_response(stream, res) && keep;
    }
    if (s->type != step::kind::status && !rec.stream) {
        rec.status = 400;
        self->record(rec);
        auto res = json_error(400, version, keep,
                              "fakellm answers streamed requests only (\"stream\": true)");
        co_return co_await write_response(stream, res) && keep;
    }

    rec.status = s->type == step::kind::status ? s->status : 200;
    const std::size_t number = self->record(rec);
    if (!co_await pause(self, *c, s->delay_ms)) co_return false;

    if (s->type == step::kind::status) {
        auto res = make_response(s->status, version, keep);
        if (s->body) {
            if (s->body->is_string()) {
                res.set(http::field::content_type, "text/plain; charset=utf-8");
                res.body() = s->body->get_string();
            } else {
                res.set(http::field::content_type, "application/json");
                res.body() = json::serialize(*s->body);
            }
        }
        for (const auto& [k, v] : s->headers) res.set(k, v);
        res.prepare_payload();
        co_return co_await write_response(stream, res) && keep;
    }

    const std::int64_t input_tokens = static_cast<std::int64_t>(req.body().size() / 4 + 1);
    const stream_plan plan =
        plan_stream(*s, rec.kind, rec.model.empty() ? "fakellm" : rec.model, input_tokens, number);
    http::response<http::empty_body> res{http::status::ok, version};
    res.set(http::field::server, "coagent-fakellm");
    res.set(http::field::content_type, "text/event-stream");
    res.set(http::field::cache_control, "no-cache");
    for (const auto& [k, v] : s->headers) res.set(k, v);
    res.keep_alive(keep);
    res.chunked(true);
    http::response_serializer<http::empty_body> sr{res};
    {
        auto [ec, n] = co_await http::async_write_header(stream, sr, tuple_awaitable);
        (void)n;
        if (ec) co_return false;
    }
    // Events are written in batches (one HTTP chunk each, up to 64 KiB); a batch is flushed
    // exactly at a cut or a stall, so the client has seen N content events when it happens.
    constexpr std::size_t batch_limit = 64 * 1024;
    std::string batch;
    for (const auto& e : plan.head) batch += e;
    for (std::size_t i = 0; i <= plan.chunks.size(); ++i) {
        const bool cut = s->cut_after_chunks && static_cast<std::size_t>(*s->cut_after_chunks) == i;
        const bool stall =
            s->stall_after_chunks && static_cast<std::size_t>(*s->stall_after_chunks) == i;
        if ((cut || stall) && !batch.empty()) {
            if (!co_await write_chunk(stream, batch)) co_return false;
            batch.clear();
        }
        if (cut) {
            c->close();  // the connection drops mid-stream
            co_return false;
        }
        if (stall && !co_await pause(self, *c, s->stall_ms)) co_return false;
        if (i == plan.chunks.size()) break;
        if (s->chunk_delay_ms > 0 && i > 0) {  // paced: each chunk on its own, after a pause
            if (!batch.empty() && !co_await write_chunk(stream, batch)) co_return false;
            batch.clear();
            if (!co_await pause(self, *c, s->chunk_delay_ms)) co_return false;
        }
        batch += plan.chunks[i];
        if (batch.size() >= batch_limit) {
            if (!co_await write_chunk(stream, batch)) co_return false;
            batch.clear();
        }
    }
    for (const auto& e : plan.tail) batch += e;
    if (!co_await write_chunk(stream, batch)) co_return false;
    if (s->type == step::kind::sse_error) {
        // the stream ends after an error event: terminate the body properly, then close
        auto [ec, n] = co_await asio::async_write(stream, http::make_chunk_last(), tuple_awaitable);
        (void)n;
        (void)ec;
        co_return false;
    }
    auto [ec, n] = co_await asio::async_write(stream, http::make_chunk_last(), tuple_awaitable);
    (void)n;
    co_return !ec && keep;
}

template <typename Stream>
asio::awaitable<void> serve_stream(impl_ptr self, std::shared_ptr<connection> c, Stream& stream) {
    beast::flat_buffer buf;
    while (!self->stopped) {
        http::request_parser<http::string_body> parser;
        parser.body_limit(std::uint64_t{64} << 20);
        auto [ec, n] = co_await http::async_read(stream, buf, parser, tuple_awaitable);
        (void)n;
        if (ec) break;
        const auto req = parser.release();
        if (!co_await answer(self, c, stream, req)) break;
    }
}

asio::awaitable<void> serve(impl_ptr self, std::shared_ptr<connection> c) {
    if (self->tls) {
        c->tls.emplace(std::move(c->plain), *self->tls);
        auto [ec] = co_await c->tls->async_handshake(ssl::stream_base::server, tuple_awaitable);
        if (!ec) co_await serve_stream(self, c, *c->tls);
    } else {
        co_await serve_stream(self, c, c->plain);
    }
    c->close();
}

asio::awaitable<void> accept_loop(impl_ptr self) {
    auto ex = co_await asio::this_coro::executor;
    while (!self->stopped) {
        auto [ec, sock] = co_await self->acceptor.async_accept(tuple_awaitable);
        if (ec) {
            if (ec == asio::error::operation_aborted || self->stopped) break;
            continue;  // e.g. too many open files: keep serving the others
        }
        sock.set_option(tcp::no_delay(true), ec);
        auto c = std::make_shared<connection>(std::move(sock));
        self->track(c);
        asio::co_spawn(ex, serve(self, c), [](std::exception_ptr e) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (const std::exception& x) {
                    std::fprintf(stderr, "coagent-fakellm: connection failed: %s\n", x.what());
                }
            }
        });
    }
}

}  // namespace

server::server(asio::any_io_executor ex, server_options opts)
    : impl_(std::make_shared<impl>(ex, std::move(opts))) {
    auto& o = impl_->opts;
    if (o.log_file) {
        impl_->log = std::fopen(o.log_file->c_str(), "ae");
        if (!impl_->log)
            throw std::system_error(errno, std::generic_category(),
                                    "cannot open log " + o.log_file->string());
    }
    if (o.tls_cert_file || o.tls_key_file) {
        if (!o.tls_cert_file || !o.tls_key_file)
            throw std::runtime_error("https needs both a certificate and a key file");
        impl_->tls.emplace(ssl::context::tls_server);
        boost::system::error_code ec;
        impl_->tls->use_certificate_chain_file(o.tls_cert_file->string(), ec);
        if (ec)
            throw std::runtime_error(o.tls_cert_file->string() +
                                     ": cannot use the certificate: " + ec.message());
        impl_->tls->use_private_key_file(o.tls_key_file->string(), ssl::context::pem, ec);
        if (ec)
            throw std::runtime_error(o.tls_key_file->string() +
                                     ": cannot use the private key: " + ec.message());
    }
    const tcp::endpoint ep(asio::ip::make_address(o.bind_address), o.port);
    impl_->acceptor.open(ep.protocol());
    impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor.bind(ep);
    impl_->acceptor.listen();
}

server::~server() {
    stop();
}

std::uint16_t server::port() const noexcept {
    boost::system::error_code ec;
    return impl_->acceptor.local_endpoint(ec).port();
}

void server::start() {
    asio::co_spawn(impl_->acceptor.get_executor(), accept_loop(impl_), [](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (const std::exception& x) {
                std::fprintf(stderr, "coagent-fakellm: accept loop failed: %s\n", x.what());
            }
        }
    });
}

void server::stop() {
    if (!impl_ || impl_->stopped) return;
    impl_->stopped = true;
    boost::system::error_code ec;
    impl_->acceptor.close(ec);
    for (auto& w : impl_->conns)
        if (auto c = w.lock()) c->close();
    impl_->conns.clear();
}

std::vector<request_record> server::requests() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->records;
}

std::size_t server::request_count() const {
    std::lock_guard lock(impl_->mutex);
    return impl_->records.size();
}

}  // namespace coagent::fakellm

// peer-standin-agent: the harness floor of bench/peer. A deliberately trivial agent that
// speaks just enough of the RPC protocol (docs/rpc.md) for the peer scenarios, so that
// peer_bench can measure what the driver and coagent-fakellm cost on their own:
//   - writes {"type":"ready"}; answers get_state, prompt, abort_retry, new_session (others:
//     an error);
//   - a prompt is one blocking HTTP/1.1 request per attempt (keep-alive) to the first
//     provider of $COAGENT_DIR/models.json (openai-completions) carrying the conversation so
//     far (user and successful assistant texts), the SSE reply decoded line by line, with coagent's
//     event sequence (agent_start … message_update per delta … agent_end{willRetry},
//     auto_retry_start/auto_retry_end, agent_settled) in small objects;
//   - retries on any non-200 status with retry.baseDelayMs × 2^(n-1) up to retry.maxRetries
//     (from $COAGENT_DIR/settings.json); the backoff polls stdin so abort_retry cancels it.
// No session, no context, no classification, no timers beyond poll(): everything an agent
// must do is missing on purpose. Exit 0 at stdin EOF.

#include <boost/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

namespace json = boost::json;

namespace {

[[noreturn]] void die(const std::string& why) {
    std::fprintf(stderr, "peer-standin-agent: %s\n", why.c_str());
    std::exit(2);
}

json::value read_json_file(const std::string& path) {
    std::ifstream f(path);
    if (!f) return json::object{};
    std::stringstream ss;
    ss << f.rdbuf();
    boost::system::error_code ec;
    json::value v = json::parse(ss.str(), ec);
    if (ec) die(path + ": " + ec.message());
    return v;
}

// ---- stdout: one write per line ---------------------------------------------------------------

void emit(const json::object& o) {
    std::string line = json::serialize(o);
    line += '\n';
    const char* p = line.data();
    std::size_t n = line.size();
    while (n > 0) {
        ssize_t w = ::write(1, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            std::exit(0);  // the client went away
        }
        p += w;
        n -= static_cast<std::size_t>(w);
    }
}

void emit_type(const char* type) {
    emit(json::object{{"type", type}});
}

// ---- stdin: LF-separated lines ----------------------------------------------------------------

std::string in_buf;
bool in_eof = false;

/// Reads what is available (blocking once when `block`); returns false at EOF with no line.
std::optional<std::string> next_line(bool block) {
    for (;;) {
        if (auto nl = in_buf.find('\n'); nl != std::string::npos) {
            std::string line = in_buf.substr(0, nl);
            in_buf.erase(0, nl + 1);
            return line;
        }
        if (in_eof) {
            if (in_buf.empty()) return std::nullopt;
            std::string line = std::move(in_buf);
            in_buf.clear();
            return line;
        }
        if (!block) return std::nullopt;
        char buf[65536];
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            in_eof = true;
        else
            in_buf.append(buf, static_cast<std::size_t>(n));
    }
}

// ---- HTTP/1.1 client, one keep-alive connection -----------------------------------------------

struct http_client {
    std::string host;
    int port = 0;
    std::string path;
    std::string auth;
    int fd = -1;
    std::string rbuf;

    void connect_now() {
        if (fd >= 0) ::close(fd);
        fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) die("socket failed");
        int one = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) die("bad host " + host);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
            die("cannot connect to " + host + ":" + std::to_string(port));
        rbuf.clear();
    }

    bool write_all(const std::string& s) {
        const char* p = s.data();
        std::size_t n = s.size();
        while (n > 0) {
            ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) return false;
            p += w;
            n -= static_cast<std::size_t>(w);
        }
        return true;
    }

    /// Reads more bytes into rbuf; false at EOF or error.
    bool fill() {
        char buf[65536];
        for (;;) {
            ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return false;
            rbuf.append(buf, static_cast<std::size_t>(n));
            return true;
        }
    }

    struct response {
        int status = 0;
        std::string body;  // for non-200 answers
    };

    /// Sends the request; streams a 200's decoded body through `on_body`; returns the status
    /// (and the body of other statuses).
    template <class OnBody>
    response post(const std::string& body, OnBody&& on_body) {
        std::string req =
            "POST " + path + " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
            "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n" + auth +
            "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        for (int attempt = 0;; ++attempt) {
            if (fd < 0) connect_now();
            if (write_all(req)) {
                std::size_t end;
                bool ok = true;
                while ((end = rbuf.find("\r\n\r\n")) == std::string::npos)
                    if (!fill()) {
                        ok = false;
                        break;
                    }
                if (ok) return read_rest(end, on_body);
            }
            // the server closed the idle connection: reconnect once
            ::close(fd);
            fd = -1;
            if (attempt > 0) die("the server closed the connection before answering");
        }
    }

    template <class OnBody>
    response read_rest(std::size_t head_end, OnBody& on_body) {
        response r;
        const std::string head = rbuf.substr(0, head_end);
        rbuf.erase(0, head_end + 4);
        if (head.size() < 12) die("bad status line");
        r.status = std::atoi(head.c_str() + 9);
        std::string lower = head;
        for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        const bool chunked = lower.find("transfer-encoding: chunked") != std::string::npos;
        const bool close_after = lower.find("connection: close") != std::string::npos;
        auto deliver = [&](std::string_view piece) {
            if (r.status == 200)
                on_body(piece);
            else
                r.body.append(piece);
        };
        if (chunked) {
            for (;;) {
                std::size_t nl;
                while ((nl = rbuf.find("\r\n")) == std::string::npos)
                    if (!fill()) die("stream cut in a chunk header");
                const std::size_t size = std::strtoul(rbuf.c_str(), nullptr, 16);
                rbuf.erase(0, nl + 2);
                while (rbuf.size() < size + 2)
                    if (!fill()) die("stream cut in a chunk");
                if (size == 0) {
                    rbuf.erase(0, 2);
                    break;
                }
                deliver(std::string_view(rbuf).substr(0, size));
                rbuf.erase(0, size + 2);
            }
        } else {
            std::size_t len = 0;
            if (auto p = lower.find("content-length:"); p != std::string::npos)
                len = std::strtoul(lower.c_str() + p + 15, nullptr, 10);
            while (rbuf.size() < len)
                if (!fill()) die("body cut");
            deliver(std::string_view(rbuf).substr(0, len));
            rbuf.erase(0, len);
        }
        if (close_after) {
            ::close(fd);
            fd = -1;
        }
        return r;
    }
};

// ---- the agent --------------------------------------------------------------------------------

struct config {
    int max_retries = 3;
    long base_delay_ms = 2000;
    std::string model = "fake-model";
};

http_client http;
config cfg;
std::size_t message_count = 0;
std::string history;  // the messages sent so far, serialized, comma-separated
int retry_attempt = 0;

void respond(const json::value* id, const std::string& command, bool ok,
             const std::string& error = {}, json::value data = nullptr) {
    json::object r;
    if (id) r["id"] = *id;
    r["type"] = "response";
    r["command"] = command;
    r["success"] = ok;
    if (!ok) r["error"] = error;
    if (ok && !data.is_null()) r["data"] = std::move(data);
    emit(r);
}

json::object state() {
    return {{"model", {{"provider", "fake"}, {"id", cfg.model}}},
            {"isStreaming", false},
            {"isRetrying", retry_attempt > 0},
            {"retryAttempt", retry_attempt},
            {"messageCount", message_count}};
}

json::object assistant(const std::string& text, const char* stop, const std::string& error = {}) {
    json::object m{{"role", "assistant"},
                   {"content", json::array{json::object{{"type", "text"}, {"text", text}}}},
                   {"stopReason", stop}};
    if (!error.empty()) m["errorMessage"] = error;
    return m;
}

enum class wait_result { elapsed, cancelled };

/// The backoff: polls stdin so abort_retry (and get_state) are answered meanwhile.
wait_result backoff(long ms) {
    using clk = std::chrono::steady_clock;
    const auto until = clk::now() + std::chrono::milliseconds(ms);
    for (;;) {
        while (auto line = next_line(false)) {
            boost::system::error_code ec;
            json::value v = json::parse(*line, ec);
            const json::object* o = ec ? nullptr : v.if_object();
            const json::value* id = o ? o->if_contains("id") : nullptr;
            const json::value* t = o ? o->if_contains("type") : nullptr;
            const std::string type = t && t->is_string() ? std::string(t->get_string()) : "";
            if (type == "abort_retry" || type == "abort") {
                respond(id, type, true);
                return wait_result::cancelled;
            }
            if (type == "get_state")
                respond(id, type, true, {}, state());
            else
                respond(id, type.empty() ? "parse" : type, false, "Agent is busy");
        }
        if (in_eof) return wait_result::cancelled;
        const auto now = clk::now();
        if (now >= until) return wait_result::elapsed;
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
        pollfd p{0, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) > 0) {
            char buf[65536];
            ssize_t n = ::read(0, buf, sizeof buf);
            if (n <= 0)
                in_eof = true;
            else
                in_buf.append(buf, static_cast<std::size_t>(n));
        }
    }
}

void run_prompt(const std::string& message) {
    json::object user{{"role", "user"},
                      {"content", json::array{json::object{{"type", "text"}, {"text", message}}}}};
    // the whole conversation goes out with every request, as an agent's does (so the fake
    // server parses requests of the same growing size); kept as serialized text
    if (!history.empty()) history += ',';
    history += json::serialize(json::object{{"role", "user"}, {"content", message}});
    const std::string body = R"({"model":)" + json::serialize(json::string(cfg.model)) +
                             R"(,"stream":true,"messages":[)" + history + "]}";
    ++message_count;
    for (int attempt = 0;; ++attempt) {
        emit_type("agent_start");
        emit_type("turn_start");
        if (attempt == 0) {
            emit(json::object{{"type", "message_start"}, {"message", user}});
            emit(json::object{{"type", "message_end"}, {"message", user}});
        }
        std::string text, pending;
        bool started = false;
        auto on_body = [&](std::string_view piece) {
            pending.append(piece);
            std::size_t nl;
            while ((nl = pending.find('\n')) != std::string::npos) {
                std::string_view line(pending.data(), nl);
                if (line.starts_with("data: ") && line != "data: [DONE]") {
                    boost::system::error_code ec;
                    json::value v = json::parse(line.substr(6), ec);
                    if (!ec)
                        if (const auto* choices = v.as_object().if_contains("choices");
                            choices && choices->is_array() && !choices->as_array().empty())
                            if (const auto* d =
                                    choices->as_array()[0].as_object().if_contains("delta"))
                                if (const auto* c = d->as_object().if_contains("content");
                                    c && c->is_string() && !c->as_string().empty()) {
                                    if (!started) {
                                        emit(json::object{{"type", "message_start"},
                                                          {"message", assistant("", "stop")}});
                                        started = true;
                                    }
                                    text.append(c->as_string());
                                    emit(json::object{{"type", "message_update"},
                                                      {"message", assistant(text, "stop")}});
                                }
                }
                pending.erase(0, nl + 1);
            }
        };
        auto r = http.post(body, on_body);
        if (r.status == 200) {
            if (!started)
                emit(json::object{{"type", "message_start"}, {"message", assistant("", "stop")}});
            json::object m = assistant(text, "stop");
            emit(json::object{{"type", "message_end"}, {"message", m}});
            if (attempt > 0)
                emit(json::object{
                    {"type", "auto_retry_end"}, {"success", true}, {"attempt", attempt}});
            emit(json::object{{"type", "turn_end"}, {"message", m}});
            emit(json::object{
                {"type", "agent_end"}, {"messages", json::array{m}}, {"willRetry", false}});
            ++message_count;
            history += ',';
            history += json::serialize(json::object{{"role", "assistant"}, {"content", text}});
            retry_attempt = 0;
            emit_type("agent_settled");
            return;
        }
        std::string error = std::to_string(r.status);
        boost::system::error_code ec;
        json::value eb = json::parse(r.body, ec);
        const json::value* em = nullptr;
        if (!ec && eb.is_object())
            if (const auto* e = eb.as_object().if_contains("error"); e && e->is_object())
                em = e->as_object().if_contains("message");
        error += ' ';
        error +=
            em && em->is_string() ? std::string_view(em->get_string()) : std::string_view(r.body);
        json::object m = assistant("", "error", error);
        emit(json::object{{"type", "message_start"}, {"message", m}});
        emit(json::object{{"type", "message_end"}, {"message", m}});
        emit(json::object{{"type", "turn_end"}, {"message", m}});
        const bool will_retry = attempt < cfg.max_retries;
        emit(json::object{
            {"type", "agent_end"}, {"messages", json::array{m}}, {"willRetry", will_retry}});
        if (!will_retry) {
            emit(json::object{{"type", "auto_retry_end"},
                              {"success", false},
                              {"attempt", attempt},
                              {"finalError", error}});
            ++message_count;
            retry_attempt = 0;
            emit_type("agent_settled");
            return;
        }
        retry_attempt = attempt + 1;
        const long delay = cfg.base_delay_ms << attempt;
        emit(json::object{{"type", "auto_retry_start"},
                          {"attempt", attempt + 1},
                          {"maxAttempts", cfg.max_retries},
                          {"delayMs", delay},
                          {"errorMessage", error}});
        if (backoff(delay) == wait_result::cancelled) {
            emit(json::object{{"type", "auto_retry_end"},
                              {"success", false},
                              {"attempt", attempt + 1},
                              {"finalError", "Retry cancelled"}});
            retry_attempt = 0;
            emit_type("agent_settled");
            return;
        }
    }
}

void configure() {
    const char* dir = std::getenv("COAGENT_DIR");
    if (!dir) die("COAGENT_DIR is not set");
    json::value settings = read_json_file(std::string(dir) + "/settings.json");
    if (const auto* r = settings.as_object().if_contains("retry"); r && r->is_object()) {
        if (const auto* v = r->as_object().if_contains("maxRetries"))
            cfg.max_retries = static_cast<int>(v->to_number<double>());
        if (const auto* v = r->as_object().if_contains("baseDelayMs"))
            cfg.base_delay_ms = static_cast<long>(v->to_number<double>());
    }
    json::value models = read_json_file(std::string(dir) + "/models.json");
    const auto* providers = models.as_object().if_contains("providers");
    if (!providers || !providers->is_object() || providers->as_object().empty())
        die("models.json has no provider");
    const json::object& p = providers->as_object().begin()->value().as_object();
    std::string base(p.at("baseUrl").as_string());  // http://HOST:PORT/PATH
    if (!base.starts_with("http://")) die("baseUrl must be http://");
    base.erase(0, 7);
    const auto slash = base.find('/');
    const std::string hostport = base.substr(0, slash);
    http.path = (slash == std::string::npos ? "" : base.substr(slash)) + "/chat/completions";
    const auto colon = hostport.find(':');
    http.host = hostport.substr(0, colon);
    http.port = colon == std::string::npos ? 80 : std::atoi(hostport.c_str() + colon + 1);
    if (const auto* k = p.if_contains("apiKey"); k && k->is_string())
        http.auth = "Authorization: Bearer " + std::string(k->get_string()) + "\r\n";
    if (const auto* ms = p.if_contains("models"); ms && ms->is_array() && !ms->as_array().empty())
        cfg.model = std::string(ms->as_array()[0].as_object().at("id").as_string());
}

}  // namespace

int main() {
    std::signal(SIGPIPE, SIG_IGN);
    configure();
    emit_type("ready");
    while (auto line = next_line(true)) {
        if (line->empty()) continue;
        boost::system::error_code ec;
        json::value v = json::parse(*line, ec);
        const json::object* o = ec ? nullptr : v.if_object();
        if (!o) {
            respond(nullptr, "parse", false, "Failed to parse command");
            continue;
        }
        const json::value* id = o->if_contains("id");
        const json::value* t = o->if_contains("type");
        const std::string type = t && t->is_string() ? std::string(t->get_string()) : "";
        if (type == "get_state") {
            respond(id, type, true, {}, state());
        } else if (type == "prompt") {
            const json::value* m = o->if_contains("message");
            if (!m || !m->is_string()) {
                respond(id, type, false, "Missing field \"message\"");
                continue;
            }
            respond(id, type, true);
            run_prompt(std::string(m->get_string()));
        } else if (type == "abort_retry" || type == "abort") {
            respond(id, type, true);
        } else if (type == "new_session") {
            history.clear();
            message_count = 0;
            respond(id, type, true, {}, json::object{{"cancelled", false}});
        } else {
            respond(id, type.empty() ? "parse" : type, false, "Unknown command: " + type);
        }
    }
    return 0;
}

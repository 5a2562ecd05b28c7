#pragma once
// The HTTP providers: OpenAI-compatible chat completions (`openai-completions`), the OpenAI
// Responses API (`openai-responses`) and the Anthropic Messages API (`anthropic-messages`),
// streamed over HTTP/1.1 (Boost.Beast) with https through OpenSSL (certificates verified against
// the system CA store, SNI). Exactly one HTTP request per attempt: no retry layer inside; failures
// are assistant messages with stopReason "error" for the session's retry policy to classify
// (docs/providers.md).

#include <coagent/providers/http_protocol.hpp>
#include <coagent/session/auth_storage.hpp>
#include <coagent/session/provider.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace coagent {

struct http_provider_options {
    http_protocol::api_kind api = http_protocol::api_kind::openai_completions;
    /// e.g. "https://api.openai.com/v1"; the endpoint path is appended ("/chat/completions",
    /// "/messages"). http or https; a port is optional.
    std::string base_url;
    model_info model;  ///< provider = the models.json provider name (the auth.json key too)
    /// The key when the auth storage has none for the session (models.json apiKey or the
    /// environment). Empty: no key header is sent.
    std::string api_key;
    /// Credentials per session (auth.json); asked first for every request. Optional.
    std::shared_ptr<auth_storage> auth;
    /// Extra request headers (models.json "headers").
    std::vector<std::pair<std::string, std::string>> headers;
    std::int64_t connect_timeout_ms = 10000;       ///< provider.connectTimeoutMs
    std::int64_t stream_idle_timeout_ms = 120000;  ///< provider.streamIdleTimeoutMs
    /// provider.attemptTimeoutMs: the whole attempt (request, headers, every byte of the reply)
    /// after connecting; past it the attempt fails, retryable ("… (timed out)"). 0 = none.
    std::int64_t attempt_timeout_ms = 600000;
    /// Extra trusted CA certificates (PEM) besides the system store, e.g. a company proxy's.
    std::optional<std::filesystem::path> ca_file;
    /// Epoch ms, for HTTP-date retry hints. Default: the wall clock.
    std::function<std::int64_t()> now_ms;
    /// Send keys over cleartext http:// to a host that is not loopback (models.json
    /// "allowInsecureHttp"). Off: such a provider with a key is refused (docs/providers.md).
    bool allow_insecure_http = false;
    /// Idle keep-alive connections kept per host.
    std::size_t max_idle_per_host = 4;
};

/// Thrown by the constructor for options that cannot work (bad base URL, unreadable CA file).
class http_provider_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class http_provider final : public provider {
  public:
    explicit http_provider(http_provider_options opts);
    ~http_provider() override;

    model_info model() const override;

    /// Why a key must not be sent to this provider's base URL (cleartext http:// to a host that
    /// is not loopback, without allow_insecure_http), or "" when it may. The constructor throws
    /// this text when `api_key` is set; a request that finds a key (auth storage) fails with it.
    const std::string& cleartext_refusal() const noexcept;

    /// One streamed request (see provider::stream). Completes on the calling coroutine's
    /// executor. Resolve + connect + TLS handshake are bounded by connectTimeoutMs, every read
    /// by streamIdleTimeoutMs ("… timed out", retryable). abort.request() closes the socket at
    /// once (the slot stays assigned for the operation's duration) → stopReason "aborted".
    /// Connections are reused per host (keep-alive) when a response ended cleanly.
    boost::asio::awaitable<void> stream(const provider_request& req, message& out,
                                        stream_observer& observer, abort_signal& abort) override;

    /// The auth storage the provider asks for keys (the session's usage-limit path should use
    /// the same one); null if none.
    std::shared_ptr<auth_storage> auth() const;
    std::shared_ptr<auth_storage> credentials() const override { return auth(); }

    /// Idle connections currently pooled (tests).
    std::size_t idle_connections() const;
    /// Connections opened so far (tests: keep-alive reuse).
    std::size_t connections_opened() const;
    /// Reads of a socket that brought bytes of a response body, so far (tests: a reply sent at
    /// once is read in ever larger reads, up to 16 KiB).
    std::size_t body_reads() const;

    struct impl;

  private:
    std::shared_ptr<impl> impl_;
};

}  // namespace coagent

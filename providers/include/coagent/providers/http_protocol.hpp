#pragma once
// The wire formats of the HTTP providers, sans-io: request bodies for OpenAI chat completions,
// the OpenAI Responses API and Anthropic Messages, the stream decoders that turn their SSE events
// into an assistant message, the error text of a failed response, and the retry hint taken from
// response headers (policy Appendix A: the ` retry-after-ms=<N>` suffix). No sockets, no clock (now
// is a parameter).

#include <coagent/providers/reply_budget.hpp>
#include <coagent/providers/sse_parser.hpp>
#include <coagent/session/provider.hpp>

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/value.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent::http_protocol {

/// The wire API of a provider (models.json "api").
enum class api_kind { openai_completions, anthropic_messages, openai_responses };

/// "openai-completions" | "anthropic-messages" | "openai-responses"
std::string_view to_string(api_kind k) noexcept;
std::optional<api_kind> api_from_string(std::string_view s) noexcept;

/// The path appended to baseUrl: "/chat/completions", "/messages" or "/responses".
std::string_view endpoint_path(api_kind k) noexcept;

/// The JSON request body of one streamed request. Failed assistant messages are expected to be
/// filtered out by the caller already (provider_request's contract). A model without image
/// input (models.json "input" without "image") gets without_images(req).
std::string build_request_body(api_kind k, const provider_request& req);

/// The texts that stand for images sent to a model without image input (the reference's).
inline constexpr std::string_view user_image_placeholder =
    "(image omitted: model does not support images)";
inline constexpr std::string_view tool_image_placeholder =
    "(tool image omitted: model does not support images)";
/// `req` with the images of its user and toolResult messages replaced (each run of images by
/// one placeholder, none right after a placeholder text) when req.model has no image input and
/// some message has images; nullopt when nothing is replaced. The replaced messages are new
/// objects: the session's messages (and files) keep their images.
std::optional<provider_request> without_images(const provider_request& req);

/// Response headers with lower-case names (HTTP names are case-insensitive).
using header_list = std::vector<std::pair<std::string, std::string>>;
std::optional<std::string_view> find_header(const header_list& h,
                                            std::string_view lower_name) noexcept;

/// The retry hint of a response in ms: the largest of `retry-after-ms` (ms), `retry-after`
/// (seconds, or an HTTP-date minus now), `x-ratelimit-reset-ms` (> 1e12: epoch ms minus now,
/// else ms) and `x-ratelimit-reset` (> 1e9: epoch seconds minus now, else seconds). Values that
/// are not positive are ignored; fractions round up to whole ms. nullopt without a usable one.
std::optional<std::int64_t> retry_hint_from_headers(const header_list& h,
                                                    std::int64_t now_ms) noexcept;

/// Appends " retry-after-ms=<N>" unless `text` already has "retry-after-ms=" (any case).
void append_retry_hint(std::string& text, std::optional<std::int64_t> hint_ms);

/// `x-should-retry: true|false` when present.
std::optional<bool> should_retry_header(const header_list& h) noexcept;

/// What a failed response body says.
struct error_details {
    std::string text;  ///< "<status> <message from the body>" or "<status> status code (no body)"
    std::string type;  ///< the provider's error type (or code) when the body names one
};

/// The error text of a non-2xx response (docs/architecture.md "Error text"). The message is the
/// body's `error.message` (OpenAI and Anthropic), else `message`, else a string `error`; a JSON
/// body without any of them is shown compactly; a non-JSON body as text (trimmed, at most 1000
/// bytes); an empty body gives "<status> status code (no body)".
error_details http_error_text(int status, std::string_view body);

/// The most bytes one streamed reply may hold (reply_budget: text, tool-call names, ids and
/// arguments, and 256 bytes a content block): 16 MiB. The longest replies of today's models are
/// about 128k output tokens (well under 1 MiB); the bound keeps a reply's session-file line
/// (which may be about twice as long once re-serialised) under session_history's line limit
/// (64 MiB).
inline constexpr std::size_t default_max_reply_bytes = reply_budget::default_max_bytes;

/// Decodes one streamed reply into an assistant message. Feed it the SSE events in order;
/// it fills `out` (content, usage, stop reason, error) and reports progress to `observer`.
class stream_decoder {
  public:
    enum class state { streaming, done, error };

    virtual ~stream_decoder() = default;
    static std::unique_ptr<stream_decoder> make(api_kind k);

    /// One SSE event. After state() leaves `streaming` further events are ignored.
    virtual void on_event(const sse_event& ev, message& out, stream_observer& observer) = 0;
    /// The HTTP body ended cleanly (no more events). A stream that did not finish becomes an
    /// error ("… ended without …", retryable).
    virtual void on_end(message& out) = 0;

    state status() const noexcept { return state_; }

    /// The most bytes one reply may hold (default_max_reply_bytes, counted by reply_budget);
    /// beyond it the reply ends as the error "Reply too large: …" (not retryable). A tool-call
    /// name over 256 bytes or id over 512 bytes ends it as "Invalid stream data from the
    /// provider: a tool-call name of N bytes is longer than 256 bytes, …" (not retryable).
    void set_max_reply_bytes(std::size_t n) noexcept { budget_.set_max_bytes(n); }
    std::size_t max_reply_bytes() const noexcept { return budget_.max_bytes(); }
    /// The bytes the reply holds so far, as counted against max_reply_bytes().
    std::size_t reply_bytes() const noexcept { return budget_.used(); }

  protected:
    void fail(message& out, std::string text, std::string type = {});
    /// fail() for the provider's own error event: its message, with its type in front when the
    /// message does not name it ("overloaded_error: Overloaded"), and its type.
    void fail_error_event(message& out, std::string message, std::string type);
    /// Parses the tool calls' arguments into their blocks. A number beyond the double range in
    /// them fails the reply (returns false); arguments that are not a JSON object stay empty.
    bool finish_text_and_tools(message& out);
    /// Where an event's JSON lives while on_event reads it: in the caller's (stack) frame, so an
    /// SSE event up to 4 KiB of DOM costs no heap allocation (a profile of many streams had a
    /// fifth of their instructions in malloc and free of event DOMs).
    struct event_scratch {
        alignas(std::max_align_t) unsigned char buffer[4096];
        json::monotonic_resource resource{buffer, sizeof buffer};
        json::value value =
            json::value(json::storage_ptr(&resource));  // destroyed before `resource`
    };
    /// The event's data as a JSON object (strict: numbers beyond a double refused), in
    /// `scratch`, or nullptr after failing the reply. Valid while `scratch` lives.
    const json::object* parse_event(const sse_event& ev, message& out, event_scratch& scratch);
    /// Counts `bytes` more text or argument bytes; false after failing the reply over the limit.
    bool grow(message& out, std::size_t bytes);
    /// Counts a new content block; false after failing the reply over the limit.
    bool new_block(message& out);
    /// Sets a tool call's `field` (its "name" or "id", `what`) to `value` within the field's
    /// bound and the reply's budget; false after failing the reply.
    bool set_tool_field(message& out, std::string& field, std::string_view value,
                        std::string_view what);

    state state_ = state::streaming;
    reply_budget budget_;
    // tool calls in progress: content index → raw JSON arguments
    std::map<std::size_t, std::string> tool_args_;
};

/// `url` fit to quote in an error: the userinfo ("user:password@") is dropped and a query or
/// fragment becomes "?…" (keys travel there), also when `url` is not a valid URL:
/// "https://u:p@h:1/v1?key=s" → "https://h:1/v1?…".
std::string redact_url(std::string_view url);

/// Whether `host` (a URL's host, without brackets) is a loopback address: "localhost" (any
/// case, also "x.localhost"), 127.0.0.0/8, ::1 (and ::ffff:127.x.y.z). A name that merely
/// resolves to loopback is not (it could resolve elsewhere tomorrow).
bool is_loopback_host(std::string_view host);

}  // namespace coagent::http_protocol

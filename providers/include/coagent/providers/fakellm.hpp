#pragma once
// coagent-fakellm: a scripted, fault-injecting fake LLM server on 127.0.0.1 that speaks the
// OpenAI chat-completions and the Anthropic Messages streaming APIs (docs/fakellm.md). The
// executable apps/fakellm_main.cpp wraps fakellm::server; tests may run the same server in
// process on their own io_context.
//
// Script: a JSON array, one step per request (to either API), in order:
//   {"status":N,"headers"?:{...},"body"?:JSON|TEXT}        an HTTP answer as given
//   {"text":TEXT,"chunks"?:N,"usage"?:{...}}                a streamed reply
//   {"text":...,"cutAfterChunks":N}                         connection dropped after N chunks
//   {"text":...,"stallAfterChunks":N,"stallMs":M}           silence for M ms after N chunks
//   {"sseError":{"type":T,"message":M},"text"?:...}         a mid-stream error event
//   {"toolCall":{"name":...,"arguments":{...}}}              a streamed tool call
//   {"failFor":{"ms":N,"status":S,"headers"?,"body"?}}      every request of the next N ms gets S
// Any step may carry "times":N (repeat) and "delayMs":N (wait before answering); streamed steps
// "chunkDelayMs":N (pacing between content chunks). When the script runs out: 500 with the text
// body "fakellm script exhausted". With server_options::per_conversation every conversation
// (keyed by its first user message) plays the script from its own start, and a step with
// "forConversations":[from,to] belongs only to the conversations whose key's share is in it.

#include <coagent/providers/script_model.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent::fakellm {

/// A fakellm step: the shared script model's step (text, tool call, times, delayMs, stallMs)
/// and what only the fakellm syntax has.
struct step : scripted::step_base {
    enum class kind { status, text, sse_error, tool_call };
    kind type = kind::text;

    // status
    int status = 200;
    std::vector<std::pair<std::string, std::string>> headers;  // also sent with other kinds
    std::optional<boost::json::value> body;  // a string is sent as text/plain, else as JSON

    // text / sse_error (text before the error) / tool_call
    std::optional<int> chunks;                 // split the text (or tool arguments) into N chunks
    std::optional<boost::json::object> usage;  // {input, output, cacheRead, cacheWrite}
    std::optional<int> cut_after_chunks;
    std::optional<int> stall_after_chunks;  // then silence for stall_ms
    std::int64_t chunk_delay_ms = 0;        // pacing: this long between content chunks

    // --per-conversation: the step belongs to the conversations whose key falls in
    // [first, second) of [0, 1) (conversation_share); the others skip it
    std::optional<std::pair<double, double>> for_conversations;

    // text / sse_error / tool_call: a thinking block before the reply. Anthropic: its text in
    // thinking_delta events, then its signature in one signature_delta; or a redacted_thinking
    // block holding `redacted_thinking` (opaque). Responses: a reasoning item whose summary
    // streams the text (reasoning_summary_text.delta) and whose encrypted_content is the
    // signature (or `redacted_thinking`, with no summary). Chat completions: the text in
    // `reasoning_content` deltas (no signature; `redacted_thinking` is not sent).
    std::optional<std::string> thinking;
    std::string signature;
    std::optional<std::string> redacted_thinking;

    // sse_error
    std::string error_type;
    std::string error_message;

    // {"failFor":{"ms":N,"status":…}}: a status step that answers every request of the N ms
    // that begin when a request first reaches it (0: an ordinary step)
    std::int64_t fail_for_ms = 0;
};

/// A malformed script: what() names the source (file or "<inline>"), the step and the field.
using script_error = scripted::script_error;

/// The fakellm syntax of the shared script model (the steps above). Errors read
/// "<source>:<line>:<col>: invalid JSON: …" or
/// "<source>: step 2: \"stallMs\" must be a non-negative integer, found \"x\"".
struct syntax {
    static constexpr std::string_view inline_name = "<inline>";
    static constexpr std::string_view cannot_read = "cannot read the script";
    static std::vector<step> parse_steps(std::string_view json_text, const std::string& source);
};

/// parse(json_text, source) and from_argument(arg): inline JSON when it starts with '['.
using script = scripted::basic_script<step, syntax>;

/// Which API a request path speaks.
enum class api { openai, anthropic, responses, unknown };
/// /v1/chat/completions or /chat/completions → openai; /v1/messages or /messages → anthropic;
/// /v1/responses or /responses → responses (any prefix before them is accepted, so baseUrl
/// "http://host:port/proxy/v1" works too; a query string is ignored).
api api_of_path(std::string_view target) noexcept;

/// One request as the server received it.
struct request_record {
    std::size_t index = 0;  // 1-based
    std::string path;
    api kind = api::unknown;
    std::string authorization;  // header values ("" when absent)
    std::string x_api_key;
    std::string model;
    bool stream = false;
    // message roles in order ("system" first when sent); Responses input items without a role
    // by their type ("function_call", "function_call_output", "reasoning")
    std::vector<std::string> roles;
    std::string body;          // the raw request body
    std::string conversation;  // the text of the first user message (the key)
    // image blocks in the messages (Anthropic image, OpenAI image_url, Responses input_image)
    std::size_t images = 0;
    // thinking sent back: Anthropic thinking and redacted_thinking blocks, Responses reasoning
    // items
    std::size_t thinking = 0;
    int status = 0;  // the status answered
};

/// The --log line of a request: {"request":n,"path":…,"api":…,"authorization":bool,
/// "x-api-key":bool,"keySuffix":"…"?,"model":…,"stream":bool,"roles":[…],"images":N,
/// "thinking":N,"status":N}.
boost::json::object to_json(const request_record& r);

struct server_options {
    script steps;
    std::optional<std::filesystem::path> log_file;  // one JSON line per request (appended)
    std::uint16_t port = 0;                         // 0: chosen by the OS
    /// Each conversation (its first user message) plays the script from its own start
    /// (scale benchmarks: N sessions, the same faults each); off: one script for all requests.
    bool per_conversation = false;
    std::string bind_address = "127.0.0.1";
    // https: a PEM certificate chain and its private key (both or neither)
    std::optional<std::filesystem::path> tls_cert_file;
    std::optional<std::filesystem::path> tls_key_file;
};

/// The server. Runs on the executor given (single-threaded use: one io_context thread).
class server {
  public:
    /// Binds and listens. Throws std::system_error (bind, log file) or std::runtime_error (TLS
    /// files).
    server(boost::asio::any_io_executor ex, server_options opts);
    ~server();
    server(const server&) = delete;
    server& operator=(const server&) = delete;

    std::uint16_t port() const noexcept;
    /// Starts accepting (each connection is served by its own coroutine, keep-alive honoured).
    void start();
    /// Closes the acceptor, every connection and every pending stall; idempotent. Coroutines
    /// then finish on their own.
    void stop();

    /// Requests received so far (thread-safe).
    std::vector<request_record> requests() const;
    std::size_t request_count() const;

    static constexpr const char* exhausted_text = "fakellm script exhausted";

    struct impl;

  private:
    std::shared_ptr<impl> impl_;
};

// ---- the response bodies, sans-io (exposed for tests and benchmarks) ----------------------

/// The SSE events of a streamed reply for `kind`, each a complete "event:/data:" block ending
/// in a blank line; `model` goes into the payloads. Chunk boundaries are where the text splits.
/// For a text step the list is: preamble events, one event per text chunk, closing events.
struct stream_plan {
    std::vector<std::string> head;    // before the content chunks
    std::vector<std::string> chunks;  // one per content chunk
    std::vector<std::string> tail;    // after them
};
stream_plan plan_stream(const step& s, api kind, const std::string& model,
                        std::int64_t input_tokens, std::size_t call_number);

/// Where a conversation key falls in [0, 1): FNV-1a 64 of its bytes, mixed by MurmurHash3's
/// finalizer, over 2^64 — uniform for keys that differ in one character, and the same on
/// every run and machine (so two agents sending the same prompts meet the same faults).
double conversation_share(std::string_view key) noexcept;

/// Splits `text` into `n` pieces of about equal size at UTF-8 character boundaries; default
/// (n unset): at spaces, one word (with its leading space) a piece.
std::vector<std::string> split_chunks(std::string_view text, std::optional<int> n);

}  // namespace coagent::fakellm

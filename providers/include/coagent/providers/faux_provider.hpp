#pragma once
// The embedded faux provider: plays a script, one step per request, and records every
// request it received, so coagent runs (and is tested) with no network.
//
// Script: a JSON array of steps, e.g.
//   [{"error":"503 Service Unavailable","status":503,"times":2},{"text":"Hello"}]
// Steps: {"error":TEXT,"status"?:N,"usage"?:{…}} |
// {"text":TEXT,"usage"?:{input,output,cacheRead,cacheWrite}}
//        | {"toolCall":{"name":…,"arguments":{…}}}; any step may carry "times":N (repeat),
//        "delayMs":N (answer after N ms) and "stallMs":N (stop sending mid-stream for N ms).
// When the script runs out: the non-retryable error "faux script exhausted".
// Without a script: every request is answered "Hello from the faux provider.".

#include <coagent/providers/script_model.hpp>
#include <coagent/runtime/cancellable_wait.hpp>
#include <coagent/session/provider.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace coagent {

/// A faux step: the shared script model's step (text, tool call, times, delayMs, stallMs) and
/// what only the faux syntax has.
struct faux_step : scripted::step_base {
    enum class kind { error, text, tool_call };
    kind type = kind::text;
    std::optional<int> status;         // error
    std::optional<token_usage> usage;  // text, error (a failed attempt's usage)
};

/// A malformed script: what() names the source (file or "<inline faux script>") and the
/// position ("<file>:<line>:<col>: …", "<file>: step 2: …").
using faux_script_error = scripted::script_error;

/// The faux syntax of the shared script model (the steps above).
struct faux_syntax {
    static constexpr std::string_view inline_name = "<inline faux script>";
    static constexpr std::string_view cannot_read = "cannot read faux script";
    static std::vector<faux_step> parse_steps(std::string_view json_text,
                                              const std::string& source);
};

/// parse(json_text, source) and from_argument(arg): inline JSON when it starts with '['.
using faux_script = scripted::basic_script<faux_step, faux_syntax>;

/// One request as the faux provider received it.
struct faux_request {
    struct entry {
        std::string role;
        std::string text;
        std::string stop_reason;  // assistant messages
        std::size_t images = 0;   // its image blocks (in the log as "images" when not 0)
    };
    std::vector<entry> messages;
};

struct faux_options {
    std::optional<faux_script> script;
    std::int64_t context_window = 128000;
    std::optional<std::filesystem::path> log_file;  // one JSON line per request
    std::int64_t stream_idle_timeout_ms = 120000;   // provider.streamIdleTimeoutMs
    clock_kind clock = clock_kind::steady;
    bool record_requests = true;  // keep requests() (benchmarks of many sessions turn it off)
};

class faux_provider final : public provider {
  public:
    explicit faux_provider(faux_options opts = {});
    ~faux_provider() override;

    model_info model() const override;
    boost::asio::awaitable<void> stream(const provider_request& req, message& out,
                                        stream_observer& observer, abort_signal& abort) override;

    /// Every request received so far, in order.
    std::vector<faux_request> requests() const;
    std::size_t request_count() const;

    static constexpr const char* default_reply = "Hello from the faux provider.";
    static constexpr const char* exhausted_text = "faux script exhausted";

  private:
    std::optional<faux_step> next_step();
    void record(const provider_request& req);

    faux_options opts_;
    scripted::cursor cursor_;
    std::size_t tool_calls_ = 0;
    mutable std::mutex mutex_;
    std::vector<faux_request> requests_;
    std::size_t unrecorded_ = 0;
    std::FILE* log_ = nullptr;
};

}  // namespace coagent

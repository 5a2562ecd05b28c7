#pragma once
// The embedded faux provider: plays a script, one step per request, and records every
// request it received, so coagent runs (and is tested) with no network.
//
// Script: a JSON array of steps, e.g.
//   [{"error":"503 Service Unavailable","status":503,"times":2},{"text":"Hello"}]
// Steps: {"error":TEXT,"status"?:N} | {"text":TEXT,"usage"?:{input,output,cacheRead,cacheWrite}}
//        | {"toolCall":{"name":…,"arguments":{…}}}; any step may carry "times":N (repeat),
//        "delayMs":N (answer after N ms) and "stallMs":N (stop sending mid-stream for N ms).
// When the script runs out: the non-retryable error "faux script exhausted".
// Without a script: every request is answered "Hello from the faux provider.".

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

struct faux_step {
    enum class kind { error, text, tool_call };
    kind type = kind::text;
    std::string text;                  // error text or reply text
    std::optional<int> status;         // error
    std::optional<token_usage> usage;  // text
    std::string tool_name;             // tool_call
    json::object tool_arguments;       // tool_call
    int times = 1;
    std::int64_t delay_ms = 0;
    std::int64_t stall_ms = 0;
};

/// A malformed script: what() names the source (file or "<inline>") and the position.
class faux_script_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct faux_script {
    std::vector<faux_step> steps;

    /// Parses script JSON; `source` names it in errors ("<file>:<line>:<col>: …",
    /// "<file>: step 2: …").
    static faux_script parse(std::string_view json_text, const std::string& source);
    /// `arg` is inline JSON when it starts with '[' (after blanks), else a file path.
    static faux_script from_argument(const std::string& arg);
};

/// One request as the faux provider received it.
struct faux_request {
    struct entry {
        std::string role;
        std::string text;
        std::string stop_reason;  // assistant messages
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
    std::size_t step_ = 0;
    int repeat_ = 0;
    std::size_t tool_calls_ = 0;
    mutable std::mutex mutex_;
    std::vector<faux_request> requests_;
    std::size_t unrecorded_ = 0;
    std::FILE* log_ = nullptr;
};

}  // namespace coagent

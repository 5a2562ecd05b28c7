#pragma once
// Pure error classification (policy §2 and Appendix A): is an assistant error retryable, a
// usage limit, or a context overflow; and what retry hint does its text carry. No I/O.

#include <coagent/runtime/limit.hpp>
#include <coagent/runtime/message.hpp>

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace coagent {

enum class error_kind { none, retryable, usage_limit, context_overflow };

std::string_view to_string(error_kind k) noexcept;

struct classification {
    error_kind kind = error_kind::none;
    /// Which rule decided, "<table>/<entry>", e.g. "overflow/prompt is too long",
    /// "status/503", "retryable/overloaded", "usage_limit/usage.?limit",
    /// "overflow/silent usage"; "none" when nothing matched.
    std::string rule = "none";
    /// The kind of limit (rate, quota, billing, capacity, server, transport) of a retryable
    /// decision, from the entry or status that decided; none otherwise.
    limit_kind limit = limit_kind::none;
    std::optional<int> status;                   // HTTP status when the provider gave one
    std::string provider_error_type;             // e.g. "overloaded_error" when known
    std::optional<std::int64_t> retry_after_ms;  // hint parsed from the error text

    /// Retryable in the spec's sense (usage limits are a retryable subclass).
    bool retryable() const noexcept {
        return kind == error_kind::retryable || kind == error_kind::usage_limit;
    }
};

/// Classifies an error text (+ optional HTTP status). `now_ms` (epoch ms) is used only for
/// dated retry hints.
classification classify_error_text(std::string_view text, std::optional<int> status,
                                   std::int64_t now_ms);

/// The spec's gate: kind != none only when the message is an assistant message with
/// stopReason "error" and an errorMessage — except silent overflow: stopReason "stop" whose
/// usage.input + usage.cacheRead exceeds model.context_window (when known).
classification classify(const message& m, const model_info& model, std::int64_t now_ms);

/// The first retry hint in the text (Appendix A forms, first match wins), clamped >= 0 and
/// rounded up to whole ms.
std::optional<std::int64_t> parse_retry_hint(std::string_view text, std::int64_t now_ms);

/// Compiles the classifier's pattern set now (otherwise the first classification does, about
/// 3 ms here) and runs one match, so the first retried turn of a process costs what the next
/// ones do. Thread-safe; call it at start-up on a thread of its own (the `coagent` executable
/// does, in `app_context`) — a classification that comes first waits for the compilation.
void warm_up_classifier();

/// {"kind","retryable","rule","limit","retryAfterMs"?} as `coagent classify` prints it.
json::object to_json(const classification& c);

}  // namespace coagent

#pragma once
// telemetry: an observer of a session's work at three levels, and of the run policy's decisions
// (docs/observability.md). None by default (session_options::telemetry): a session without one
// pays a pointer test per hook and nothing else.
//
//   prompt  — prompt() to agent_settled (or to the next queued prompt); may hold several chats
//   chat    — one model call including its retries and waits (the OpenTelemetry GenAI `chat`
//             operation); ends ok at the first attempt that succeeds, error when the policy gives
//             up (exhausted, not retryable, cancelled, overflow)
//   attempt — one provider request; `resend_count` (http.request.resend_count) is its number in
//             the chat, from 0
//
// Times are nanoseconds: since the Unix epoch on the steady clock, since manual_clock's zero on
// the manual clock (tests). Every call comes from the session's executor. The records' strings are
// views, valid during the call only: copy what you keep.

#include <coagent/runtime/limit.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/session/run_policy.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace coagent {

/// gen_ai.provider.name / gen_ai.request.model of a chat or attempt.
struct telemetry_model {
    std::string_view provider;
    std::string_view model;
};

/// The end of one attempt.
struct telemetry_attempt {
    telemetry_model model;
    std::int64_t start_ns = 0;
    int resend_count = 0;  ///< http.request.resend_count
    /// "ok", "aborted", the `limit` of the error (rate, quota, billing, capacity, server,
    /// transport) or "other" (not retryable, overflow)
    std::string_view result;
    token_usage usage;    ///< gen_ai.usage.*; its cost too
    bool wasted = false;  ///< the attempt failed: its tokens and cost are coagent.tokens.wasted
};

/// The end of one chat.
struct telemetry_chat {
    telemetry_model model;
    std::int64_t start_ns = 0;  ///< when its first attempt started
    bool ok = false;
    std::string_view error_type;  ///< error.type when !ok: the last attempt's result
    int attempts = 0;             ///< attempts made in the chat (>= 1)
};

/// A retry decided (auto_retry_start).
struct telemetry_retry {
    telemetry_model model;
    int attempt = 0;            ///< coagent.retry.attempt (1 for the first retry)
    std::int64_t delay_ms = 0;  ///< coagent.retry.delay_ms
    std::string_view rule;      ///< coagent.retry.rule: the classification rule that decided
    limit_kind limit = limit_kind::none;  ///< coagent.retry.limit
};

class telemetry {
  public:
    virtual ~telemetry() = default;

    virtual void prompt_start(std::int64_t /*t_ns*/) {}
    virtual void prompt_end(std::int64_t /*t_ns*/, prompt_result::status /*outcome*/) {}
    virtual void chat_start(std::int64_t /*t_ns*/, const telemetry_model&) {}
    virtual void chat_end(std::int64_t /*t_ns*/, const telemetry_chat&) {}
    virtual void attempt_start(std::int64_t /*t_ns*/, const telemetry_model&,
                               int /*resend_count*/) {}
    virtual void attempt_end(std::int64_t /*t_ns*/, const telemetry_attempt&) {}

    /// Decisions.
    virtual void retry(std::int64_t /*t_ns*/, const telemetry_retry&) {}
    /// The backoff wait begins / ends (`elapsed_ms` of the session's clock; cancelled early or
    /// not).
    virtual void backoff_start(std::int64_t /*t_ns*/) {}
    virtual void backoff_end(std::int64_t /*t_ns*/, std::int64_t /*elapsed_ms*/) {}
    /// A usage limit asked the auth storage for another credential of `provider`.
    virtual void credential_switch(std::int64_t /*t_ns*/, std::string_view /*provider*/,
                                   bool /*switched*/) {}
    /// A model fallback (retry.fallbackChains): "provider/model" selectors.
    virtual void fallback(std::int64_t /*t_ns*/, std::string_view /*from*/,
                          std::string_view /*to*/) {}
    virtual void compaction(std::int64_t /*t_ns*/, compaction_reason, bool /*ok*/) {}
};

/// A session's usage accounting (agent_session::usage()), beside what its history already sums
/// (every attempt's tokens and cost, RPC get_session_stats `tokens` / `cost`): the part wasted on
/// attempts that failed or were aborted, the time spent in backoff, the retries by `limit`.
/// Allocated at a session's first failed attempt: a session that never failed stays small.
struct session_usage {
    token_usage wasted;  ///< cost.total: the wasted cost
    std::int64_t backoff_ms = 0;
    std::int64_t retries = 0;
    /// indexed by limit_kind
    std::array<std::int64_t, 7> retries_by_limit{};
};

}  // namespace coagent

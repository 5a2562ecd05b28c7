#pragma once
// Compaction (policy §1: the path a context overflow is handed to; docs/architecture.md
// "Compaction"). Planning is plain code (what to summarise, what to keep); the summary itself comes
// from a compaction_hook — by default model_summarizer, which asks the session's model.

#include <coagent/runtime/abort_signal.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/session/provider.hpp>

#include <boost/asio/awaitable.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

/// The first line of the user message that stands for the dropped part of a conversation.
inline constexpr std::string_view summary_prefix = "The conversation so far, summarized:\n";

/// "The conversation so far, summarized:\n<summary>"
std::string summary_message_text(std::string_view summary);
/// The summary inside a message made by summary_message_text, if `m` is one.
std::optional<std::string> summary_of(const message& m);

/// What one image counts for in estimate_tokens, in characters: 4800 (1200 tokens), the
/// reference's fixed estimate — the base64 size says little about an image's token cost.
inline constexpr std::size_t image_estimate_chars = 4800;

/// Tokens of a message: estimated as ceil(characters / 4) of its text, thinking, tool-call names
/// and arguments, plus image_estimate_chars per image (provider usage describes whole requests,
/// not single messages).
std::int64_t estimate_tokens(const message& m);

/// Tokens the context used at the last successful reply: its usage.totalTokens, else
/// input + output + cacheRead + cacheWrite; 0 when the provider reported none.
std::int64_t context_tokens(const message& last_reply);

/// Threshold compaction: after a successful reply whose context tokens exceed
/// contextWindow - compaction.reserveTokens (only when the window is known).
bool over_threshold(const message& last_reply, const model_info& model,
                    const compaction_settings& s);

struct compaction_plan {
    std::optional<std::string> previous_summary;  // the context started with a summary
    std::vector<message_ptr> to_summarize;        // older messages (failed replies left out)
    std::size_t first_kept = 0;      // index into the context of the first kept message
    std::int64_t tokens_before = 0;  // estimate of the whole context
};

/// Keeps the most recent messages up to keep_recent_tokens, cut at a user message so a tool
/// call is never separated from its result; everything before goes to the summary. No plan
/// when there is nothing to summarise.
std::optional<compaction_plan> plan_compaction(const std::vector<message_ptr>& context,
                                               std::int64_t keep_recent_tokens);

/// The compaction_end error when plan_compaction found nothing to summarise.
std::string nothing_to_compact_message(std::int64_t keep_recent_tokens);

/// The context after a compaction: the summary as a user message, then the kept messages
/// (context[first_kept…]).
std::vector<message_ptr> compacted_context(const std::vector<message_ptr>& context,
                                           std::size_t first_kept, std::string_view summary);

struct compaction_request {
    std::string reason;  // "overflow" | "threshold" | "manual"
    compaction_plan plan;
    std::string custom_instructions;  // manual compaction may carry some
    model_info model;
    /// Sends one request to the session's model under the session's retry policy (a
    /// retryable failure waits and tries again, with auto_retry_* events) and completes with
    /// the final assistant message (stop, error or aborted).
    std::function<boost::asio::awaitable<message_ptr>(provider_request)> complete;
};

struct compaction_outcome {
    bool ok = false;
    bool aborted = false;
    std::string summary;        // when ok
    std::string error_message;  // when !ok
};

class compaction_hook {
  public:
    virtual ~compaction_hook() = default;
    /// Produces the summary. Completes on the session's executor; `abort` cancels it (the
    /// outcome then says aborted). `req.complete` must not be used after completion.
    virtual boost::asio::awaitable<compaction_outcome> compact(compaction_request req,
                                                               abort_signal& abort) = 0;
};

/// The default hook: asks the session's model for the summary (one request; retried under
/// the retry policy by `req.complete`).
class model_summarizer final : public compaction_hook {
  public:
    boost::asio::awaitable<compaction_outcome> compact(compaction_request req,
                                                       abort_signal& abort) override;

    /// The request model_summarizer sends (exposed for tests and docs).
    static provider_request build_request(const compaction_request& req);
};

}  // namespace coagent

#pragma once
// agent_session's private parts (not installed): what the one loop carries between the run
// policy's actions, and the members many sessions never set.

#include <coagent/session/agent_session.hpp>

namespace coagent {

struct agent_session::run_state {
    bool summary = false;                       // a compaction's summary request
    message_ptr pending;                        // prompt: the user message of the next run
    std::uint64_t id = 0;                       // prompt: the prompt call that runs
    std::unique_ptr<prompt_result> own_result;  // abort() ended this prompt, then more ran
    // retry.resumePartial: the failed reply the next run continues (a prefill), and the context
    // size it applies to (a message that joined the backoff meanwhile makes it a restart)
    message_ptr continue_from;
    std::size_t continue_at = 0;
};

// a compaction's summary request (summary == true): what it sends and its latest reply
struct agent_session::summary_state : agent_session::run_state {
    provider_request* request = nullptr;
    std::shared_ptr<message> reply;
};

// what run_agent gathers: the run's messages and its last assistant message
struct agent_session::run_outcome {
    std::vector<message_ptr> added;
    message_ptr last;
    bool continued = false;  // its first request continued a failed reply (retry.resumePartial)
};

struct agent_session::telemetry_state {
    std::shared_ptr<telemetry> sink;
    bool prompt_open = false;
    bool chat_open = false;
    int attempts = 0;      // in the open chat
    std::string provider;  // of the open chat's latest attempt
    std::string model;
    std::string_view last_result;  // of the latest attempt (a static string)
    // a failed attempt's end waits for the run's classification (perform classifies it once)
    bool end_pending = false;
    std::int64_t pending_end = 0;  // ns
    token_usage pending_usage;
    std::string rule;                // the classification rule of the latest failed attempt
    std::int64_t chat_start = 0;     // ns
    std::int64_t attempt_start = 0;  // ns
};

struct agent_session::rare_members {
    std::shared_ptr<auth_storage> auth;
    std::shared_ptr<model_catalog> catalog;
    std::function<std::int64_t()> now_ms;  // empty: wall_clock_ms
    std::string system_prompt;
    extension_runner extensions;
    tool_runner tools;
    std::optional<std::string> name;
    std::vector<std::string> prefill_rejected;  // models ("provider/id") that refused a prefill
    std::unique_ptr<telemetry_state> tel;       // with session_options::telemetry only
};

}  // namespace coagent

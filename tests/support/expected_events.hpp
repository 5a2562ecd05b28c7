#pragma once
// Event sequences of docs/architecture.md "Events" that several test programs assert (the
// session on a manual clock, RPC mode, HTTP over loopback), in the form their brief() helpers
// print: roles and stop reasons folded in, message_update left out.

#include <string>
#include <vector>

namespace coagent::test {

/// One prompt whose first two attempts fail with a retryable error and whose third succeeds.
inline const std::vector<std::string> two_retries_then_success_events = {
    "agent_start",
    "turn_start",
    "message_start:user",
    "message_end:user",
    "message_start:assistant",
    "message_end:assistant:error",
    "turn_end",
    "agent_end{retry}",
    "auto_retry_start{1}",
    "agent_start",
    "turn_start",
    "message_start:assistant",
    "message_end:assistant:error",
    "turn_end",
    "agent_end{retry}",
    "auto_retry_start{2}",
    "agent_start",
    "turn_start",
    "message_start:assistant",
    "message_end:assistant:stop",
    "auto_retry_end{ok,2}",
    "turn_end",
    "agent_end{final}",
    "agent_settled"};

}  // namespace coagent::test

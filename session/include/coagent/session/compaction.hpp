#pragma once
// The compaction hand-off (spec §1): a context overflow goes here, never to retry.

#include <coagent/runtime/abort_signal.hpp>
#include <coagent/runtime/message.hpp>

#include <boost/asio/awaitable.hpp>

#include <optional>
#include <string>
#include <vector>

namespace coagent {

struct compaction_request {
    std::string reason;                 // "overflow" | "threshold" | "manual"
    std::vector<message_ptr> context;   // the runtime context (failed replies removed)
    model_info model;
};

struct compaction_outcome {
    bool ok = false;
    std::string error_message;               // when !ok
    std::vector<message_ptr> new_context;    // when ok: replaces the runtime context
    std::optional<json::value> result;       // compaction_end.result
};

class compaction_hook {
public:
    virtual ~compaction_hook() = default;
    /// Compacts the context. Completes on the session's executor; `abort` cancels it.
    virtual boost::asio::awaitable<compaction_outcome> compact(compaction_request req,
                                                               abort_signal& abort) = 0;
};

/// The hook until a summariser exists: reports that it could not compact.
class unavailable_compaction final : public compaction_hook {
public:
    boost::asio::awaitable<compaction_outcome> compact(compaction_request req,
                                                       abort_signal& abort) override;
};

}  // namespace coagent

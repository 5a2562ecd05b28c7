#include <coagent/session/compaction.hpp>

namespace coagent {

boost::asio::awaitable<compaction_outcome> unavailable_compaction::compact(compaction_request,
                                                                           abort_signal&) {
    compaction_outcome o;
    o.ok = false;
    o.error_message =
        "Context overflow recovery failed: compaction is not available in this build. Reduce "
        "the context (start a new session) or switch to a model with a larger context window.";
    co_return o;
}

}  // namespace coagent

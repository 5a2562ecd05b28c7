#pragma once
// What a prompt does when the session is busy: the library's and the RPC protocol's
// streamingBehavior (docs/rpc.md has the three cases side by side).

namespace coagent {

/// What a prompt does when the session is busy (streaming or in a retry backoff).
enum class streaming_behavior {
    none,       ///< while a request streams: refused, with an error that says how to queue;
                ///< during a backoff: joins the conversation and the next attempt goes out now
    steer,      ///< joins the context before the next request
    follow_up,  ///< runs after the current prompt's work, before it settles
};

}  // namespace coagent

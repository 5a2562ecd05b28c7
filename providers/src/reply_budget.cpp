// The error texts of reply_budget (see reply_budget.hpp).

#include <coagent/providers/reply_budget.hpp>

namespace coagent::http_protocol {

std::string reply_budget::too_large_text() const {
    return "Reply too large: the provider streamed more than " + std::to_string(max_) +
           " bytes of text, tool-call names, ids and arguments (and " +
           std::to_string(block_bytes) + " a content block): the limit of one reply";
}

std::optional<std::string> reply_budget::field_error(std::string_view what, std::size_t size) {
    const std::size_t max = what == "name" ? max_tool_name_bytes : max_tool_id_bytes;
    if (size <= max) return std::nullopt;
    return "Invalid stream data from the provider: a tool-call " + std::string(what) + " of " +
           std::to_string(size) + " bytes is longer than " + std::to_string(max) +
           " bytes, the most a tool-call " + std::string(what) + " may have";
}

}  // namespace coagent::http_protocol

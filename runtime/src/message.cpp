#include <coagent/runtime/json_input.hpp>
#include <coagent/runtime/message.hpp>

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace coagent {

std::string_view to_string(message_role r) noexcept {
    switch (r) {
        case message_role::user: return "user";
        case message_role::assistant: return "assistant";
        case message_role::tool_result: return "toolResult";
    }
    return "user";
}

std::string_view to_string(stop_reason r) noexcept {
    switch (r) {
        case stop_reason::stop: return "stop";
        case stop_reason::length: return "length";
        case stop_reason::tool_use: return "toolUse";
        case stop_reason::error: return "error";
        case stop_reason::aborted: return "aborted";
    }
    return "stop";
}

std::optional<message_role> role_from_string(std::string_view s) noexcept {
    if (s == "user") return message_role::user;
    if (s == "assistant") return message_role::assistant;
    if (s == "toolResult") return message_role::tool_result;
    return std::nullopt;
}

std::optional<stop_reason> stop_reason_from_string(std::string_view s) noexcept {
    if (s == "stop") return stop_reason::stop;
    if (s == "length") return stop_reason::length;
    if (s == "toolUse") return stop_reason::tool_use;
    if (s == "error") return stop_reason::error;
    if (s == "aborted") return stop_reason::aborted;
    return std::nullopt;
}

std::int64_t wall_clock_ms() noexcept {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

message make_user_message(std::string text) {
    message m;
    m.role = message_role::user;
    m.content.emplace_back(text_block{std::move(text)});
    m.timestamp = wall_clock_ms();
    return m;
}

message make_tool_result(std::string tool_call_id, std::string tool_name, std::string text,
                         bool is_error) {
    message m;
    m.role = message_role::tool_result;
    m.content.emplace_back(text_block{std::move(text)});
    m.tool_call_id = std::move(tool_call_id);
    m.tool_name = std::move(tool_name);
    m.is_error = is_error;
    m.timestamp = wall_clock_ms();
    return m;
}

std::string text_of(const message& m) {
    std::string out;
    for (const auto& b : m.content)
        if (const auto* t = std::get_if<text_block>(&b)) out += t->text;
    return out;
}

bool is_failed_assistant(const message& m) noexcept {
    return m.role == message_role::assistant &&
           (m.stop == stop_reason::error || m.stop == stop_reason::aborted);
}

std::vector<const tool_call_block*> tool_calls_of(const message& m) {
    std::vector<const tool_call_block*> out;
    for (const auto& b : m.content)
        if (const auto* t = std::get_if<tool_call_block>(&b)) out.push_back(t);
    return out;
}

namespace {
// whole numbers as integers (JSON readers see 0, not 0E0); never a non-finite number (it would
// be written as `Infinity`): null instead, which reads back as 0
json::value number(double d) {
    if (!std::isfinite(d)) return nullptr;
    if (d > -9e15 && d < 9e15 && d == static_cast<double>(static_cast<std::int64_t>(d)))
        return static_cast<std::int64_t>(d);
    return d;
}
}  // namespace

json::object to_json(const token_usage& u) {
    json::object cost;
    cost["input"] = number(u.cost.input);
    cost["output"] = number(u.cost.output);
    cost["cacheRead"] = number(u.cost.cache_read);
    cost["cacheWrite"] = number(u.cost.cache_write);
    cost["total"] = number(u.cost.total);
    json::object o;
    o["input"] = u.input;
    o["output"] = u.output;
    o["cacheRead"] = u.cache_read;
    o["cacheWrite"] = u.cache_write;
    o["totalTokens"] = u.total_tokens;
    o["cost"] = std::move(cost);
    return o;
}

namespace {

json::array content_to_json(const std::vector<content_block>& content) {
    json::array arr;
    arr.reserve(content.size());
    for (const auto& b : content) {
        json::object o;
        if (const auto* t = std::get_if<text_block>(&b)) {
            o["type"] = "text";
            o["text"] = t->text;
        } else {
            const auto& c = std::get<tool_call_block>(b);
            o["type"] = "toolCall";
            o["id"] = c.id;
            o["name"] = c.name;
            o["arguments"] = c.arguments;
        }
        arr.emplace_back(std::move(o));
    }
    return arr;
}

[[noreturn]] void bad_field(std::string_view field, std::string_view expected) {
    throw std::invalid_argument("message field \"" + std::string(field) + "\": expected " +
                                std::string(expected));
}

const json::value* find(const json::object& o, std::string_view key) {
    auto it = o.find(key);
    return it == o.end() ? nullptr : &it->value();
}

std::string get_string(const json::object& o, std::string_view key, bool required) {
    const auto* v = find(o, key);
    if (!v || v->is_null()) {
        if (required) bad_field(key, "a string");
        return {};
    }
    if (!v->is_string()) bad_field(key, "a string");
    return std::string(v->get_string());
}

std::int64_t get_int(const json::object& o, std::string_view key) {
    const auto* v = find(o, key);
    if (!v || v->is_null()) return 0;
    if (auto n = saturating_int64(*v)) return *n;  // beyond int64: clamped
    bad_field(key, "a number");
}

double get_double(const json::object& o, std::string_view key) {
    const auto* v = find(o, key);
    if (!v || v->is_null()) return 0;
    if (v->is_number()) return v->to_number<double>();
    bad_field(key, "a number");
}

std::vector<content_block> content_from_json(const json::value& v) {
    std::vector<content_block> out;
    if (v.is_string()) {
        out.emplace_back(text_block{std::string(v.get_string())});
        return out;
    }
    if (!v.is_array()) bad_field("content", "a string or an array");
    for (const auto& item : v.get_array()) {
        if (!item.is_object()) bad_field("content[]", "an object");
        const auto& o = item.get_object();
        auto type = get_string(o, "type", true);
        if (type == "text") {
            out.emplace_back(text_block{get_string(o, "text", true)});
        } else if (type == "toolCall") {
            tool_call_block c;
            c.id = get_string(o, "id", true);
            c.name = get_string(o, "name", true);
            if (const auto* a = find(o, "arguments"); a && a->is_object()) c.arguments = a->get_object();
            out.emplace_back(std::move(c));
        }
        // other block types (images, thinking) are not used by coagent: skipped
    }
    return out;
}

}  // namespace

json::object to_json(const message& m) {
    json::object o;
    o["role"] = to_string(m.role);
    o["content"] = content_to_json(m.content);
    switch (m.role) {
        case message_role::user: break;
        case message_role::assistant:
            o["api"] = m.api;
            o["provider"] = m.provider;
            o["model"] = m.model;
            o["usage"] = to_json(m.usage);
            o["stopReason"] = to_string(m.stop);
            if (m.error_message) o["errorMessage"] = *m.error_message;
            if (m.error_status) o["errorStatus"] = *m.error_status;
            if (!m.error_type.empty()) o["errorType"] = m.error_type;
            if (m.should_retry) o["shouldRetry"] = *m.should_retry;
            break;
        case message_role::tool_result:
            o["toolCallId"] = m.tool_call_id;
            o["toolName"] = m.tool_name;
            o["isError"] = m.is_error;
            break;
    }
    o["timestamp"] = m.timestamp;
    return o;
}

message message_from_json(const json::value& v) {
    if (!v.is_object()) throw std::invalid_argument("message: expected a JSON object");
    const auto& o = v.get_object();
    message m;
    auto role = role_from_string(get_string(o, "role", true));
    if (!role) bad_field("role", "\"user\", \"assistant\" or \"toolResult\"");
    m.role = *role;
    if (const auto* c = find(o, "content")) m.content = content_from_json(*c);
    m.timestamp = get_int(o, "timestamp");
    if (m.role == message_role::assistant) {
        m.api = get_string(o, "api", false);
        m.provider = get_string(o, "provider", false);
        m.model = get_string(o, "model", false);
        auto stop = stop_reason_from_string(get_string(o, "stopReason", true));
        if (!stop) bad_field("stopReason", "one of stop, length, toolUse, error, aborted");
        m.stop = *stop;
        if (const auto* e = find(o, "errorMessage"); e && e->is_string())
            m.error_message = std::string(e->get_string());
        if (const auto* s = find(o, "errorStatus"); s && s->is_int64() && s->get_int64() >= 0 && s->get_int64() <= 999)
            m.error_status = static_cast<int>(s->get_int64());
        m.error_type = get_string(o, "errorType", false);
        if (const auto* r = find(o, "shouldRetry"); r && r->is_bool()) m.should_retry = r->get_bool();
        if (const auto* u = find(o, "usage"); u && u->is_object()) {
            const auto& uo = u->get_object();
            m.usage.input = get_int(uo, "input");
            m.usage.output = get_int(uo, "output");
            m.usage.cache_read = get_int(uo, "cacheRead");
            m.usage.cache_write = get_int(uo, "cacheWrite");
            m.usage.total_tokens = get_int(uo, "totalTokens");
            if (const auto* c = find(uo, "cost"); c && c->is_object()) {
                const auto& co = c->get_object();
                m.usage.cost = {get_double(co, "input"), get_double(co, "output"),
                                get_double(co, "cacheRead"), get_double(co, "cacheWrite"),
                                get_double(co, "total")};
            }
        }
    } else if (m.role == message_role::tool_result) {
        m.tool_call_id = get_string(o, "toolCallId", true);
        m.tool_name = get_string(o, "toolName", false);
        if (const auto* e = find(o, "isError"); e && e->is_bool()) m.is_error = e->get_bool();
    }
    return m;
}

json::object to_json(const model_info& m) {
    json::object o;
    o["provider"] = m.provider;
    o["id"] = m.id;
    o["api"] = m.api;
    o["contextWindow"] = m.context_window;
    o["maxTokens"] = m.max_tokens;
    return o;
}

}  // namespace coagent

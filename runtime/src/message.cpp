#include <coagent/runtime/json_input.hpp>
#include <coagent/runtime/json_text.hpp>
#include <coagent/runtime/message.hpp>

#include <boost/json/parse.hpp>

#include <chrono>
#include <cmath>
#include <stdexcept>

namespace coagent {

std::string_view to_string(message_role r) noexcept {
    switch (r) {
        case message_role::user:
            return "user";
        case message_role::assistant:
            return "assistant";
        case message_role::tool_result:
            return "toolResult";
    }
    return "user";
}

std::string_view to_string(stop_reason r) noexcept {
    switch (r) {
        case stop_reason::stop:
            return "stop";
        case stop_reason::length:
            return "length";
        case stop_reason::tool_use:
            return "toolUse";
        case stop_reason::error:
            return "error";
        case stop_reason::aborted:
            return "aborted";
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

message make_user_message(std::string text, std::vector<image_block> images) {
    message m = make_user_message(std::move(text));
    m.content.reserve(1 + images.size());
    for (auto& i : images) m.content.emplace_back(std::move(i));
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

std::optional<std::string> image_error(const image_block& image) {
    const std::string_view mime = image.mime_type;
    if (!mime.starts_with("image/") || mime.size() == 6)
        return "mimeType \"" + std::string(mime.substr(0, 80)) +
               "\" is not an image type (image/png, image/jpeg, image/gif, image/webp)";
    const std::string_view d = image.data;
    if (d.empty()) return std::string("data is empty (base64 of the image expected)");
    std::size_t end = d.size();
    while (end > 0 && d.size() - end < 2 && d[end - 1] == '=') --end;
    for (std::size_t i = 0; i < d.size(); ++i) {
        const char c = d[i];
        const bool ok = i >= end ? c == '='
                                 : ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                                    (c >= '0' && c <= '9') || c == '+' || c == '/');
        if (!ok) return "data is not base64 (byte " + std::to_string(i) + ")";
    }
    return std::nullopt;
}

std::string base64_encode(std::string_view bytes) {
    static constexpr char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    std::size_t i = 0;
    const auto at = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
    for (; i + 2 < bytes.size(); i += 3) {
        const unsigned v = (at(i) << 16) | (at(i + 1) << 8) | at(i + 2);
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += alphabet[v & 63];
    }
    if (i + 1 == bytes.size()) {
        const unsigned v = at(i) << 16;
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == bytes.size()) {
        const unsigned v = (at(i) << 16) | (at(i + 1) << 8);
        out += alphabet[(v >> 18) & 63];
        out += alphabet[(v >> 12) & 63];
        out += alphabet[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

std::size_t image_count(const message& m) noexcept {
    std::size_t n = 0;
    for (const auto& b : m.content) n += std::holds_alternative<image_block>(b) ? 1 : 0;
    return n;
}

std::vector<const tool_call_block*> tool_calls_of(const message& m) {
    std::vector<const tool_call_block*> out;
    for (const auto& b : m.content)
        if (const auto* t = std::get_if<tool_call_block>(&b)) out.push_back(t);
    return out;
}

namespace {
namespace jt = json_text;

// whole numbers as integers (JSON readers see 0, not 0E0); never a non-finite number (it would
// be written as `Infinity`): null instead, which reads back as 0
void append_number(std::string& out, double d) {
    if (!std::isfinite(d)) {
        out += "null";
    } else if (d > -9e15 && d < 9e15 && d == static_cast<double>(static_cast<std::int64_t>(d))) {
        jt::append_int(out, static_cast<std::int64_t>(d));
    } else {
        jt::append_value(out, json::value(d));
    }
}

void append_content(std::string& out, const std::vector<content_block>& content) {
    out.push_back('[');
    for (std::size_t i = 0; i < content.size(); ++i) {
        if (i) out.push_back(',');
        if (const auto* t = std::get_if<text_block>(&content[i])) {
            out += R"({"type":"text","text":)";
            jt::append_string(out, t->text);
        } else if (const auto* c = std::get_if<tool_call_block>(&content[i])) {
            out += R"({"type":"toolCall","id":)";
            jt::append_string(out, c->id);
            out += R"(,"name":)";
            jt::append_string(out, c->name);
            out += R"(,"arguments":)";
            jt::append_value(out, c->arguments);
        } else if (const auto* im = std::get_if<image_block>(&content[i])) {
            out += R"({"type":"image","data":)";
            jt::append_string(out, im->data);
            jt::field(out, "mimeType", im->mime_type);
        } else {
            const auto& th = std::get<thinking_block>(content[i]);
            out += R"({"type":"thinking","thinking":)";
            jt::append_string(out, th.thinking);
            if (th.signature) jt::field(out, "thinkingSignature", *th.signature);
            if (th.redacted) jt::field_bool(out, "redacted", true);
        }
        out.push_back('}');
    }
    out.push_back(']');
}

json::object parsed_object(const std::string& text) {
    return json::parse(text).as_object();
}
}  // namespace

void append_json(std::string& out, const token_usage& u) {
    // a reply's usage is zero until its last chunk, and every message_update carries it
    if (u.input == 0 && u.output == 0 && u.cache_read == 0 && u.cache_write == 0 &&
        u.total_tokens == 0 && u.cost.input == 0 && u.cost.output == 0 && u.cost.cache_read == 0 &&
        u.cost.cache_write == 0 && u.cost.total == 0) {
        out += R"({"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,)"
               R"("cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}})";
        return;
    }
    out += R"({"input":)";
    jt::append_int(out, u.input);
    jt::field_int(out, "output", u.output);
    jt::field_int(out, "cacheRead", u.cache_read);
    jt::field_int(out, "cacheWrite", u.cache_write);
    jt::field_int(out, "totalTokens", u.total_tokens);
    out += R"(,"cost":{"input":)";
    append_number(out, u.cost.input);
    for (const auto& [key, v] :
         {std::pair{"output", u.cost.output}, std::pair{"cacheRead", u.cost.cache_read},
          std::pair{"cacheWrite", u.cost.cache_write}, std::pair{"total", u.cost.total}}) {
        out.push_back(',');
        jt::append_key(out, key);
        append_number(out, v);
    }
    out += "}}";
}

void append_json(std::string& out, const message& m) {
    out += R"({"role":")";
    out += to_string(m.role);
    out += R"(","content":)";
    append_content(out, m.content);
    switch (m.role) {
        case message_role::user:
            break;
        case message_role::assistant:
            jt::field(out, "api", m.api);
            jt::field(out, "provider", m.provider);
            jt::field(out, "model", m.model);
            out += R"(,"usage":)";
            append_json(out, m.usage);
            jt::field(out, "stopReason", to_string(m.stop));
            if (m.error_message) jt::field(out, "errorMessage", *m.error_message);
            if (m.error_status) jt::field_int(out, "errorStatus", *m.error_status);
            if (!m.error_type.empty()) jt::field(out, "errorType", m.error_type);
            if (m.should_retry) jt::field_bool(out, "shouldRetry", *m.should_retry);
            break;
        case message_role::tool_result:
            jt::field(out, "toolCallId", m.tool_call_id);
            jt::field(out, "toolName", m.tool_name);
            jt::field_bool(out, "isError", m.is_error);
            break;
    }
    jt::field_int(out, "timestamp", m.timestamp);
    out.push_back('}');
}

json::object to_json(const token_usage& u) {
    std::string text;
    append_json(text, u);
    return parsed_object(text);
}

json::object to_json(const message& m) {
    std::string text;
    append_json(text, m);
    return parsed_object(text);
}

namespace {

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
            if (const auto* a = find(o, "arguments"); a && a->is_object())
                c.arguments = a->get_object();
            out.emplace_back(std::move(c));
        } else if (type == "image") {
            image_block im;
            im.data = get_string(o, "data", true);
            im.mime_type = get_string(o, "mimeType", true);
            out.emplace_back(std::move(im));
        } else if (type == "thinking") {
            thinking_block th;
            th.thinking = get_string(o, "thinking", false);
            if (const auto* s = find(o, "thinkingSignature"); s && !s->is_null()) {
                if (!s->is_string()) bad_field("thinkingSignature", "a string");
                th.signature = std::string(s->get_string());
            }
            if (const auto* r = find(o, "redacted"); r && r->is_bool()) th.redacted = r->get_bool();
            out.emplace_back(std::move(th));
        }
        // other block types (the reference's extensions' own) are not used by coagent: skipped
    }
    return out;
}

}  // namespace

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
        if (const auto* s = find(o, "errorStatus");
            s && s->is_int64() && s->get_int64() >= 0 && s->get_int64() <= 999)
            m.error_status = static_cast<int>(s->get_int64());
        m.error_type = get_string(o, "errorType", false);
        if (const auto* r = find(o, "shouldRetry"); r && r->is_bool())
            m.should_retry = r->get_bool();
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
    o["id"] = m.id;
    o["name"] = m.name.empty() ? m.id : m.name;
    o["api"] = m.api;
    o["provider"] = m.provider;
    o["baseUrl"] = m.base_url;
    o["reasoning"] = m.reasoning;
    json::array input{"text"};
    if (m.image_input) input.emplace_back("image");
    o["input"] = std::move(input);
    // a whole price as an integer (`3`, not `3E0`), as the reference writes it
    const auto price = [](double d) {
        if (d == std::floor(d) && std::fabs(d) < 9.0e15)
            return json::value(static_cast<std::int64_t>(d));
        return json::value(d);
    };
    json::object cost;
    cost["input"] = price(m.cost.input);
    cost["output"] = price(m.cost.output);
    cost["cacheRead"] = price(m.cost.cache_read);
    cost["cacheWrite"] = price(m.cost.cache_write);
    o["cost"] = std::move(cost);
    o["contextWindow"] = m.context_window;
    o["maxTokens"] = m.max_tokens;
    return o;
}

}  // namespace coagent

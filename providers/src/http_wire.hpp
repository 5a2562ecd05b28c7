#pragma once
// What the wire formats of the HTTP providers share (see http_protocol.hpp), private to
// providers/: text helpers, the request-body pieces the APIs write, the decoder helpers, and
// the three APIs' bodies and decoders (http_openai.cpp, http_openai_responses.cpp,
// http_anthropic.cpp). Inline, so each
// body writer still inlines its pieces.

#include <coagent/providers/http_protocol.hpp>
#include <coagent/runtime/json_input.hpp>
#include <coagent/runtime/json_text.hpp>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <string_view>

namespace coagent::http_protocol::detail {

inline bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

inline std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// A non-negative decimal number ("1", "1.5"); nullopt otherwise.
inline std::optional<double> parse_number(std::string_view s) noexcept {
    s = trim(s);
    if (s.empty()) return std::nullopt;
    for (char c : s)
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) return std::nullopt;
    double d = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec != std::errc{} || p != s.data() + s.size() || !std::isfinite(d)) return std::nullopt;
    return d;
}

inline std::int64_t ceil_ms(double ms) noexcept {
    if (!(ms > 0)) return 0;
    if (ms >= 9.2e18) return int64_max;
    return static_cast<std::int64_t>(std::ceil(ms));
}

inline std::string compact_json(const json::value& v, std::size_t max_len = 1000) {
    return cut_utf8(json::serialize(v), max_len + 3);  // max_len bytes, then "..."
}

// The message of an error object ({"message":…,"type":…,"code":…}) with its type.
inline void error_from_object(const json::object& e, std::string& message, std::string& type) {
    if (const auto* m = e.if_contains("message"))
        message = m->is_string() ? std::string(m->get_string()) : compact_json(*m);
    if (const auto* t = e.if_contains("type"); t && t->is_string()) type = t->get_string();
    if (type.empty())
        if (const auto* c = e.if_contains("code"); c && c->is_string()) type = c->get_string();
}

// Request bodies are written as text in one buffer: rebuilding the whole context as a JSON DOM
// for every request was most of a long conversation's CPU (docs/benchmarks.md).
namespace jt = json_text;

// {"role":…,"content":"…"}
inline void role_text(std::string& out, std::string_view role, std::string_view text) {
    out += "{\"role\":";
    jt::append_string(out, role);
    out += ",\"content\":";
    jt::append_string(out, text);
    out.push_back('}');
}

// the text of a message's text blocks, concatenated (text_of without the copy when there is one)
template <class F>
inline void with_text(const message& m, F&& f) {
    const text_block* only = nullptr;
    int blocks = 0;
    for (const auto& b : m.content)
        if (const auto* t = std::get_if<text_block>(&b)) {
            only = t;
            ++blocks;
        }
    if (blocks == 0) {
        f(std::string_view());
    } else if (blocks == 1) {
        f(std::string_view(only->text));
    } else {
        f(std::string_view(text_of(m)));
    }
}

// {"type":"image","source":{"type":"base64","media_type":…,"data":…}} (Anthropic Messages)
inline void anthropic_image(std::string& out, const image_block& im) {
    out += R"({"type":"image","source":{"type":"base64","media_type":)";
    jt::append_string(out, im.mime_type);
    out += R"(,"data":)";
    jt::append_string(out, im.data);
    out += "}}";
}

// an image as the JSON string "data:<mime>;base64,<data>" (both OpenAI APIs)
inline void append_data_url(std::string& out, const image_block& im) {
    std::string url;
    url.reserve(im.mime_type.size() + im.data.size() + 13);
    url += "data:";
    url += im.mime_type;
    url += ";base64,";
    url += im.data;
    jt::append_string(out, url);
}

// {"type":"image_url","image_url":{"url":"data:<mime>;base64,<data>"}} (OpenAI chat)
inline void openai_image(std::string& out, const image_block& im) {
    out += R"({"type":"image_url","image_url":{"url":)";
    append_data_url(out, im);
    out += "}}";
}

inline void schema_or_empty(std::string& out, const json::object& o) {
    if (o.empty()) {
        out += R"({"type":"object","properties":{}})";
        return;
    }
    jt::append_value(out, o);
}

// ,"tools":[<open>"name":…,"description":…,"<schema_key>":…<close>,…] (nothing without tools)
inline void append_tools(std::string& out, const std::vector<tool_definition>& tools,
                         std::string_view open, std::string_view schema_key,
                         std::string_view close) {
    if (tools.empty()) return;
    out += ",\"tools\":[";
    for (std::size_t i = 0; i < tools.size(); ++i) {
        if (i) out.push_back(',');
        out += open;
        out += "\"name\":";
        jt::append_string(out, tools[i].name);
        out += ",\"description\":";
        jt::append_string(out, tools[i].description);
        out.push_back(',');
        jt::append_key(out, schema_key);
        schema_or_empty(out, tools[i].parameters);
        out += close;
    }
    out.push_back(']');
}

// The format (wire_fragments) of a message whose text depends on the model (its own reasoning is
// sent back, another's is not): FNV-1a over the API and the model's provider, api and id, once
// per request; fragment_format() adds what else the text depends on.
inline std::uint64_t model_fragment_format(api_kind k, const model_info& model) {
    std::uint64_t h = 14695981039346656037ull ^ static_cast<std::uint64_t>(k);
    for (const std::string* s : {&model.provider, &model.api, &model.id}) {
        for (const unsigned char ch : *s) {
            h ^= ch;
            h *= 1099511628211ull;
        }
        h ^= 0xff;
        h *= 1099511628211ull;
    }
    return h;
}
// model_fragment_format's `model` and `salt`, with the high bit set (never an API's small number)
inline std::uint64_t fragment_format(std::uint64_t model, std::uint64_t salt) noexcept {
    return (model ^ salt * 0x9e3779b97f4a7c15ull) | (std::uint64_t{1} << 63);
}

// Message `i` of `req` into `out`: the text kept for it by an earlier request of the
// conversation (req.fragments, same message, same `format`), else what `write` writes, kept
// for the next request unless it is the newest message. `write` must not depend on the other
// messages (no separators: those stay with the caller).
template <class Write>
void append_message(std::string& out, const provider_request& req, std::size_t i,
                    std::uint64_t format, Write&& write) {
    const message_ptr& m = req.messages[i];
    if (req.fragments) {
        if (const std::string* kept = req.fragments->find(i, m, format)) {
            out += *kept;
            return;
        }
    }
    const std::size_t start = out.size();
    write(*m);
    if (req.fragments && i + 1 < req.messages.size())
        req.fragments->keep(i, m, format, std::string_view(out).substr(start));
}

inline std::size_t body_size_hint(const provider_request& req) {
    std::size_t n = 256 + req.system_prompt.size();
    for (const auto& m : req.messages) {
        n += 64;
        for (const auto& b : m->content)
            if (const auto* t = std::get_if<text_block>(&b))
                n += t->text.size() + t->text.size() / 16;
            else if (const auto* im = std::get_if<image_block>(&b))
                n += im->data.size() + 96;
            else if (const auto* th = std::get_if<thinking_block>(&b))
                n += th->thinking.size() + th->thinking.size() / 16 +
                     (th->signature ? th->signature->size() : 0) + 64;
    }
    return n;
}

// A count from the provider: a number saturated to [0, INT64_MAX], else 0.
inline std::int64_t int_of(const json::value* v) noexcept {
    if (!v) return 0;
    return std::max<std::int64_t>(0, saturating_int64(*v).value_or(0));
}

// Tool-call argument deltas reach observers that know them; others see only the message.
template <typename Observer>
inline void notify_tool_delta(Observer& o, const message& m, std::string_view delta) {
    if constexpr (requires { o.on_tool_call_delta(m, delta); }) o.on_tool_call_delta(m, delta);
}

inline std::string stream_error_text(std::string message, const std::string& type) {
    if (message.empty()) message = "unknown error";
    if (!type.empty() && message.find(type) == std::string::npos) return type + ": " + message;
    return message;
}

/// The request body of one streamed request (http_openai.cpp, http_anthropic.cpp).
std::string openai_body(const provider_request& req);
std::string anthropic_body(const provider_request& req);
std::string openai_responses_body(const provider_request& req);
/// Anthropic's `thinking.budget_tokens` for `level` (the reference's budgets: minimal 1024, low
/// 2048, medium 8192, high and xhigh 16384), at most max_tokens - 1024; nullopt (no thinking
/// sent) for off, or when max_tokens leaves no room for the API's minimum of 1024.
std::optional<std::int64_t> thinking_budget(thinking_level level, std::int64_t max_tokens);
/// OpenAI's `reasoning_effort` for `level`: minimal, low, medium, high (xhigh is sent as high);
/// nullopt for off.
std::optional<std::string_view> reasoning_effort(thinking_level level);
/// The stream decoder of each API.
std::unique_ptr<stream_decoder> make_openai_decoder();
std::unique_ptr<stream_decoder> make_anthropic_decoder();
std::unique_ptr<stream_decoder> make_openai_responses_decoder();

}  // namespace coagent::http_protocol::detail

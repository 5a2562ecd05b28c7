// Wire formats of the HTTP providers (see http_protocol.hpp). Pure functions and small state
// machines: unit-testable without sockets.

#include <coagent/providers/http_protocol.hpp>
#include <coagent/runtime/json_input.hpp>
#include <coagent/runtime/json_text.hpp>

#include <boost/asio/ip/address.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>

namespace coagent::http_protocol {

namespace {

bool iequals(std::string_view a, std::string_view b) noexcept {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) ==
                      std::tolower(static_cast<unsigned char>(y));
           });
}

std::string_view trim(std::string_view s) noexcept {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

// A non-negative decimal number ("1", "1.5"); nullopt otherwise.
std::optional<double> parse_number(std::string_view s) noexcept {
    s = trim(s);
    if (s.empty()) return std::nullopt;
    for (char c : s)
        if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.')) return std::nullopt;
    double d = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (ec != std::errc{} || p != s.data() + s.size() || !std::isfinite(d)) return std::nullopt;
    return d;
}

std::int64_t ceil_ms(double ms) noexcept {
    if (!(ms > 0)) return 0;
    if (ms >= 9.2e18) return int64_max;
    return static_cast<std::int64_t>(std::ceil(ms));
}

std::int64_t sat_sub(std::int64_t a, std::int64_t b) noexcept {
    if (b < 0 && a > int64_max + b) return int64_max;
    if (b > 0 && a < std::numeric_limits<std::int64_t>::min() + b)
        return std::numeric_limits<std::int64_t>::min();
    return a - b;
}

// days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) noexcept {
    y -= m <= 2;
    const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
    const unsigned yoe = static_cast<unsigned>(y - era * 400);
    const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

std::optional<unsigned> month_of(std::string_view m) noexcept {
    static constexpr std::string_view names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                                 "jul", "aug", "sep", "oct", "nov", "dec"};
    for (unsigned i = 0; i < 12; ++i)
        if (iequals(m, names[i])) return i + 1;
    return std::nullopt;
}

std::optional<int> digits(std::string_view s) noexcept {
    if (s.empty() || s.size() > 4) return std::nullopt;
    int v = 0;
    for (char c : s) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
        v = v * 10 + (c - '0');
    }
    return v;
}

std::vector<std::string_view> split_ws(std::string_view s) {
    std::vector<std::string_view> out;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && s[i] == ' ') ++i;
        std::size_t j = i;
        while (j < s.size() && s[j] != ' ') ++j;
        if (j > i) out.push_back(s.substr(i, j - i));
        i = j;
    }
    return out;
}

std::optional<std::int64_t> make_time(int year, unsigned month, int day,
                                      std::string_view hms) noexcept {
    if (hms.size() != 8 || hms[2] != ':' || hms[5] != ':') return std::nullopt;
    auto h = digits(hms.substr(0, 2)), mi = digits(hms.substr(3, 2)), se = digits(hms.substr(6, 2));
    if (!h || !mi || !se || *h > 23 || *mi > 59 || *se > 60 || day < 1 || day > 31)
        return std::nullopt;
    const std::int64_t days = days_from_civil(year, month, static_cast<unsigned>(day));
    return (days * 86400 + *h * 3600 + *mi * 60 + *se) * 1000;
}

std::string compact_json(const json::value& v, std::size_t max_len = 1000) {
    return cut_utf8(json::serialize(v), max_len + 3);  // max_len bytes, then "..."
}

// The message of an error object ({"message":…,"type":…,"code":…}) with its type.
void error_from_object(const json::object& e, std::string& message, std::string& type) {
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
void role_text(std::string& out, std::string_view role, std::string_view text) {
    out += "{\"role\":";
    jt::append_string(out, role);
    out += ",\"content\":";
    jt::append_string(out, text);
    out.push_back('}');
}

// the text of a message's text blocks, concatenated (text_of without the copy when there is one)
template <class F>
void with_text(const message& m, F&& f) {
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

void schema_or_empty(std::string& out, const json::object& o) {
    if (o.empty()) {
        out += R"({"type":"object","properties":{}})";
        return;
    }
    jt::append_value(out, o);
}

// ,"tools":[<open>"name":…,"description":…,"<schema_key>":…<close>,…] (nothing without tools)
void append_tools(std::string& out, const std::vector<tool_definition>& tools,
                  std::string_view open, std::string_view schema_key, std::string_view close) {
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

std::size_t body_size_hint(const provider_request& req) {
    std::size_t n = 256 + req.system_prompt.size();
    for (const auto& m : req.messages) {
        n += 64;
        for (const auto& b : m->content)
            if (const auto* t = std::get_if<text_block>(&b))
                n += t->text.size() + t->text.size() / 16;
    }
    return n;
}

std::string openai_body(const provider_request& req) {
    std::string out;
    out.reserve(body_size_hint(req));
    out += "{\"model\":";
    jt::append_string(out, req.model.id);
    out += ",\"messages\":[";
    bool first = true;
    const auto next = [&] {
        if (!first) out.push_back(',');
        first = false;
    };
    if (!req.system_prompt.empty()) {
        next();
        role_text(out, "system", req.system_prompt);
    }
    for (const auto& mp : req.messages) {
        const message& m = *mp;
        next();
        switch (m.role) {
            case message_role::user:
                with_text(m, [&](std::string_view t) { role_text(out, "user", t); });
                break;
            case message_role::assistant: {
                const auto calls = tool_calls_of(m);
                out += "{\"role\":\"assistant\",\"content\":";
                with_text(m, [&](std::string_view t) {
                    if (t.empty() && !calls.empty())
                        out += "null";
                    else
                        jt::append_string(out, t);
                });
                if (!calls.empty()) {
                    out += ",\"tool_calls\":[";
                    for (std::size_t i = 0; i < calls.size(); ++i) {
                        if (i) out.push_back(',');
                        out += "{\"id\":";
                        jt::append_string(out, calls[i]->id);
                        out += ",\"type\":\"function\",\"function\":{\"name\":";
                        jt::append_string(out, calls[i]->name);
                        out += ",\"arguments\":";
                        jt::append_string(out, json::serialize(calls[i]->arguments));
                        out += "}}";
                    }
                    out.push_back(']');
                }
                out.push_back('}');
                break;
            }
            case message_role::tool_result:
                out += "{\"role\":\"tool\",\"tool_call_id\":";
                jt::append_string(out, m.tool_call_id);
                out += ",\"content\":";
                with_text(m, [&](std::string_view t) { jt::append_string(out, t); });
                out.push_back('}');
                break;
        }
    }
    out += "],\"stream\":true,\"stream_options\":{\"include_usage\":true}";
    append_tools(out, req.tools, R"({"type":"function","function":{)", "parameters", "}}");
    out.push_back('}');
    return out;
}

std::string anthropic_body(const provider_request& req) {
    std::string out;
    out.reserve(body_size_hint(req));
    out += "{\"model\":";
    jt::append_string(out, req.model.id);
    out += ",\"max_tokens\":";
    jt::append_int(out, req.model.max_tokens > 0 ? req.model.max_tokens : 4096);
    if (!req.system_prompt.empty()) {
        out += ",\"system\":";
        jt::append_string(out, req.system_prompt);
    }
    out += ",\"messages\":[";
    bool first_message = true;
    bool in_results = false;  // consecutive tool results go into one user message
    const auto open_message = [&](std::string_view role) {
        if (!first_message) out.push_back(',');
        first_message = false;
        out += "{\"role\":\"";
        out += role;
        out += "\",\"content\":[";
    };
    const auto flush_results = [&] {
        if (!in_results) return;
        out += "]}";
        in_results = false;
    };
    for (const auto& mp : req.messages) {
        const message& m = *mp;
        if (m.role == message_role::tool_result) {
            if (!in_results) {
                open_message("user");
                in_results = true;
            } else {
                out.push_back(',');
            }
            out += "{\"type\":\"tool_result\",\"tool_use_id\":";
            jt::append_string(out, m.tool_call_id);
            out += ",\"content\":";
            with_text(m, [&](std::string_view t) { jt::append_string(out, t); });
            if (m.is_error) out += ",\"is_error\":true";
            out.push_back('}');
            continue;
        }
        flush_results();
        bool any = false;
        for (const auto& b : m.content) {
            if (const auto* t = std::get_if<text_block>(&b)) {
                if (!t->text.empty()) any = true;  // the API rejects empty text blocks
            } else if (std::holds_alternative<tool_call_block>(b)) {
                any = true;
            }
        }
        if (!any && m.role == message_role::assistant) continue;
        open_message(m.role == message_role::assistant ? "assistant" : "user");
        bool first_block = true;
        for (const auto& b : m.content) {
            if (const auto* t = std::get_if<text_block>(&b)) {
                if (t->text.empty()) continue;
                if (!first_block) out.push_back(',');
                first_block = false;
                out += "{\"type\":\"text\",\"text\":";
                jt::append_string(out, t->text);
                out.push_back('}');
            } else if (const auto* c = std::get_if<tool_call_block>(&b)) {
                if (!first_block) out.push_back(',');
                first_block = false;
                out += "{\"type\":\"tool_use\",\"id\":";
                jt::append_string(out, c->id);
                out += ",\"name\":";
                jt::append_string(out, c->name);
                out += ",\"input\":";
                jt::append_value(out, c->arguments);
                out.push_back('}');
            }
        }
        if (!any) out += R"({"type":"text","text":" "})";
        out += "]}";
    }
    flush_results();
    out += "],\"stream\":true";
    append_tools(out, req.tools, "{", "input_schema", "}");
    out.push_back('}');
    return out;
}

// A count from the provider: a number saturated to [0, INT64_MAX], else 0.
std::int64_t int_of(const json::value* v) noexcept {
    if (!v) return 0;
    return std::max<std::int64_t>(0, saturating_int64(*v).value_or(0));
}

// Tool-call argument deltas reach observers that know them; others see only the message.
template <typename Observer>
void notify_tool_delta(Observer& o, const message& m, std::string_view delta) {
    if constexpr (requires { o.on_tool_call_delta(m, delta); }) o.on_tool_call_delta(m, delta);
}

std::string stream_error_text(std::string message, const std::string& type) {
    if (message.empty()) message = "unknown error";
    if (!type.empty() && message.find(type) == std::string::npos) return type + ": " + message;
    return message;
}

class openai_decoder final : public stream_decoder {
  public:
    void on_event(const sse_event& ev, message& out, stream_observer& observer) override {
        if (state_ != state::streaming) return;
        if (ev.data == "[DONE]") {
            done(out);
            return;
        }
        const json::object* obj = parse_event(ev, out);
        if (!obj) return;
        const auto& o = *obj;
        if (const auto* e = o.if_contains("error")) {
            std::string msg, type;
            if (e->is_object())
                error_from_object(e->get_object(), msg, type);
            else
                msg = e->is_string() ? std::string(e->get_string()) : compact_json(*e);
            fail(out, stream_error_text(std::move(msg), type), type);
            return;
        }
        if (const auto* u = o.if_contains("usage"); u && u->is_object()) {
            const auto& uo = u->get_object();
            const std::int64_t prompt = int_of(uo.if_contains("prompt_tokens"));
            std::int64_t cached = 0;
            if (const auto* d = uo.if_contains("prompt_tokens_details"); d && d->is_object())
                cached = int_of(d->get_object().if_contains("cached_tokens"));
            out.usage.cache_read = std::min(cached, prompt);
            out.usage.input = prompt - out.usage.cache_read;
            out.usage.output = int_of(uo.if_contains("completion_tokens"));
            out.usage.total_tokens = saturating_add(prompt, out.usage.output);
        }
        const auto* choices = o.if_contains("choices");
        if (!choices || !choices->is_array() || choices->get_array().empty()) return;
        const auto& ch0 = choices->get_array()[0];
        if (!ch0.is_object()) return;
        const auto& choice = ch0.get_object();
        if (const auto* d = choice.if_contains("delta"); d && d->is_object()) {
            const auto& delta = d->get_object();
            if (const auto* c = delta.if_contains("content");
                c && c->is_string() && !c->get_string().empty()) {
                const std::string_view piece = c->get_string();
                if (out.content.empty() ||
                    !std::holds_alternative<text_block>(out.content.back())) {
                    if (!new_block(out)) return;
                    out.content.emplace_back(text_block{});
                }
                if (!grow(out, piece.size())) return;
                std::get<text_block>(out.content.back()).text.append(piece);
                observer.on_text_delta(out, piece);
            }
            if (const auto* tcs = delta.if_contains("tool_calls"); tcs && tcs->is_array()) {
                for (const auto& tcv : tcs->get_array()) {
                    if (!tcv.is_object()) continue;
                    const auto& tc = tcv.get_object();
                    const std::int64_t idx = int_of(tc.if_contains("index"));
                    auto it = by_index_.find(idx);
                    if (it == by_index_.end()) {
                        if (!new_block(out)) return;
                        out.content.emplace_back(tool_call_block{});
                        it = by_index_.emplace(idx, out.content.size() - 1).first;
                        tool_args_[it->second];
                    }
                    auto& block = std::get<tool_call_block>(out.content[it->second]);
                    if (const auto* id = tc.if_contains("id");
                        id && id->is_string() && !id->get_string().empty() &&
                        !set_tool_field(out, block.id, id->get_string(), "id"))
                        return;
                    if (const auto* fn = tc.if_contains("function"); fn && fn->is_object()) {
                        const auto& f = fn->get_object();
                        if (const auto* n = f.if_contains("name");
                            n && n->is_string() && !n->get_string().empty() &&
                            !set_tool_field(out, block.name, n->get_string(), "name"))
                            return;
                        if (const auto* a = f.if_contains("arguments");
                            a && a->is_string() && !a->get_string().empty()) {
                            if (!grow(out, a->get_string().size())) return;
                            tool_args_[it->second].append(a->get_string());
                            notify_tool_delta(observer, out, a->get_string());
                        }
                    }
                }
            }
        }
        if (const auto* f = choice.if_contains("finish_reason"); f && f->is_string())
            finish_reason_ = f->get_string();
    }

    void on_end(message& out) override {
        if (state_ != state::streaming) return;
        if (!finish_reason_.empty()) {
            done(out);  // some compatible servers end without [DONE]
            return;
        }
        fail(out, "Stream ended without a finish reason (the response was incomplete)");
    }

  private:
    void done(message& out) {
        if (!finish_text_and_tools(out)) return;
        if (finish_reason_ == "length") {
            out.stop = stop_reason::length;
        } else if (finish_reason_ == "tool_calls" || finish_reason_ == "function_call") {
            out.stop = stop_reason::tool_use;
        } else if (finish_reason_ == "content_filter") {
            fail(out, "Provider finish_reason: content_filter");
            return;
        } else {
            out.stop = stop_reason::stop;
        }
        if (out.stop == stop_reason::stop && !by_index_.empty()) out.stop = stop_reason::tool_use;
        state_ = state::done;
    }

    std::string finish_reason_;
    std::map<std::int64_t, std::size_t> by_index_;  // tool_calls[].index → content index
};

class anthropic_decoder final : public stream_decoder {
  public:
    void on_event(const sse_event& ev, message& out, stream_observer& observer) override {
        if (state_ != state::streaming) return;
        const json::object* obj = parse_event(ev, out);
        if (!obj) return;
        const auto& o = *obj;
        std::string_view type = ev.type;
        if (const auto* t = o.if_contains("type"); t && t->is_string()) type = t->get_string();

        if (type == "message_start") {
            if (const auto* m = o.if_contains("message"); m && m->is_object())
                if (const auto* u = m->get_object().if_contains("usage"); u && u->is_object())
                    usage(u->get_object(), out);
        } else if (type == "content_block_start") {
            const std::int64_t idx = int_of(o.if_contains("index"));
            const auto* cb = o.if_contains("content_block");
            if (!cb || !cb->is_object()) return;
            const auto& b = cb->get_object();
            const auto* bt = b.if_contains("type");
            if (!bt || !bt->is_string()) return;
            if (bt->get_string() == "text") {
                if (!new_block(out)) return;
                text_block t;
                if (const auto* s = b.if_contains("text"); s && s->is_string()) {
                    if (!grow(out, s->get_string().size())) return;
                    t.text = s->get_string();
                }
                out.content.emplace_back(std::move(t));
                blocks_[idx] = out.content.size() - 1;
            } else if (bt->get_string() == "tool_use") {
                if (!new_block(out)) return;
                tool_call_block c;
                if (const auto* s = b.if_contains("id");
                    s && s->is_string() && !set_tool_field(out, c.id, s->get_string(), "id"))
                    return;
                if (const auto* s = b.if_contains("name");
                    s && s->is_string() && !set_tool_field(out, c.name, s->get_string(), "name"))
                    return;
                out.content.emplace_back(std::move(c));
                blocks_[idx] = out.content.size() - 1;
                tool_args_[out.content.size() - 1];
            }
            // thinking / redacted_thinking / server tool blocks are not modelled: skipped
        } else if (type == "content_block_delta") {
            auto it = blocks_.find(int_of(o.if_contains("index")));
            const auto* d = o.if_contains("delta");
            if (it == blocks_.end() || !d || !d->is_object()) return;
            const auto& delta = d->get_object();
            const auto* dt = delta.if_contains("type");
            if (!dt || !dt->is_string()) return;
            if (dt->get_string() == "text_delta") {
                const auto* t = delta.if_contains("text");
                if (!t || !t->is_string() ||
                    !std::holds_alternative<text_block>(out.content[it->second]))
                    return;
                if (!grow(out, t->get_string().size())) return;
                std::get<text_block>(out.content[it->second]).text.append(t->get_string());
                observer.on_text_delta(out, t->get_string());
            } else if (dt->get_string() == "input_json_delta") {
                const auto* p = delta.if_contains("partial_json");
                if (!p || !p->is_string()) return;
                if (!grow(out, p->get_string().size())) return;
                tool_args_[it->second].append(p->get_string());
                notify_tool_delta(observer, out, p->get_string());
            }
        } else if (type == "content_block_stop") {
            // arguments are parsed once at the end (finish_text_and_tools)
        } else if (type == "message_delta") {
            if (const auto* d = o.if_contains("delta"); d && d->is_object())
                if (const auto* s = d->get_object().if_contains("stop_reason"); s && s->is_string())
                    stop_reason_ = s->get_string();
            if (const auto* u = o.if_contains("usage"); u && u->is_object())
                usage(u->get_object(), out);
        } else if (type == "message_stop") {
            done(out);
        } else if (type == "error") {
            std::string msg, etype;
            if (const auto* e = o.if_contains("error"); e && e->is_object())
                error_from_object(e->get_object(), msg, etype);
            fail(out, stream_error_text(std::move(msg), etype), etype);
        }
        // "ping" and unknown events are ignored (the API may add event types)
    }

    void on_end(message& out) override {
        if (state_ != state::streaming) return;
        fail(out, "Stream ended without message_stop (the response was incomplete)");
    }

  private:
    void usage(const json::object& u, message& out) {
        if (u.contains("input_tokens")) out.usage.input = int_of(u.if_contains("input_tokens"));
        if (u.contains("output_tokens")) out.usage.output = int_of(u.if_contains("output_tokens"));
        if (u.contains("cache_read_input_tokens"))
            out.usage.cache_read = int_of(u.if_contains("cache_read_input_tokens"));
        if (u.contains("cache_creation_input_tokens"))
            out.usage.cache_write = int_of(u.if_contains("cache_creation_input_tokens"));
        out.usage.total_tokens =
            saturating_add(saturating_add(out.usage.input, out.usage.output),
                           saturating_add(out.usage.cache_read, out.usage.cache_write));
    }

    void done(message& out) {
        if (!finish_text_and_tools(out)) return;
        if (stop_reason_ == "max_tokens") {
            out.stop = stop_reason::length;
        } else if (stop_reason_ == "tool_use") {
            out.stop = stop_reason::tool_use;
        } else if (stop_reason_ == "refusal") {
            fail(out, "The model refused to answer (stop_reason: refusal)");
            return;
        } else if (stop_reason_ == "model_context_window_exceeded") {
            fail(out, "model_context_window_exceeded: the reply did not fit in the context window");
            return;
        } else {
            out.stop = stop_reason::stop;
        }
        state_ = state::done;
    }

    std::string stop_reason_;
    std::map<std::int64_t, std::size_t> blocks_;  // API block index → content index
};

}  // namespace

std::string_view to_string(api_kind k) noexcept {
    return k == api_kind::openai_completions ? "openai-completions" : "anthropic-messages";
}

std::optional<api_kind> api_from_string(std::string_view s) noexcept {
    if (s == "openai-completions") return api_kind::openai_completions;
    if (s == "anthropic-messages") return api_kind::anthropic_messages;
    return std::nullopt;
}

std::string_view endpoint_path(api_kind k) noexcept {
    return k == api_kind::openai_completions ? "/chat/completions" : "/messages";
}

std::string build_request_body(api_kind k, const provider_request& req) {
    return k == api_kind::openai_completions ? openai_body(req) : anthropic_body(req);
}

std::optional<std::string_view> find_header(const header_list& h, std::string_view name) noexcept {
    for (const auto& [k, v] : h)
        if (iequals(k, name)) return std::string_view(v);
    return std::nullopt;
}

std::optional<std::int64_t> parse_http_date(std::string_view s) noexcept {
    s = trim(s);
    const auto parts = split_ws(s);
    // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT"
    if (parts.size() == 6 && parts[0].size() == 4 && parts[0].back() == ',' &&
        iequals(parts[5], "GMT")) {
        auto day = digits(parts[1]);
        auto mon = month_of(parts[2]);
        auto year = digits(parts[3]);
        if (day && mon && year && parts[3].size() == 4)
            return make_time(*year, *mon, *day, parts[4]);
        return std::nullopt;
    }
    // RFC 850: "Sunday, 06-Nov-94 08:49:37 GMT"
    if (parts.size() == 4 && parts[0].back() == ',' && iequals(parts[3], "GMT") &&
        parts[1].size() == 9 && parts[1][2] == '-' && parts[1][6] == '-') {
        auto day = digits(parts[1].substr(0, 2));
        auto mon = month_of(parts[1].substr(3, 3));
        auto yy = digits(parts[1].substr(7, 2));
        if (!day || !mon || !yy) return std::nullopt;
        return make_time(*yy < 70 ? 2000 + *yy : 1900 + *yy, *mon, *day, parts[2]);
    }
    // asctime: "Sun Nov  6 08:49:37 1994"
    if (parts.size() == 5) {
        auto mon = month_of(parts[1]);
        auto day = digits(parts[2]);
        auto year = digits(parts[4]);
        if (mon && day && year && parts[4].size() == 4)
            return make_time(*year, *mon, *day, parts[3]);
    }
    return std::nullopt;
}

std::optional<std::int64_t> retry_hint_from_headers(const header_list& h,
                                                    std::int64_t now_ms) noexcept {
    std::optional<std::int64_t> best;
    auto consider = [&](std::int64_t ms) {
        if (ms > 0 && (!best || ms > *best)) best = ms;
    };
    if (auto v = find_header(h, "retry-after-ms"))
        if (auto n = parse_number(*v)) consider(ceil_ms(*n));
    if (auto v = find_header(h, "retry-after")) {
        if (auto n = parse_number(*v))
            consider(ceil_ms(*n * 1000.0));
        else if (auto t = parse_http_date(*v))
            consider(sat_sub(*t, now_ms));
    }
    if (auto v = find_header(h, "x-ratelimit-reset-ms")) {
        if (auto n = parse_number(*v))
            consider(*n > 1e12 ? sat_sub(ceil_ms(*n), now_ms) : ceil_ms(*n));
    }
    if (auto v = find_header(h, "x-ratelimit-reset")) {
        if (auto n = parse_number(*v))
            consider(*n > 1e9 ? sat_sub(ceil_ms(*n * 1000.0), now_ms) : ceil_ms(*n * 1000.0));
    }
    return best;
}

void append_retry_hint(std::string& text, std::optional<std::int64_t> hint_ms) {
    if (!hint_ms || *hint_ms <= 0) return;
    static constexpr std::string_view marker = "retry-after-ms=";
    if (text.size() >= marker.size())
        for (std::size_t i = 0; i + marker.size() <= text.size(); ++i)
            if (iequals(std::string_view(text).substr(i, marker.size()), marker)) return;
    text += " retry-after-ms=";
    text += std::to_string(*hint_ms);
}

std::optional<bool> should_retry_header(const header_list& h) noexcept {
    auto v = find_header(h, "x-should-retry");
    if (!v) return std::nullopt;
    const auto t = trim(*v);
    if (iequals(t, "true")) return true;
    if (iequals(t, "false")) return false;
    return std::nullopt;
}

error_details http_error_text(int status, std::string_view body) {
    error_details d;
    const std::string prefix = std::to_string(status) + " ";
    const std::string_view trimmed = trim(body);
    if (trimmed.empty()) {
        d.text = prefix + "status code (no body)";
        return d;
    }
    auto parsed = parse_json_strict(trimmed);
    const bool ec = !parsed;  // invalid JSON, or a number beyond the double range: the raw text
    const json::value& v = parsed.value;
    std::string msg;
    if (!ec && v.is_object()) {
        const auto& o = v.get_object();
        if (const auto* e = o.if_contains("error")) {
            if (e->is_object())
                error_from_object(e->get_object(), msg, d.type);
            else if (e->is_string())
                msg = e->get_string();
        }
        if (msg.empty())
            if (const auto* m = o.if_contains("message"); m && m->is_string())
                msg = m->get_string();
        if (d.type.empty())
            if (const auto* t = o.if_contains("type");
                t && t->is_string() && t->get_string() != "error")
                d.type = t->get_string();
        if (msg.empty()) msg = compact_json(v);
    } else if (!ec) {
        msg = compact_json(v);
    } else {
        msg = cut_utf8(to_valid_utf8(trimmed.substr(0, 1004)), 1003);  // any bytes a server sent
    }
    d.text = prefix + msg;
    return d;
}

std::unique_ptr<stream_decoder> stream_decoder::make(api_kind k) {
    if (k == api_kind::openai_completions) return std::make_unique<openai_decoder>();
    return std::make_unique<anthropic_decoder>();
}

void stream_decoder::fail(message& out, std::string text, std::string type) {
    state_ = state::error;             // first: finish_text_and_tools must not fail again
    (void)finish_text_and_tools(out);  // a failed reply keeps the arguments that parse
    out.stop = stop_reason::error;
    out.error_message = std::move(text);
    if (!type.empty()) out.error_type = std::move(type);
    state_ = state::error;
}

bool stream_decoder::finish_text_and_tools(message& out) {
    std::string non_finite;  // the first tool call whose arguments hold a number beyond a double
    for (auto& [index, raw] : tool_args_) {
        if (index >= out.content.size()) continue;
        auto* block = std::get_if<tool_call_block>(&out.content[index]);
        if (!block) continue;
        if (raw.empty()) {
            block->arguments = {};
            continue;
        }
        auto parsed = parse_json_strict(raw);
        if (parsed && parsed.value.is_object())
            block->arguments = std::move(parsed.value.get_object());
        else if (parsed.error && parsed.error->non_finite && non_finite.empty())
            non_finite = "Invalid stream data from the provider: the arguments of tool call \"" +
                         block->name + "\": " + parsed.error->describe();
        // invalid JSON arguments stay empty (the tool reports what it misses)
    }
    tool_args_.clear();
    if (non_finite.empty() || state_ != state::streaming) return true;
    fail(out, std::move(non_finite));
    return false;
}

const json::object* stream_decoder::parse_event(const sse_event& ev, message& out) {
    auto parsed = parse_json_strict(ev.data);
    if (!parsed || !parsed.value.is_object()) {
        fail(out, "Invalid stream data from the provider: " +
                      (parsed.error ? parsed.error->describe() : std::string("not an object")));
        return nullptr;
    }
    event_ = std::move(parsed.value);
    return &event_.get_object();
}

bool stream_decoder::grow(message& out, std::size_t bytes) {
    if (budget_.take(bytes)) return true;
    fail(out, budget_.too_large_text());
    return false;
}

bool stream_decoder::new_block(message& out) {
    return grow(out, reply_budget::block_bytes);
}

bool stream_decoder::set_tool_field(message& out, std::string& field, std::string_view value,
                                    std::string_view what) {
    if (auto error = reply_budget::field_error(what, value.size())) {
        fail(out, std::move(*error));
        return false;
    }
    if (!budget_.replace(field.size(), value.size())) {
        fail(out, budget_.too_large_text());
        return false;
    }
    field.assign(value);
    return true;
}

std::string redact_url(std::string_view url) {
    std::string out;
    std::string_view rest = url;
    if (const auto scheme_end = rest.find("://"); scheme_end != std::string_view::npos) {
        out.append(rest.substr(0, scheme_end + 3));
        rest.remove_prefix(scheme_end + 3);
        // the authority ends at the first '/', '?' or '#'; its userinfo at its last '@'
        const auto authority_end = rest.find_first_of("/?#");
        const auto authority = rest.substr(0, authority_end);
        if (const auto at = authority.rfind('@'); at != std::string_view::npos)
            rest.remove_prefix(at + 1);
    }
    const auto query = rest.find_first_of("?#");
    out.append(rest.substr(0, query));
    if (query != std::string_view::npos) out.append("?\u2026");
    return out;
}

bool is_loopback_host(std::string_view host) {
    std::string h(host);
    for (auto& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (h == "localhost" || h.ends_with(".localhost")) return true;
    boost::system::error_code ec;
    const auto a = boost::asio::ip::make_address(h, ec);
    if (ec) return false;
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        return boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6())
            .is_loopback();
    return a.is_loopback();
}

}  // namespace coagent::http_protocol

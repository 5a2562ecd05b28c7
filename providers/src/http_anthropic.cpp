// The Anthropic Messages wire format: the request body and the stream decoder (see
// http_protocol.hpp).

#include "http_wire.hpp"

#include <map>

namespace coagent::http_protocol {

namespace detail {

namespace {

// the thinking text of a redacted_thinking block (the reference's)
constexpr std::string_view redacted_placeholder = "[Reasoning redacted]";

class anthropic_decoder final : public stream_decoder {
  public:
    void on_event(const sse_event& ev, message& out, stream_observer& observer) override {
        if (state_ != state::streaming) return;
        event_scratch scratch;
        const json::object* obj = parse_event(ev, out, scratch);
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
            } else if (bt->get_string() == "thinking" || bt->get_string() == "redacted_thinking") {
                // the reference's shapes: a thinking block starts with an empty signature; a
                // redacted one keeps its payload (`data`) as the signature, opaque
                if (!new_block(out)) return;
                thinking_block th;
                th.signature.emplace();
                if (bt->get_string() == "redacted_thinking") {
                    th.redacted = true;
                    th.thinking = redacted_placeholder;
                    if (const auto* d = b.if_contains("data"); d && d->is_string()) {
                        if (!grow(out, d->get_string().size())) return;
                        th.signature = d->get_string();
                    }
                } else {
                    for (auto [key, dest] : {std::pair{"thinking", &th.thinking},
                                             std::pair{"signature", &*th.signature}}) {
                        const auto* v = b.if_contains(key);
                        if (!v || !v->is_string()) continue;
                        if (!grow(out, v->get_string().size())) return;
                        *dest = v->get_string();
                    }
                }
                out.content.emplace_back(std::move(th));
                blocks_[idx] = out.content.size() - 1;
            }
            // server tool blocks are not modelled: skipped
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
            } else if (dt->get_string() == "thinking_delta" ||
                       dt->get_string() == "signature_delta") {
                const bool sig = dt->get_string() == "signature_delta";
                const auto* t = delta.if_contains(sig ? "signature" : "thinking");
                auto* th = std::get_if<thinking_block>(&out.content[it->second]);
                if (!t || !t->is_string() || !th || th->redacted) return;
                if (!grow(out, t->get_string().size())) return;
                if (sig) {
                    th->signature.value().append(t->get_string());
                } else {
                    th->thinking.append(t->get_string());
                    observer.on_thinking_delta(out, t->get_string());
                }
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
            fail_error_event(out, std::move(msg), std::move(etype));
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

// whether block `b` of a message goes to the API: thinking only in assistant messages (an
// unsigned one, an aborted stream's, as text, as the reference does), images only in user
// messages, no empty text (the API rejects empty text blocks)
// thinking from another API (its signature means nothing here) is sent as text, redacted
// thinking from it not at all (the reference's transformMessages)
bool foreign(const message& m) {
    return !m.api.empty() && m.api != "anthropic-messages";
}

bool sent(const content_block& b, bool assistant, bool from_other_api = false) {
    if (const auto* t = std::get_if<text_block>(&b)) return !t->text.empty();
    if (const auto* th = std::get_if<thinking_block>(&b))
        return assistant && (th->redacted ? !from_other_api : !trim(th->thinking).empty());
    if (std::holds_alternative<image_block>(b)) return !assistant;
    return true;  // a tool call
}

// whether the message has a block the API accepts
bool has_blocks(const message& m) {
    const bool assistant = m.role == message_role::assistant;
    for (const auto& b : m.content)
        if (sent(b, assistant, foreign(m))) return true;
    return false;
}

// {"type":"tool_result",…}: one block of the user message that groups consecutive results
void tool_result_block(std::string& out, const message& m) {
    out += "{\"type\":\"tool_result\",\"tool_use_id\":";
    jt::append_string(out, m.tool_call_id);
    out += ",\"content\":";
    if (image_count(m) == 0) {
        with_text(m, [&](std::string_view t) { jt::append_string(out, t); });
    } else {
        // with images: blocks (the reference's convertContentBlocks)
        out.push_back('[');
        bool first = true, text = false;
        for (const auto& b : m.content) text |= std::holds_alternative<text_block>(b);
        if (!text) {
            out += R"x({"type":"text","text":"(see attached image)"})x";
            first = false;
        }
        for (const auto& b : m.content) {
            if (const auto* t = std::get_if<text_block>(&b)) {
                if (!first) out.push_back(',');
                first = false;
                out += "{\"type\":\"text\",\"text\":";
                jt::append_string(out, t->text);
                out.push_back('}');
            } else if (const auto* im = std::get_if<image_block>(&b)) {
                if (!first) out.push_back(',');
                first = false;
                anthropic_image(out, *im);
            }
        }
        out.push_back(']');
    }
    if (m.is_error) out += ",\"is_error\":true";
    out.push_back('}');
}

// {"role":…,"content":[…]} of a user or assistant message
void message_object(std::string& out, const message& m) {
    const bool assistant = m.role == message_role::assistant;
    out += assistant ? "{\"role\":\"assistant\",\"content\":[" : "{\"role\":\"user\",\"content\":[";
    bool first_block = true;
    const bool other_api = foreign(m);
    for (const auto& b : m.content) {
        if (!sent(b, assistant, other_api)) continue;
        if (!first_block) out.push_back(',');
        first_block = false;
        if (const auto* t = std::get_if<text_block>(&b)) {
            out += "{\"type\":\"text\",\"text\":";
            jt::append_string(out, t->text);
            out.push_back('}');
        } else if (const auto* im = std::get_if<image_block>(&b)) {
            anthropic_image(out, *im);
        } else if (const auto* th = std::get_if<thinking_block>(&b)) {
            // the signature (or a redacted block's payload) byte for byte, as received
            if (th->redacted && !other_api) {
                out += R"({"type":"redacted_thinking","data":)";
                jt::append_string(out, th->signature.value_or(""));
            } else if (!other_api && th->signature && !trim(*th->signature).empty()) {
                out += R"({"type":"thinking","thinking":)";
                jt::append_string(out, th->thinking);
                out += R"(,"signature":)";
                jt::append_string(out, *th->signature);
            } else {
                out += R"({"type":"text","text":)";
                jt::append_string(out, th->thinking);
            }
            out.push_back('}');
        } else if (const auto* c = std::get_if<tool_call_block>(&b)) {
            out += "{\"type\":\"tool_use\",\"id\":";
            jt::append_string(out, c->id);
            out += ",\"name\":";
            jt::append_string(out, c->name);
            out += ",\"input\":";
            jt::append_value(out, c->arguments);
            out.push_back('}');
        }
    }
    if (first_block) out += R"({"type":"text","text":" "})";  // a user message with no text
    out += "]}";
}

}  // namespace

std::optional<std::int64_t> thinking_budget(thinking_level level, std::int64_t max_tokens) {
    std::int64_t budget = 0;
    switch (level) {
        case thinking_level::off:
            return std::nullopt;
        case thinking_level::minimal:
            budget = 1024;
            break;
        case thinking_level::low:
            budget = 2048;
            break;
        case thinking_level::medium:
            budget = 8192;
            break;
        case thinking_level::high:
        case thinking_level::xhigh:
            budget = 16384;
            break;
    }
    // the API wants 1024 <= budget_tokens < max_tokens; leave 1024 tokens for the answer
    budget = std::min(budget, max_tokens - 1024);
    if (budget < 1024) return std::nullopt;
    return budget;
}

std::string anthropic_body(const provider_request& req) {
    std::string out;
    out.reserve(body_size_hint(req));
    out += "{\"model\":";
    jt::append_string(out, req.model.id);
    out += ",\"max_tokens\":";
    const std::int64_t max_tokens = req.model.max_tokens > 0 ? req.model.max_tokens : 4096;
    jt::append_int(out, max_tokens);
    if (const auto budget =
            thinking_budget(effective_thinking_level(req.model, req.thinking), max_tokens)) {
        out += R"(,"thinking":{"type":"enabled","budget_tokens":)";
        jt::append_int(out, *budget);
        out.push_back('}');
    }
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
    const std::uint64_t format = std::uint64_t(api_kind::anthropic_messages);
    for (std::size_t i = 0; i < req.messages.size(); ++i) {
        const message& m = *req.messages[i];
        if (m.role == message_role::tool_result) {
            if (!in_results) {
                open_message("user");
                in_results = true;
            } else {
                out.push_back(',');
            }
            append_message(out, req, i, format,
                           [&](const message& r) { tool_result_block(out, r); });
            continue;
        }
        flush_results();
        if (m.role == message_role::assistant && !has_blocks(m)) continue;
        if (!first_message) out.push_back(',');
        first_message = false;
        append_message(out, req, i, format, [&](const message& r) { message_object(out, r); });
    }
    flush_results();
    out += "],\"stream\":true";
    append_tools(out, req.tools, "{", "input_schema", "}");
    out.push_back('}');
    return out;
}

std::unique_ptr<stream_decoder> make_anthropic_decoder() {
    return std::make_unique<anthropic_decoder>();
}

}  // namespace detail

}  // namespace coagent::http_protocol

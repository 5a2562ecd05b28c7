// The OpenAI chat-completions wire format: the request body and the stream decoder (see
// http_protocol.hpp).

#include "http_wire.hpp"

#include <map>

namespace coagent::http_protocol {

namespace detail {

namespace {

// where compatible servers (llama.cpp, vLLM, DeepSeek …) stream reasoning, in the reference's
// order of preference
constexpr std::string_view reasoning_fields[] = {"reasoning_content", "reasoning",
                                                 "reasoning_text"};

// The reasoning of a reply of this very model (provider, api, id), to send back in the field
// it came in (the signature): its thinking blocks' texts joined by "\n"; nothing for another
// model's (the reference's transformMessages makes those text, which this API does not send).
std::optional<std::pair<std::string_view, std::string>> reasoning_of(const message& m,
                                                                     const model_info& model) {
    if (m.provider != model.provider || m.api != model.api || m.model != model.id)
        return std::nullopt;
    std::optional<std::pair<std::string_view, std::string>> r;
    for (const auto& b : m.content) {
        const auto* th = std::get_if<thinking_block>(&b);
        if (!th || trim(th->thinking).empty()) continue;
        if (!r) {
            // the first non-empty block's signature names the field
            const auto* f = std::find(std::begin(reasoning_fields), std::end(reasoning_fields),
                                      th->signature.value_or(""));
            if (f == std::end(reasoning_fields)) return std::nullopt;
            r.emplace(*f, th->thinking);
        } else {
            r->second += '\n';
            r->second += th->thinking;
        }
    }
    return r;
}

class openai_decoder final : public stream_decoder {
  public:
    void on_event(const sse_event& ev, message& out, stream_observer& observer) override {
        if (state_ != state::streaming) return;
        if (ev.data == "[DONE]") {
            done(out);
            return;
        }
        event_scratch scratch;
        const json::object* obj = parse_event(ev, out, scratch);
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
            if (!reasoning(delta, out, observer)) return;
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
    // The reference's reasoning of compatible servers: the first non-empty field of
    // reasoning_fields in a delta goes into the reply's one thinking block, whose signature
    // names the field (it is sent back in it). False after failing the reply.
    bool reasoning(const json::object& delta, message& out, stream_observer& observer) {
        for (const std::string_view field : reasoning_fields) {
            const auto* r = delta.if_contains(field);
            if (!r || !r->is_string() || r->get_string().empty()) continue;
            const std::string_view piece = r->get_string();
            if (!thinking_) {
                if (!new_block(out) || !grow(out, field.size())) return false;
                out.content.emplace_back(thinking_block{"", std::string(field), false});
                thinking_ = out.content.size() - 1;
            }
            if (!grow(out, piece.size())) return false;
            std::get<thinking_block>(out.content[*thinking_]).thinking.append(piece);
            observer.on_thinking_delta(out, piece);
            break;
        }
        return true;
    }

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
    std::optional<std::size_t> thinking_;           // the thinking block's content index
};

// {"role":"user","content":[{"type":"text",…},{"type":"image_url",…},…]}: `lead` (when not
// empty) first, then the text and image blocks in order
void user_blocks(std::string& out, const std::vector<content_block>& content,
                 std::string_view lead) {
    out += R"({"role":"user","content":[)";
    bool first = true;
    const auto text = [&](std::string_view t) {
        if (!first) out.push_back(',');
        first = false;
        out += R"({"type":"text","text":)";
        jt::append_string(out, t);
        out.push_back('}');
    };
    if (!lead.empty()) text(lead);
    for (const auto& b : content) {
        if (const auto* t = std::get_if<text_block>(&b)) {
            text(t->text);
        } else if (const auto* im = std::get_if<image_block>(&b)) {
            if (!first) out.push_back(',');
            first = false;
            openai_image(out, *im);
        }
    }
    out += "]}";
}

}  // namespace

std::optional<std::string_view> reasoning_effort(thinking_level level) {
    if (level == thinking_level::off) return std::nullopt;
    if (level == thinking_level::xhigh) return "high";
    return to_string(level);
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
    for (std::size_t i = 0; i < req.messages.size(); ++i) {
        next();
        // an assistant message with thinking is written for the model (its reasoning goes back)
        const message& mi = *req.messages[i];
        const bool thinks = mi.role == message_role::assistant &&
                            std::any_of(mi.content.begin(), mi.content.end(), [](const auto& b) {
                                return std::holds_alternative<thinking_block>(b);
                            });
        const std::uint64_t format =
            thinks ? model_fragment_format(api_kind::openai_completions, req.model, 0)
                   : std::uint64_t(api_kind::openai_completions);
        append_message(out, req, i, format, [&](const message& m) {
            switch (m.role) {
                case message_role::user:
                    // one text: a string; more blocks (images, placeholders): parts, as the
                    // reference sends a user message's blocks
                    if (image_count(m) == 0 &&
                        std::count_if(m.content.begin(), m.content.end(), [](const auto& b) {
                            return std::holds_alternative<text_block>(b);
                        }) <= 1) {
                        with_text(m, [&](std::string_view t) { role_text(out, "user", t); });
                    } else {
                        user_blocks(out, m.content, {});
                    }
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
                    if (const auto r = reasoning_of(m, req.model)) {
                        out.push_back(',');
                        jt::append_key(out, r->first);
                        jt::append_string(out, r->second);
                    }
                    if (!calls.empty()) {
                        out += ",\"tool_calls\":[";
                        for (std::size_t c = 0; c < calls.size(); ++c) {
                            if (c) out.push_back(',');
                            out += "{\"id\":";
                            jt::append_string(out, calls[c]->id);
                            out += ",\"type\":\"function\",\"function\":{\"name\":";
                            jt::append_string(out, calls[c]->name);
                            out += ",\"arguments\":";
                            jt::append_string(out, json::serialize(calls[c]->arguments));
                            out += "}}";
                        }
                        out.push_back(']');
                    }
                    out.push_back('}');
                    break;
                }
                case message_role::tool_result: {
                    // a tool message carries text only: its images follow in a user message
                    // (the reference's "Attached image(s) from tool result:")
                    const bool images = image_count(m) > 0;
                    out += "{\"role\":\"tool\",\"tool_call_id\":";
                    jt::append_string(out, m.tool_call_id);
                    out += ",\"content\":";
                    with_text(m, [&](std::string_view t) {
                        jt::append_string(out, t.empty() && images ? "(see attached image)" : t);
                    });
                    out.push_back('}');
                    if (images) {
                        out.push_back(',');
                        std::vector<content_block> only;
                        for (const auto& b : m.content)
                            if (std::holds_alternative<image_block>(b)) only.push_back(b);
                        user_blocks(out, only, "Attached image(s) from tool result:");
                    }
                    break;
                }
            }
        });
    }
    out += "],\"stream\":true,\"stream_options\":{\"include_usage\":true}";
    if (const auto effort = reasoning_effort(effective_thinking_level(req.model, req.thinking))) {
        out += ",\"reasoning_effort\":";
        jt::append_string(out, *effort);
    }
    append_tools(out, req.tools, R"({"type":"function","function":{)", "parameters", "}}");
    out.push_back('}');
    return out;
}

std::unique_ptr<stream_decoder> make_openai_decoder() {
    return std::make_unique<openai_decoder>();
}

}  // namespace detail

}  // namespace coagent::http_protocol

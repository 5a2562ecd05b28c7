// The OpenAI Responses API wire format (`openai-responses`): the request body and the stream
// decoder (see http_protocol.hpp). The shapes are the reference agent's
// (pi-ai providers/openai-responses*.js): a reasoning item is kept as a thinking block whose
// signature is the item's JSON and sent back as that item; a tool call's id is
// "<call_id>|<item id>".

#include "http_wire.hpp"

namespace coagent::http_protocol {

namespace detail {

namespace {

// What arrives in an item of the output ("response.output_item.added" … ".done").
enum class item_kind { none, reasoning, message, function_call };
// The last content part of a message item the decoder accepted (output_text or refusal).
enum class part_kind { none, output_text, refusal };

std::string_view string_of(const json::object& o, std::string_view key) {
    const auto* v = o.if_contains(key);
    return v && v->is_string() ? std::string_view(v->get_string()) : std::string_view();
}

// the texts of an array of {"text":…} (or `key`) objects joined by `sep`
std::string joined(const json::value* a, std::string_view key, std::string_view sep) {
    std::string out;
    if (!a || !a->is_array()) return out;
    bool first = true;
    for (const auto& p : a->get_array()) {
        if (!p.is_object()) continue;
        if (!first) out += sep;
        first = false;
        out += string_of(p.get_object(), key);
    }
    return out;
}

class responses_decoder final : public stream_decoder {
  public:
    void on_event(const sse_event& ev, message& out, stream_observer& observer) override {
        if (state_ != state::streaming) return;
        event_scratch scratch;
        const json::object* obj = parse_event(ev, out, scratch);
        if (!obj) return;
        const auto& o = *obj;
        std::string_view type = ev.type;
        if (const auto* t = o.if_contains("type"); t && t->is_string()) type = t->get_string();

        if (type == "response.output_item.added") {
            const auto* iv = o.if_contains("item");
            if (!iv || !iv->is_object()) return;
            item_added(iv->get_object(), out);
        } else if (type == "response.reasoning_summary_part.added") {
            if (item_ == item_kind::reasoning) ++summary_parts_;
        } else if (type == "response.reasoning_summary_text.delta" ||
                   type == "response.reasoning_text.delta") {
            // a summary delta needs its part (the reference's rule); reasoning text does not
            if (item_ != item_kind::reasoning ||
                (type == "response.reasoning_summary_text.delta" && summary_parts_ == 0))
                return;
            thinking_delta(out, observer, string_of(o, "delta"));
        } else if (type == "response.reasoning_summary_part.done") {
            if (item_ == item_kind::reasoning && summary_parts_ > 0)
                thinking_delta(out, observer, "\n\n");
        } else if (type == "response.content_part.added") {
            if (item_ != item_kind::message) return;
            const auto* pv = o.if_contains("part");
            if (!pv || !pv->is_object()) return;
            const auto pt = string_of(pv->get_object(), "type");
            if (pt == "output_text") part_ = part_kind::output_text;
            if (pt == "refusal") part_ = part_kind::refusal;
        } else if (type == "response.output_text.delta" || type == "response.refusal.delta") {
            const auto want =
                type == "response.output_text.delta" ? part_kind::output_text : part_kind::refusal;
            if (item_ != item_kind::message || part_ != want) return;
            const auto delta = string_of(o, "delta");
            if (delta.empty()) return;
            if (!grow(out, delta.size())) return;
            std::get<text_block>(out.content[block_]).text.append(delta);
            observer.on_text_delta(out, delta);
        } else if (type == "response.function_call_arguments.delta") {
            if (item_ != item_kind::function_call) return;
            const auto delta = string_of(o, "delta");
            if (delta.empty()) return;
            if (!grow(out, delta.size())) return;
            tool_args_[block_].append(delta);
            notify_tool_delta(observer, out, delta);
        } else if (type == "response.function_call_arguments.done") {
            if (item_ != item_kind::function_call) return;
            const auto* a = o.if_contains("arguments");
            if (!a || !a->is_string()) return;
            std::string& raw = tool_args_[block_];
            const std::string_view all = a->get_string();
            if (!budget_.replace(raw.size(), all.size())) {
                fail(out, budget_.too_large_text());
                return;
            }
            const bool extends = all.starts_with(raw);
            const std::size_t had = raw.size();
            raw.assign(all);
            if (extends && all.size() > had) notify_tool_delta(observer, out, all.substr(had));
        } else if (type == "response.output_item.done") {
            const auto* iv = o.if_contains("item");
            if (!iv || !iv->is_object()) return;
            item_done(iv->get_object(), out);
        } else if (type == "response.completed" || type == "response.incomplete") {
            const auto* rv = o.if_contains("response");
            completed(rv && rv->is_object() ? &rv->get_object() : nullptr, out,
                      type == "response.incomplete");
        } else if (type == "response.failed") {
            std::string msg = "Unknown error (no error details in response)";
            std::string code;
            if (const auto* rv = o.if_contains("response"); rv && rv->is_object()) {
                const auto& r = rv->get_object();
                if (const auto* e = r.if_contains("error"); e && e->is_object()) {
                    const auto& eo = e->get_object();
                    code = string_of(eo, "code");
                    std::string m = std::string(string_of(eo, "message"));
                    msg = (code.empty() ? std::string("unknown") : code) + ": " +
                          (m.empty() ? std::string("no message") : m);
                } else if (const auto* d = r.if_contains("incomplete_details");
                           d && d->is_object() && !string_of(d->get_object(), "reason").empty()) {
                    msg = "incomplete: " + std::string(string_of(d->get_object(), "reason"));
                }
            }
            fail(out, std::move(msg), code);
        } else if (type == "error" || (type.empty() && o.contains("error"))) {
            // {"type":"error","code":…,"message":…} (the API), or {"error":{…}} (proxies)
            std::string msg, code;
            if (const auto* e = o.if_contains("error"); e && e->is_object()) {
                error_from_object(e->get_object(), msg, code);
            } else {
                msg = string_of(o, "message");
                code = string_of(o, "code");
            }
            fail_error_event(out, std::move(msg), std::move(code));
        }
        // response.created, response.in_progress, *.done of parts and texts, and unknown events
        // are ignored (the API may add event types)
    }

    void on_end(message& out) override {
        if (state_ != state::streaming) return;
        fail(out, "Stream ended without response.completed (the response was incomplete)");
    }

  private:
    void item_added(const json::object& item, message& out) {
        const auto t = string_of(item, "type");
        if (t == "reasoning") {
            if (!new_block(out)) return;
            out.content.emplace_back(thinking_block{});
            begin(item_kind::reasoning, out);
        } else if (t == "message") {
            if (!new_block(out)) return;
            out.content.emplace_back(text_block{});
            begin(item_kind::message, out);
        } else if (t == "function_call") {
            if (!new_block(out)) return;
            out.content.emplace_back(tool_call_block{});
            begin(item_kind::function_call, out);
            if (!tool_fields(item, out)) return;
            const auto args = string_of(item, "arguments");
            if (!grow(out, args.size())) return;
            tool_args_[block_].assign(args);
        }
        // other items (web search, file search …) are not modelled: skipped
    }

    void begin(item_kind k, const message& out) {
        item_ = k;
        block_ = out.content.size() - 1;
        summary_parts_ = 0;
        part_ = part_kind::none;
    }

    // the id ("<call_id>|<id>", the reference's) and name of the tool call in block_
    bool tool_fields(const json::object& item, message& out) {
        auto& block = std::get<tool_call_block>(out.content[block_]);
        std::string id(string_of(item, "call_id"));
        if (const auto item_id = string_of(item, "id"); !item_id.empty()) {
            id += '|';
            id += item_id;
        }
        return set_tool_field(out, block.id, id, "id") &&
               set_tool_field(out, block.name, string_of(item, "name"), "name");
    }

    void thinking_delta(message& out, stream_observer& observer, std::string_view delta) {
        if (delta.empty()) return;
        if (!grow(out, delta.size())) return;
        std::get<thinking_block>(out.content[block_]).thinking.append(delta);
        observer.on_thinking_delta(out, delta);
    }

    // `field` becomes `value` within the reply's budget
    bool assign(message& out, std::string& field, std::string value) {
        if (!budget_.replace(field.size(), value.size())) {
            fail(out, budget_.too_large_text());
            return false;
        }
        field = std::move(value);
        return true;
    }

    void item_done(const json::object& item, message& out) {
        const auto t = string_of(item, "type");
        if (t == "reasoning" && item_ == item_kind::reasoning) {
            // the final thinking is the item's (summaries, else its reasoning text, else what
            // streamed); the whole item is the signature, sent back as it came
            auto& th = std::get<thinking_block>(out.content[block_]);
            std::string text = joined(item.if_contains("summary"), "text", "\n\n");
            if (text.empty()) text = joined(item.if_contains("content"), "text", "\n\n");
            if (!text.empty() && !assign(out, th.thinking, std::move(text))) return;
            std::string signature = json::serialize(item);
            if (!grow(out, signature.size())) return;
            th.signature = std::move(signature);
        } else if (t == "message" && item_ == item_kind::message) {
            std::string text;
            if (const auto* c = item.if_contains("content"); c && c->is_array())
                for (const auto& p : c->get_array()) {
                    if (!p.is_object()) continue;
                    const auto& po = p.get_object();
                    text +=
                        string_of(po, string_of(po, "type") == "output_text" ? "text" : "refusal");
                }
            if (!assign(out, std::get<text_block>(out.content[block_]).text, std::move(text)))
                return;
        } else if (t == "function_call") {
            if (item_ != item_kind::function_call) {  // no ".added" came: the item is the call
                if (!new_block(out)) return;
                out.content.emplace_back(tool_call_block{});
                begin(item_kind::function_call, out);
                if (!tool_fields(item, out)) return;
            }
            std::string& raw = tool_args_[block_];
            if (raw.empty()) {
                const auto args = string_of(item, "arguments");
                if (!grow(out, args.size())) return;
                raw.assign(args);
            }
        } else {
            return;
        }
        item_ = item_kind::none;
    }

    void completed(const json::object* r, message& out, bool incomplete) {
        std::string status = incomplete ? "incomplete" : "completed";
        if (r) {
            if (const auto s = string_of(*r, "status"); !s.empty()) status = s;
            if (const auto* u = r->if_contains("usage"); u && u->is_object()) {
                const auto& uo = u->get_object();
                const std::int64_t input = int_of(uo.if_contains("input_tokens"));
                std::int64_t cached = 0;
                if (const auto* d = uo.if_contains("input_tokens_details"); d && d->is_object())
                    cached = int_of(d->get_object().if_contains("cached_tokens"));
                out.usage.cache_read = std::min(cached, input);
                out.usage.input = input - out.usage.cache_read;
                out.usage.output = int_of(uo.if_contains("output_tokens"));
                out.usage.cache_write = 0;
                out.usage.total_tokens = uo.contains("total_tokens")
                                             ? int_of(uo.if_contains("total_tokens"))
                                             : saturating_add(input, out.usage.output);
            }
        }
        if (!finish_text_and_tools(out)) return;
        if (status == "incomplete") {
            // the reference's "length"; a reason other than the output limit is an error
            std::string reason;
            if (r)
                if (const auto* d = r->if_contains("incomplete_details"); d && d->is_object())
                    reason = string_of(d->get_object(), "reason");
            if (!reason.empty() && reason != "max_output_tokens") {
                fail(out, "incomplete: " + reason);
                return;
            }
            out.stop = stop_reason::length;
        } else if (status == "failed" || status == "cancelled") {
            fail(out, "The response ended with status \"" + status + "\"");
            return;
        } else {
            out.stop = stop_reason::stop;  // completed (and the API's in_progress / queued)
        }
        if (out.stop == stop_reason::stop)
            for (const auto& b : out.content)
                if (std::holds_alternative<tool_call_block>(b)) out.stop = stop_reason::tool_use;
        state_ = state::done;
    }

    item_kind item_ = item_kind::none;
    std::size_t block_ = 0;  // the content index of the current item's block
    int summary_parts_ = 0;
    part_kind part_ = part_kind::none;
};

// {"type":"input_image","detail":"auto","image_url":"data:<mime>;base64,<data>"}
void input_image(std::string& out, const image_block& im) {
    out += R"({"type":"input_image","detail":"auto","image_url":)";
    append_data_url(out, im);
    out.push_back('}');
}

void input_text(std::string& out, std::string_view text) {
    out += R"({"type":"input_text","text":)";
    jt::append_string(out, text);
    out.push_back('}');
}

// {"role":"user","content":[input_text / input_image …]}; nothing for a message without content
void user_message(std::string& out, const message& m) {
    if (m.content.empty()) return;
    out += R"({"role":"user","content":[)";
    bool first = true;
    for (const auto& b : m.content) {
        if (const auto* t = std::get_if<text_block>(&b)) {
            if (!first) out.push_back(',');
            first = false;
            input_text(out, t->text);
        } else if (const auto* im = std::get_if<image_block>(&b)) {
            if (!first) out.push_back(',');
            first = false;
            input_image(out, *im);
        }
    }
    out += "]}";
}

// {"type":"message","role":"assistant","content":[{"type":"output_text",…}],…}
void output_text(std::string& out, std::string_view text, std::size_t msg_index) {
    out += R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":)";
    jt::append_string(out, text);
    out += R"(,"annotations":[]}],"status":"completed","id":)";
    jt::append_string(out, "msg_" + std::to_string(msg_index));
    out.push_back('}');
}

// whether `sig` is the JSON of an object (a reasoning item): anything else (another API's
// signature) cannot be sent back as an item
bool item_json(const std::string& sig) {
    auto parsed = parse_json_strict(sig);
    return parsed && parsed.value.is_object();
}

// The items of an assistant message, comma-separated; false when it has none (skipped, like
// the reference). A thinking block of this very model with a signature is its reasoning item,
// byte for byte; another model's thinking goes as text (the reference's transformMessages).
bool assistant_items(std::string& out, const message& m, const model_info& model,
                     std::size_t msg_index) {
    const bool same_model =
        m.provider == model.provider && m.api == model.api && m.model == model.id;
    const bool other_model_same_api =
        m.model != model.id && m.provider == model.provider && m.api == model.api;
    bool first = true;
    const auto next = [&] {
        if (!first) out.push_back(',');
        first = false;
    };
    for (const auto& b : m.content) {
        if (const auto* th = std::get_if<thinking_block>(&b)) {
            if (same_model && th->signature && !th->signature->empty()) {
                if (!item_json(*th->signature)) continue;
                next();
                out += *th->signature;
            } else if (!same_model && !th->redacted && !trim(th->thinking).empty()) {
                next();
                output_text(out, th->thinking, msg_index);
            }
        } else if (const auto* t = std::get_if<text_block>(&b)) {
            next();
            output_text(out, t->text, msg_index);
        } else if (const auto* c = std::get_if<tool_call_block>(&b)) {
            const std::string_view whole = c->id;
            const auto bar = whole.find('|');
            const std::string_view call_id = whole.substr(0, bar);
            std::string_view item_id =
                bar == std::string_view::npos ? std::string_view() : whole.substr(bar + 1);
            // another model's item ids were paired with its own reasoning: not sent
            if (other_model_same_api && item_id.starts_with("fc_")) item_id = {};
            next();
            out += R"({"type":"function_call",)";
            if (bar != std::string_view::npos && !item_id.empty()) {
                out += "\"id\":";
                jt::append_string(out, item_id);
                out.push_back(',');
            }
            out += "\"call_id\":";
            jt::append_string(out, call_id);
            out += ",\"name\":";
            jt::append_string(out, c->name);
            out += ",\"arguments\":";
            jt::append_string(out, json::serialize(c->arguments));
            out.push_back('}');
        }
    }
    return !first;
}

// {"type":"function_call_output","call_id":…,"output":…}: the texts joined by "\n" (or
// "(see attached image)"), or parts when it has images
void function_call_output(std::string& out, const message& m) {
    std::string text;
    bool any_text = false;
    for (const auto& b : m.content)
        if (const auto* t = std::get_if<text_block>(&b)) {
            if (any_text) text.push_back('\n');
            any_text = true;
            text += t->text;
        }
    // the reference's rule: an empty text is "(see attached image)", images or not
    const std::string_view id = m.tool_call_id;
    out += R"({"type":"function_call_output","call_id":)";
    jt::append_string(out, id.substr(0, id.find('|')));
    out += ",\"output\":";
    if (image_count(m) > 0) {
        out.push_back('[');
        bool first = true;
        if (!text.empty()) {
            input_text(out, text);
            first = false;
        }
        for (const auto& b : m.content)
            if (const auto* im = std::get_if<image_block>(&b)) {
                if (!first) out.push_back(',');
                first = false;
                input_image(out, *im);
            }
        out.push_back(']');
    } else {
        jt::append_string(
            out, text.empty() ? std::string_view("(see attached image)") : std::string_view(text));
    }
    out.push_back('}');
}

}  // namespace

std::string openai_responses_body(const provider_request& req) {
    std::string out;
    out.reserve(body_size_hint(req));
    out += "{\"model\":";
    jt::append_string(out, req.model.id);
    out += ",\"input\":[";
    bool first = true;
    if (!req.system_prompt.empty()) {
        first = false;
        role_text(out, req.model.reasoning ? "developer" : "system", req.system_prompt);
    }
    // the reference's index of the messages sent ("msg_<n>"): the kept texts depend on it and on
    // the model (whose own reasoning items and tool-call item ids are sent back)
    std::size_t msg_index = 0;
    const std::uint64_t model_format = model_fragment_format(api_kind::openai_responses, req.model);
    for (std::size_t i = 0; i < req.messages.size(); ++i) {
        const std::size_t mark = out.size();
        if (!first) out.push_back(',');
        const std::size_t start = out.size();
        append_message(out, req, i, fragment_format(model_format, msg_index),
                       [&](const message& m) {
                           switch (m.role) {
                               case message_role::user:
                                   user_message(out, m);
                                   break;
                               case message_role::assistant:
                                   assistant_items(out, m, req.model, msg_index);
                                   break;
                               case message_role::tool_result:
                                   function_call_output(out, m);
                                   break;
                           }
                       });
        if (out.size() == start) {  // nothing to send for this message (no msg_<n> used)
            out.resize(mark);
            continue;
        }
        first = false;
        ++msg_index;
    }
    out += "],\"stream\":true";
    if (!req.session_id.empty()) {
        out += ",\"prompt_cache_key\":";
        jt::append_string(out, req.session_id);
    }
    out += ",\"store\":false";
    if (req.model.max_tokens > 0) {
        out += ",\"max_output_tokens\":";
        jt::append_int(out, std::min<std::int64_t>(req.model.max_tokens, 32000));
    }
    append_tools(out, req.tools, R"({"type":"function",)", "parameters", R"(,"strict":false})");
    if (const auto effort = reasoning_effort(effective_thinking_level(req.model, req.thinking))) {
        out += R"(,"reasoning":{"effort":)";
        jt::append_string(out, *effort);
        out += R"(,"summary":"auto"},"include":["reasoning.encrypted_content"])";
    }
    out.push_back('}');
    return out;
}

std::unique_ptr<stream_decoder> make_openai_responses_decoder() {
    return std::make_unique<responses_decoder>();
}

}  // namespace detail

}  // namespace coagent::http_protocol

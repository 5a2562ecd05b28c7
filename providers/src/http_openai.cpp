// The OpenAI chat-completions wire format: the request body and the stream decoder (see
// http_protocol.hpp).

#include "http_wire.hpp"

#include <boost/json/basic_parser_impl.hpp>

#include <array>
#include <cmath>
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

// One chat-completions event as the decoder reads it, gathered by Boost.JSON's SAX parser
// (basic_parser): no DOM is built, and the fields nobody reads (id, object, created, model …)
// are only scanned. A DOM built for every event was over a third of a streaming session's
// instructions (bench/scale). Each field is what the last occurrence of its key leaves, as in
// the DOM (which keeps the last of repeated keys): a key's value replaces what an earlier one
// gathered. An event with a top-level "error", a number beyond a double, that is not an object or
// does not parse is read again as a DOM (parse_event), which reports it exactly.
struct chunk {
    bool dom = false;                                             // read it as a DOM
    bool usage = false;                                           // "usage" is an object
    json::value prompt_tokens, completion_tokens, cached_tokens;  // null: absent or not a number
    bool choice = false;  // choices is an array whose first element is an object
    bool delta = false;   // choices[0].delta is an object
    std::optional<std::string> content;
    std::optional<std::string> reasoning[std::size(reasoning_fields)];
    struct tool_call {
        json::value index;  // null: absent or not a number
        std::optional<std::string> id;
        bool function = false;  // "function" is an object
        std::optional<std::string> name, arguments;
    };
    std::vector<tool_call> tool_calls;  // the elements of delta.tool_calls that are objects
    std::optional<std::string> finish_reason;
};

class chunk_reader {
  public:
    static constexpr std::size_t max_array_size = -1;
    static constexpr std::size_t max_object_size = -1;
    static constexpr std::size_t max_string_size = -1;
    static constexpr std::size_t max_key_size = -1;

    chunk c;

    bool on_document_begin(json::error_code&) { return true; }
    bool on_document_end(json::error_code&) { return true; }
    bool on_object_begin(json::error_code&) {
        push(begin_value(true, false), false);
        return true;
    }
    bool on_object_end(std::size_t, json::error_code&) { return pop(); }
    bool on_array_begin(json::error_code&) {
        push(begin_value(false, true), true);
        return true;
    }
    bool on_array_end(std::size_t, json::error_code&) { return pop(); }
    bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
        part_.append(s.data(), s.size());
        return true;
    }
    bool on_key(json::string_view s, std::size_t, json::error_code&) {
        if (part_.empty()) {
            field_ = route(std::string_view(s.data(), s.size()));
        } else {
            part_.append(s.data(), s.size());
            field_ = route(part_);
            part_.clear();
        }
        return true;
    }
    bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
        part_.append(s.data(), s.size());
        return true;
    }
    bool on_string(json::string_view s, std::size_t, json::error_code&) {
        std::optional<std::string>* into = string_field(begin_value(false, false));
        if (into) {
            if (part_.empty()) {
                into->emplace(s.data(), s.size());
            } else {
                part_.append(s.data(), s.size());
                into->emplace(std::move(part_));
            }
        }
        part_.clear();
        return true;
    }
    bool on_number_part(json::string_view, json::error_code&) { return true; }
    bool on_int64(std::int64_t v, json::string_view, json::error_code&) {
        return number(json::value(v));
    }
    bool on_uint64(std::uint64_t v, json::string_view, json::error_code&) {
        return number(json::value(v));
    }
    bool on_double(double v, json::string_view, json::error_code&) {
        if (!std::isfinite(v)) c.dom = true;  // parse_event says where
        return number(json::value(v));
    }
    bool on_bool(bool, json::error_code&) {
        begin_value(false, false);
        return true;
    }
    bool on_null(json::error_code&) {
        begin_value(false, false);
        return true;
    }
    bool on_comment_part(json::string_view, json::error_code&) { return true; }
    bool on_comment(json::string_view, json::error_code&) { return true; }

  private:
    // what a value is to the decoder: a container whose keys it reads, a field, or nothing
    enum class where : std::uint8_t {
        skip,
        root,
        error,
        usage,
        usage_details,
        prompt_tokens,
        completion_tokens,
        cached_tokens,
        choices,
        choice,
        delta,
        content,
        reasoning0,
        reasoning1,
        reasoning2,
        tool_calls,
        tool_call,
        index,
        id,
        function,
        name,
        arguments,
        finish_reason
    };
    struct frame {
        where w;
        bool array;
        std::size_t count;  // an array's elements so far
    };

    where route(std::string_view key) const {
        const frame* f = top();
        switch (f ? f->w : where::skip) {
            case where::root:
                if (key == "error") return where::error;
                if (key == "usage") return where::usage;
                if (key == "choices") return where::choices;
                return where::skip;
            case where::usage:
                if (key == "prompt_tokens") return where::prompt_tokens;
                if (key == "completion_tokens") return where::completion_tokens;
                if (key == "prompt_tokens_details") return where::usage_details;
                return where::skip;
            case where::usage_details:
                return key == "cached_tokens" ? where::cached_tokens : where::skip;
            case where::choice:
                if (key == "delta") return where::delta;
                if (key == "finish_reason") return where::finish_reason;
                return where::skip;
            case where::delta:
                if (key == "content") return where::content;
                if (key == "tool_calls") return where::tool_calls;
                for (std::size_t i = 0; i < std::size(reasoning_fields); ++i)
                    if (key == reasoning_fields[i])
                        return static_cast<where>(static_cast<std::size_t>(where::reasoning0) + i);
                return where::skip;
            case where::tool_call:
                if (key == "index") return where::index;
                if (key == "id") return where::id;
                if (key == "function") return where::function;
                return where::skip;
            case where::function:
                if (key == "name") return where::name;
                if (key == "arguments") return where::arguments;
                return where::skip;
            default:
                return where::skip;
        }
    }

    // A value begins (an object, an array or a scalar): what it is to the decoder; a field's
    // earlier value is forgotten (the last key wins), a container the decoder reads is opened.
    where begin_value(bool object, bool array) {
        where w = where::skip;
        if (depth_ == 0) {
            w = where::root;
        } else if (frame* f = top(); !f) {
            w = where::skip;
        } else if (f->array) {
            const std::size_t i = f->count++;
            if (f->w == where::choices && i == 0) w = where::choice;
            if (f->w == where::tool_calls) w = where::tool_call;
        } else {
            w = field_;
            field_ = where::skip;
        }
        switch (w) {
            case where::root:
                if (!object) c.dom = true;  // parse_event says "not an object"
                return w;
            case where::error:
                c.dom = true;
                return where::skip;
            case where::usage:
                c.usage = object;
                c.prompt_tokens = c.completion_tokens = c.cached_tokens = nullptr;
                return object ? w : where::skip;
            case where::usage_details:
                c.cached_tokens = nullptr;
                return object ? w : where::skip;
            case where::prompt_tokens:
                c.prompt_tokens = nullptr;
                return w;
            case where::completion_tokens:
                c.completion_tokens = nullptr;
                return w;
            case where::cached_tokens:
                c.cached_tokens = nullptr;
                return w;
            case where::choices:
                c.choice = false;
                reset_delta();
                c.finish_reason.reset();
                return array ? w : where::skip;
            case where::choice:
                c.choice = object;
                return object ? w : where::skip;
            case where::delta:
                reset_delta();
                c.delta = object;
                return object ? w : where::skip;
            case where::content:
                c.content.reset();
                return w;
            case where::tool_calls:
                c.tool_calls.clear();
                return array ? w : where::skip;
            case where::tool_call:
                if (!object) return where::skip;
                c.tool_calls.emplace_back();
                return w;
            case where::index:
                c.tool_calls.back().index = nullptr;
                return w;
            case where::id:
                c.tool_calls.back().id.reset();
                return w;
            case where::function: {
                auto& tc = c.tool_calls.back();
                tc.function = object;
                tc.name.reset();
                tc.arguments.reset();
                return object ? w : where::skip;
            }
            case where::name:
                c.tool_calls.back().name.reset();
                return w;
            case where::arguments:
                c.tool_calls.back().arguments.reset();
                return w;
            case where::finish_reason:
                c.finish_reason.reset();
                return w;
            default:
                if (const auto r = reasoning_index(w)) c.reasoning[*r].reset();
                return w;
        }
    }

    static std::optional<std::size_t> reasoning_index(where w) {
        static_assert(std::size(reasoning_fields) == 3, "one where:: per reasoning field");
        if (w < where::reasoning0 || w > where::reasoning2) return std::nullopt;
        return static_cast<std::size_t>(w) - static_cast<std::size_t>(where::reasoning0);
    }

    void reset_delta() {
        c.delta = false;
        c.content.reset();
        for (auto& r : c.reasoning) r.reset();
        c.tool_calls.clear();
    }

    std::optional<std::string>* string_field(where w) {
        switch (w) {
            case where::content:
                return &c.content;
            case where::id:
                return &c.tool_calls.back().id;
            case where::name:
                return &c.tool_calls.back().name;
            case where::arguments:
                return &c.tool_calls.back().arguments;
            case where::finish_reason:
                return &c.finish_reason;
            default:
                if (const auto r = reasoning_index(w)) return &c.reasoning[*r];
                return nullptr;
        }
    }

    bool number(json::value v) {
        switch (begin_value(false, false)) {
            case where::prompt_tokens:
                c.prompt_tokens = v;
                break;
            case where::completion_tokens:
                c.completion_tokens = v;
                break;
            case where::cached_tokens:
                c.cached_tokens = v;
                break;
            case where::index:
                c.tool_calls.back().index = v;
                break;
            default:
                break;
        }
        return true;
    }

    // the innermost container, or null at the root and below the stack's depth (never reached:
    // the parser refuses more than parse_options' max_depth, 32)
    frame* top() { return depth_ == 0 || depth_ > stack_.size() ? nullptr : &stack_[depth_ - 1]; }
    const frame* top() const {
        return depth_ == 0 || depth_ > stack_.size() ? nullptr : &stack_[depth_ - 1];
    }
    void push(where w, bool array) {
        if (depth_ < stack_.size()) stack_[depth_] = frame{w, array, 0};
        ++depth_;
    }
    bool pop() {
        --depth_;
        return true;
    }

    std::array<frame, 64> stack_{};  // deeper than parse_options' max_depth (32)
    std::size_t depth_ = 0;
    where field_ = where::skip;  // the value after the latest key
    std::string part_;           // a key or string given in parts
};

class openai_decoder final : public stream_decoder {
  public:
    void on_event(const sse_event& ev, message& out, stream_observer& observer) override {
        if (state_ != state::streaming) return;
        if (ev.data == "[DONE]") {
            done(out);
            return;
        }
        json::basic_parser<chunk_reader> parser(json::parse_options{});
        if (read_chunk(parser, ev.data)) {
            apply(parser.handler().c, out, observer);
            return;
        }
        // a DOM says what is wrong, or reads what the reader refused: a number beyond a double
        // in a value a repeated key replaced (the DOM keeps only the last)
        const auto text = dom_text(ev, out);
        if (!text) return;
        // the DOM's own text has no repeated key and no such number: the reader takes it
        json::basic_parser<chunk_reader> again(json::parse_options{});
        if (!read_chunk(again, *text)) {
            fail(out, "Invalid stream data from the provider: the event could not be read");
            return;
        }
        apply(again.handler().c, out, observer);
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
    // What the event says, into the reply: usage, text, reasoning, tool calls, finish reason.
    void apply(const chunk& c, message& out, stream_observer& observer) {
        if (c.usage) {
            const std::int64_t prompt = int_of(&c.prompt_tokens);
            out.usage.cache_read = std::min(int_of(&c.cached_tokens), prompt);
            out.usage.input = prompt - out.usage.cache_read;
            out.usage.output = int_of(&c.completion_tokens);
            out.usage.total_tokens = saturating_add(prompt, out.usage.output);
        }
        if (!c.choice) return;
        if (c.delta) {
            if (c.content && !c.content->empty()) {
                const std::string_view piece = *c.content;
                if (out.content.empty() ||
                    !std::holds_alternative<text_block>(out.content.back())) {
                    if (!new_block(out)) return;
                    out.content.emplace_back(text_block{});
                }
                if (!grow(out, piece.size())) return;
                std::get<text_block>(out.content.back()).text.append(piece);
                observer.on_text_delta(out, piece);
            }
            if (!reasoning(c, out, observer)) return;
            for (const auto& tc : c.tool_calls) {
                const std::int64_t idx = int_of(&tc.index);
                auto it = by_index_.find(idx);
                if (it == by_index_.end()) {
                    if (!new_block(out)) return;
                    out.content.emplace_back(tool_call_block{});
                    it = by_index_.emplace(idx, out.content.size() - 1).first;
                    tool_args_[it->second];
                }
                auto& block = std::get<tool_call_block>(out.content[it->second]);
                if (tc.id && !tc.id->empty() && !set_tool_field(out, block.id, *tc.id, "id"))
                    return;
                if (!tc.function) continue;
                if (tc.name && !tc.name->empty() &&
                    !set_tool_field(out, block.name, *tc.name, "name"))
                    return;
                if (tc.arguments && !tc.arguments->empty()) {
                    if (!grow(out, tc.arguments->size())) return;
                    tool_args_[it->second].append(*tc.arguments);
                    notify_tool_delta(observer, out, *tc.arguments);
                }
            }
        }
        if (c.finish_reason) finish_reason_ = *c.finish_reason;
    }

    // The reference's reasoning of compatible servers: the first non-empty field of
    // reasoning_fields in a delta goes into the reply's one thinking block, whose signature
    // names the field (it is sent back in it). False after failing the reply.
    bool reasoning(const chunk& c, message& out, stream_observer& observer) {
        for (std::size_t i = 0; i < std::size(reasoning_fields); ++i) {
            if (!c.reasoning[i] || c.reasoning[i]->empty()) continue;
            const std::string_view field = reasoning_fields[i];
            const std::string_view piece = *c.reasoning[i];
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

    // The event's fields by the SAX reader (parser.handler().c); false when it is left to a DOM
    // (a top-level "error", a number beyond a double, text that is not one JSON object).
    static bool read_chunk(json::basic_parser<chunk_reader>& parser, std::string_view text) {
        json::error_code ec;
        const std::size_t used = parser.write_some(false, text.data(), text.size(), ec);
        return !ec && used == text.size() && !parser.handler().c.dom;
    }

    // The event as a DOM: an error fails the reply (nullopt), else the DOM's own text.
    std::optional<std::string> dom_text(const sse_event& ev, message& out) {
        event_scratch scratch;
        const json::object* obj = parse_event(ev, out, scratch);
        if (!obj) return std::nullopt;
        if (const auto* e = obj->if_contains("error")) {
            std::string msg, type;
            if (e->is_object())
                error_from_object(e->get_object(), msg, type);
            else
                msg = e->is_string() ? std::string(e->get_string()) : compact_json(*e);
            fail_error_event(out, std::move(msg), std::move(type));
            return std::nullopt;
        }
        return json::serialize(*obj);
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
    const std::uint64_t thinking_format =
        fragment_format(model_fragment_format(api_kind::openai_completions, req.model), 0);
    for (std::size_t i = 0; i < req.messages.size(); ++i) {
        next();
        // an assistant message with thinking is written for the model (its reasoning goes back)
        const message& mi = *req.messages[i];
        const bool thinks = mi.role == message_role::assistant &&
                            std::any_of(mi.content.begin(), mi.content.end(), [](const auto& b) {
                                return std::holds_alternative<thinking_block>(b);
                            });
        const std::uint64_t format =
            thinks ? thinking_format : std::uint64_t(api_kind::openai_completions);
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

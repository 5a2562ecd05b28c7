// coagent-fakellm, the sans-io half: script parsing, chunking and the SSE payloads of the three
// APIs.

#include <coagent/providers/fakellm.hpp>

#include <boost/json/serialize.hpp>
#include <boost/json/stream_parser.hpp>

#include <algorithm>

namespace coagent::fakellm {

namespace json = boost::json;

namespace {

using scripted::step_error;

std::string shown(const json::value& v) {
    std::string s = json::serialize(v);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
}

std::int64_t int_field(const json::object& o, std::string_view key, std::int64_t min,
                       std::int64_t max, const std::string& source, std::size_t index,
                       std::string_view expected) {
    const auto& v = o.at(key);
    std::int64_t x = 0;
    if (v.is_int64()) {
        x = v.get_int64();
    } else if (v.is_uint64()) {
        x = max;
        if (v.get_uint64() > static_cast<std::uint64_t>(max))
            step_error(source, index,
                       "\"" + std::string(key) + "\" must be " + std::string(expected) +
                           ", found " + shown(v));
    } else if (v.is_double() &&
               v.get_double() == static_cast<double>(static_cast<std::int64_t>(v.get_double()))) {
        x = static_cast<std::int64_t>(v.get_double());
    } else {
        step_error(source, index,
                   "\"" + std::string(key) + "\" must be " + std::string(expected) + ", found " +
                       shown(v));
    }
    if (x < min || x > max)
        step_error(source, index,
                   "\"" + std::string(key) + "\" must be " + std::string(expected) + ", found " +
                       shown(v));
    return x;
}

std::pair<std::size_t, std::size_t> line_col(std::string_view text, std::size_t offset) {
    std::size_t line = 1, col = 1;
    for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
        if (text[i] == '\n') {
            ++line;
            col = 1;
        } else if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
            ++col;
        }
    }
    return {line, col};
}

constexpr std::string_view known_fields[] = {"status",
                                             "headers",
                                             "body",
                                             "text",
                                             "chunks",
                                             "usage",
                                             "cutAfterChunks",
                                             "stallAfterChunks",
                                             "stallMs",
                                             "sseError",
                                             "toolCall",
                                             "times",
                                             "delayMs",
                                             "chunkDelayMs",
                                             "forConversations",
                                             "failFor",
                                             "thinking",
                                             "signature",
                                             "redactedThinking"};

// failFor's own fields: the window and the answer of a status step
constexpr std::string_view fail_for_fields[] = {"ms", "status", "headers", "body"};

}  // namespace

std::vector<step> syntax::parse_steps(std::string_view text, const std::string& source) {
    json::stream_parser p;
    boost::system::error_code ec;
    const std::size_t consumed = p.write_some(text.data(), text.size(), ec);
    if (!ec) p.finish(ec);
    if (ec) {
        auto [line, col] = line_col(text, consumed);
        throw script_error(source + ":" + std::to_string(line) + ":" + std::to_string(col) +
                           ": invalid JSON: " + ec.message());
    }
    json::value v = p.release();
    if (!v.is_array())
        throw script_error(source + ": the script must be a JSON array of steps, found " +
                           shown(v));
    std::vector<step> out;
    const auto& arr = v.get_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
        if (!arr[i].is_object())
            step_error(source, i, "a step must be an object, found " + shown(arr[i]));
        const auto& o = arr[i].get_object();
        for (const auto& kv : o)
            if (std::find(std::begin(known_fields), std::end(known_fields), kv.key()) ==
                std::end(known_fields))
                step_error(source, i,
                           "unknown field \"" + std::string(kv.key()) +
                               "\" (known: status, headers, body, text, chunks, usage, "
                               "cutAfterChunks, stallAfterChunks, stallMs, sseError, toolCall, "
                               "times, delayMs, chunkDelayMs, forConversations, failFor, "
                               "thinking, signature, redactedThinking)");
        if (const auto* f = o.if_contains("failFor")) {
            // {"failFor":{"ms":N,"status":S,"headers"?,"body"?},"delayMs"?}: a time window in
            // which every request gets the status answer (docs/fakellm.md)
            for (const auto& kv : o)
                if (kv.key() != "failFor" && kv.key() != "delayMs")
                    step_error(source, i,
                               "\"failFor\" can only be combined with \"delayMs\", found \"" +
                                   std::string(kv.key()) + "\"");
            if (!f->is_object())
                step_error(source, i,
                           "\"failFor\" must be an object {\"ms\",\"status\",\"headers\"?,"
                           "\"body\"?}, found " +
                               shown(*f));
            const auto& fo = f->get_object();
            for (const auto& kv : fo)
                if (std::find(std::begin(fail_for_fields), std::end(fail_for_fields), kv.key()) ==
                    std::end(fail_for_fields))
                    step_error(source, i,
                               "unknown field \"failFor." + std::string(kv.key()) +
                                   "\" (known: ms, status, headers, body)");
            if (!fo.contains("ms") || !fo.contains("status"))
                step_error(source, i, "\"failFor\" needs \"ms\" and \"status\"");
            const std::int64_t ms = int_field(fo, "ms", 1, INT64_MAX / 2, source, i,
                                              "a positive integer (milliseconds)");
            json::object answer = fo;
            answer.erase("ms");
            if (const auto* d = o.if_contains("delayMs")) answer["delayMs"] = *d;
            json::array one;
            one.push_back(std::move(answer));
            // the answer is a status step: parsed (and its errors worded) as one
            auto inner = parse_steps(json::serialize(one),
                                     source + ": step " + std::to_string(i + 1) + " \"failFor\"");
            inner.front().fail_for_ms = ms;
            out.push_back(std::move(inner.front()));
            continue;
        }
        step s;
        const bool has_status = o.contains("status");
        const bool has_text = o.contains("text");
        const bool has_sse = o.contains("sseError");
        const bool has_tool = o.contains("toolCall");
        if (has_sse) {
            s.type = step::kind::sse_error;
            if (has_status || has_tool)
                step_error(source, i,
                           "\"sseError\" cannot be combined with \"status\" or \"toolCall\"");
        } else if (has_tool) {
            s.type = step::kind::tool_call;
            if (has_status || has_text)
                step_error(source, i,
                           "\"toolCall\" cannot be combined with \"status\" or \"text\"");
        } else if (has_text) {
            s.type = step::kind::text;
            if (has_status)
                step_error(
                    source, i,
                    "\"status\" cannot be combined with \"text\" (a streamed reply is a 200)");
        } else if (has_status) {
            s.type = step::kind::status;
        } else {
            step_error(source, i, "needs one of \"status\", \"text\", \"sseError\", \"toolCall\"");
        }

        if (has_status)
            s.status = static_cast<int>(
                int_field(o, "status", 100, 599, source, i, "an HTTP status (100-599)"));
        if (const auto* h = o.if_contains("headers")) {
            if (!h->is_object())
                step_error(source, i,
                           "\"headers\" must be an object of strings, found " + shown(*h));
            for (const auto& kv : h->get_object()) {
                std::string value;
                if (kv.value().is_string())
                    value = kv.value().get_string();
                else if (kv.value().is_number())
                    value = json::serialize(kv.value());
                else
                    step_error(source, i,
                               "header \"" + std::string(kv.key()) +
                                   "\" must be a string or a number, found " + shown(kv.value()));
                if (kv.key().empty() || value.find_first_of("\r\n") != std::string::npos)
                    step_error(source, i,
                               "header \"" + std::string(kv.key()) + "\" is not a valid header");
                s.headers.emplace_back(kv.key(), std::move(value));
            }
        }
        if (const auto* b = o.if_contains("body")) {
            if (s.type != step::kind::status)
                step_error(source, i, "\"body\" belongs to a \"status\" step");
            s.body = *b;
        }
        if (has_text) {
            const auto& t = o.at("text");
            if (!t.is_string())
                step_error(source, i, "\"text\" must be a string, found " + shown(t));
            s.text = t.get_string();
        }
        if (o.contains("chunks"))
            s.chunks = static_cast<int>(
                int_field(o, "chunks", 1, 1'000'000, source, i, "an integer from 1 to 1000000"));
        if (const auto* u = o.if_contains("usage")) {
            if (!u->is_object())
                step_error(source, i, "\"usage\" must be an object, found " + shown(*u));
            for (const auto& kv : u->get_object()) {
                static constexpr std::string_view names[] = {"input", "output", "cacheRead",
                                                             "cacheWrite"};
                if (std::find(std::begin(names), std::end(names), kv.key()) == std::end(names))
                    step_error(source, i,
                               "unknown usage field \"" + std::string(kv.key()) +
                                   "\" (known: input, output, cacheRead, cacheWrite)");
                int_field(u->get_object(), kv.key(), 0, INT64_MAX / 4, source, i,
                          "a non-negative integer");
            }
            s.usage = u->get_object();
        }
        if (o.contains("cutAfterChunks"))
            s.cut_after_chunks = static_cast<int>(
                int_field(o, "cutAfterChunks", 0, 1'000'000, source, i, "a non-negative integer"));
        if (o.contains("stallAfterChunks"))
            s.stall_after_chunks = static_cast<int>(int_field(o, "stallAfterChunks", 0, 1'000'000,
                                                              source, i, "a non-negative integer"));
        if (o.contains("stallMs"))
            s.stall_ms =
                int_field(o, "stallMs", 0, INT64_MAX / 2, source, i, "a non-negative integer");
        if (s.stall_after_chunks && !o.contains("stallMs"))
            step_error(source, i, "\"stallAfterChunks\" needs \"stallMs\"");
        if (o.contains("stallMs") && !s.stall_after_chunks) s.stall_after_chunks = 0;
        if (o.contains("chunkDelayMs"))
            s.chunk_delay_ms = int_field(o, "chunkDelayMs", 0, 3'600'000, source, i,
                                         "an integer from 0 to 3600000");
        if ((s.cut_after_chunks || s.stall_after_chunks || s.chunks || s.usage ||
             s.chunk_delay_ms) &&
            s.type == step::kind::status)
            step_error(source, i,
                       "chunks, usage, cutAfterChunks, stallAfterChunks and chunkDelayMs belong "
                       "to streamed steps");
        if (const auto* fc = o.if_contains("forConversations")) {
            const auto* a = fc->if_array();
            const auto number = [](const json::value& v) -> std::optional<double> {
                if (v.is_double()) return v.get_double();
                if (v.is_int64()) return static_cast<double>(v.get_int64());
                if (v.is_uint64()) return static_cast<double>(v.get_uint64());
                return std::nullopt;
            };
            std::optional<double> lo, hi;
            if (a && a->size() == 2) {
                lo = number((*a)[0]);
                hi = number((*a)[1]);
            }
            if (!lo || !hi || *lo < 0 || *hi > 1 || *lo >= *hi)
                step_error(source, i,
                           "\"forConversations\" must be [from, to] with 0 <= from < to <= 1, "
                           "found " +
                               shown(*fc));
            s.for_conversations = {*lo, *hi};
        }
        if (const auto* e = o.if_contains("sseError")) {
            if (!e->is_object())
                step_error(
                    source, i,
                    "\"sseError\" must be an object {\"type\",\"message\"}, found " + shown(*e));
            const auto& eo = e->get_object();
            s.error_type = "overloaded_error";
            s.error_message = "Overloaded";
            if (const auto* t = eo.if_contains("type")) {
                if (!t->is_string()) step_error(source, i, "\"sseError.type\" must be a string");
                s.error_type = t->get_string();
            }
            if (const auto* m = eo.if_contains("message")) {
                if (!m->is_string()) step_error(source, i, "\"sseError.message\" must be a string");
                s.error_message = m->get_string();
            }
        }
        if (const auto* tc = o.if_contains("toolCall")) {
            if (!tc->is_object())
                step_error(source, i, "\"toolCall\" must be an object, found " + shown(*tc));
            const auto* name = tc->get_object().if_contains("name");
            if (!name || !name->is_string() || name->get_string().empty())
                step_error(source, i, "\"toolCall.name\" must be a non-empty string");
            s.tool_name = name->get_string();
            if (const auto* a = tc->get_object().if_contains("arguments")) {
                if (!a->is_object())
                    step_error(source, i,
                               "\"toolCall.arguments\" must be an object, found " + shown(*a));
                s.tool_arguments = a->get_object();
            }
        }
        for (auto [key, dest] : {std::pair{"thinking", &s.thinking},
                                 std::pair{"redactedThinking", &s.redacted_thinking}}) {
            const auto* t = o.if_contains(key);
            if (!t) continue;
            if (s.type == step::kind::status)
                step_error(source, i, "\"" + std::string(key) + "\" belongs to streamed steps");
            if (!t->is_string())
                step_error(source, i,
                           "\"" + std::string(key) + "\" must be a string, found " + shown(*t));
            *dest = std::string(t->get_string());
        }
        if (s.thinking && s.redacted_thinking)
            step_error(source, i, "\"thinking\" cannot be combined with \"redactedThinking\"");
        if (const auto* sg = o.if_contains("signature")) {
            if (!s.thinking) step_error(source, i, "\"signature\" needs \"thinking\"");
            if (!sg->is_string())
                step_error(source, i, "\"signature\" must be a string, found " + shown(*sg));
            s.signature = sg->get_string();
        }
        if (o.contains("times"))
            s.times = static_cast<int>(
                int_field(o, "times", 1, 1'000'000'000, source, i, "an integer from 1 to 1e9"));
        if (o.contains("delayMs"))
            s.delay_ms =
                int_field(o, "delayMs", 0, INT64_MAX / 2, source, i, "a non-negative integer");
        out.push_back(std::move(s));
    }
    return out;
}

double conversation_share(std::string_view key) noexcept {
    std::uint64_t h = 14695981039346656037ull;
    for (const unsigned char ch : key) {
        h ^= ch;
        h *= 1099511628211ull;
    }
    // FNV's high bits barely move for keys that differ in their last bytes ("scale 1",
    // "scale 2"): mix them (MurmurHash3's fmix64) before taking the top 53 bits
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return static_cast<double>(h >> 11) / static_cast<double>(std::uint64_t{1} << 53);
}

api api_of_path(std::string_view target) noexcept {
    if (auto q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    while (target.size() > 1 && target.back() == '/') target.remove_suffix(1);
    if (target.ends_with("/chat/completions")) return api::openai;
    if (target.ends_with("/messages")) return api::anthropic;
    if (target.ends_with("/responses")) return api::responses;
    return api::unknown;
}

json::object to_json(const request_record& r) {
    json::object o;
    o["request"] = r.index;
    o["path"] = r.path;
    o["api"] = r.kind == api::openai      ? "openai-completions"
               : r.kind == api::anthropic ? "anthropic-messages"
               : r.kind == api::responses ? "openai-responses"
                                          : "unknown";
    o["authorization"] = !r.authorization.empty();
    o["x-api-key"] = !r.x_api_key.empty();
    // The last 4 characters of the key tell credentials apart without logging them.
    std::string key = r.x_api_key.empty() ? r.authorization : r.x_api_key;
    if (key.size() > 4) o["keySuffix"] = key.substr(key.size() - 4);
    o["model"] = r.model;
    o["stream"] = r.stream;
    json::array roles;
    for (const auto& role : r.roles) roles.emplace_back(role);
    o["roles"] = std::move(roles);
    o["images"] = r.images;
    o["thinking"] = r.thinking;
    o["status"] = r.status;
    return o;
}

std::vector<std::string> split_chunks(std::string_view text, std::optional<int> n) {
    std::vector<std::string> out;
    if (text.empty()) return out;
    if (!n) {
        for (std::string_view w : scripted::split_words(text)) out.emplace_back(w);
        return out;
    }
    const std::size_t parts = static_cast<std::size_t>(std::max(1, *n));
    std::size_t pos = 0;
    for (std::size_t k = 1; k <= parts && pos < text.size(); ++k) {
        std::size_t end = k == parts ? text.size() : text.size() * k / parts;
        while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
        if (end <= pos) continue;
        out.emplace_back(text.substr(pos, end - pos));
        pos = end;
    }
    return out;
}

namespace {

std::string data_line(const json::value& v) {
    std::string s = "data: ";
    s += json::serialize(v);
    s += "\n\n";
    return s;
}

std::string event_block(std::string_view type, const json::value& v) {
    std::string s = "event: ";
    s += type;
    s += "\ndata: ";
    s += json::serialize(v);
    s += "\n\n";
    return s;
}

struct usage_numbers {
    std::int64_t input, output, cache_read, cache_write;
};

usage_numbers usage_of(const step& s, std::int64_t input_tokens, std::size_t out_chars) {
    usage_numbers u{input_tokens, static_cast<std::int64_t>(out_chars / 4 + 1), 0, 0};
    if (s.usage) {
        auto get = [&](std::string_view k, std::int64_t& into) {
            if (const auto* v = s.usage->if_contains(k)) into = v->to_number<std::int64_t>();
        };
        get("input", u.input);
        get("output", u.output);
        get("cacheRead", u.cache_read);
        get("cacheWrite", u.cache_write);
    }
    return u;
}

json::object openai_chunk(const std::string& id, const std::string& model) {
    json::object c;
    c["id"] = id;
    c["object"] = "chat.completion.chunk";
    c["created"] = 1700000000;
    c["model"] = model;
    return c;
}

json::value openai_choice(json::object delta, const char* finish) {
    json::object ch;
    ch["index"] = 0;
    ch["delta"] = std::move(delta);
    ch["finish_reason"] = finish ? json::value(finish) : json::value(nullptr);
    json::array a;
    a.push_back(std::move(ch));
    return a;
}

// One event per piece from a template event whose piece is piece_marker (serialised once;
// only the piece is escaped per chunk: the server stays fast for long streams).
constexpr std::string_view piece_marker = "@@fakellm-piece@@";

void fill_chunks(const std::string& tmpl, const std::vector<std::string>& pieces,
                 std::vector<std::string>& out) {
    const std::string quoted = "\"" + std::string(piece_marker) + "\"";
    const auto at = tmpl.find(quoted);
    const std::string_view head = std::string_view(tmpl).substr(0, at);
    const std::string_view tail = std::string_view(tmpl).substr(at + quoted.size());
    out.reserve(pieces.size());
    for (const auto& piece : pieces) {
        std::string e;
        e.reserve(head.size() + piece.size() + 8 + tail.size());
        e += head;
        e += json::serialize(json::value(json::string_view(piece)));
        e += tail;
        out.push_back(std::move(e));
    }
}

// {"type":<type>,…fields}: one event of the Responses API, its type also in `event:`
std::string responses_event(std::string_view type, json::object fields) {
    json::object ev;
    ev["type"] = type;
    for (auto& kv : fields) ev[kv.key()] = std::move(kv.value());
    return event_block(type, ev);
}

// The Responses API stream: response.created, a reasoning item (thinking), then one output
// item (the text message or the function call) whose deltas are the chunks, then
// response.completed with the usage (or an `error` event for sseError).
stream_plan responses_plan(const step& s, const std::string& model, const usage_numbers& u,
                           const std::vector<std::string>& pieces, const std::string& tool_json,
                           const std::string& n) {
    stream_plan p;
    const bool tool = s.type == step::kind::tool_call;
    const std::string response_id = "resp_fakellm_" + n;
    const auto response = [&](std::string_view status) {
        json::object r;
        r["id"] = response_id;
        r["object"] = "response";
        r["created_at"] = 1700000000;
        r["status"] = status;
        r["model"] = model;
        r["output"] = json::array();
        return r;
    };
    p.head.push_back(responses_event("response.created", {{"response", response("in_progress")}}));
    int output_index = 0;
    if (s.thinking || s.redacted_thinking) {
        const std::string id = "rs_fakellm_" + n;
        json::object item;
        item["id"] = id;
        item["type"] = "reasoning";
        item["summary"] = json::array();
        p.head.push_back(responses_event("response.output_item.added",
                                         {{"output_index", output_index}, {"item", item}}));
        json::array summary;
        if (s.thinking) {
            json::object part;
            part["type"] = "summary_text";
            part["text"] = "";
            p.head.push_back(responses_event("response.reasoning_summary_part.added",
                                             {{"item_id", id},
                                              {"output_index", output_index},
                                              {"summary_index", 0},
                                              {"part", part}}));
            for (const auto& piece : split_chunks(*s.thinking, std::nullopt))
                p.head.push_back(responses_event("response.reasoning_summary_text.delta",
                                                 {{"item_id", id},
                                                  {"output_index", output_index},
                                                  {"summary_index", 0},
                                                  {"delta", piece}}));
            p.head.push_back(responses_event("response.reasoning_summary_text.done",
                                             {{"item_id", id},
                                              {"output_index", output_index},
                                              {"summary_index", 0},
                                              {"text", *s.thinking}}));
            part["text"] = *s.thinking;
            p.head.push_back(responses_event("response.reasoning_summary_part.done",
                                             {{"item_id", id},
                                              {"output_index", output_index},
                                              {"summary_index", 0},
                                              {"part", part}}));
            summary.push_back(std::move(part));
        }
        item["summary"] = std::move(summary);
        item["encrypted_content"] =
            s.redacted_thinking ? *s.redacted_thinking
                                : (s.signature.empty() ? "fakellm-encrypted-" + n : s.signature);
        p.head.push_back(responses_event("response.output_item.done",
                                         {{"output_index", output_index}, {"item", item}}));
        ++output_index;
    }
    const std::string item_id = (tool ? "fc_fakellm_" : "msg_fakellm_") + n;
    json::object item;
    item["id"] = item_id;
    if (tool) {
        item["type"] = "function_call";
        item["status"] = "in_progress";
        item["arguments"] = "";
        item["call_id"] = "call_fakellm_" + n;
        item["name"] = s.tool_name;
    } else {
        item["type"] = "message";
        item["status"] = "in_progress";
        item["content"] = json::array();
        item["role"] = "assistant";
    }
    p.head.push_back(responses_event("response.output_item.added",
                                     {{"output_index", output_index}, {"item", item}}));
    json::object part;
    part["type"] = "output_text";
    part["annotations"] = json::array();
    part["text"] = "";
    if (!tool)
        p.head.push_back(
            responses_event("response.content_part.added", {{"item_id", item_id},
                                                            {"output_index", output_index},
                                                            {"content_index", 0},
                                                            {"part", part}}));
    {
        json::object ev;
        ev["type"] = tool ? "response.function_call_arguments.delta" : "response.output_text.delta";
        ev["item_id"] = item_id;
        ev["output_index"] = output_index;
        if (!tool) ev["content_index"] = 0;
        ev["delta"] = piece_marker;
        fill_chunks(event_block(ev["type"].get_string(), ev), pieces, p.chunks);
    }
    if (s.type == step::kind::sse_error) {
        p.tail.push_back(responses_event(
            "error", {{"code", s.error_type}, {"message", s.error_message}, {"param", nullptr}}));
        return p;
    }
    if (tool) {
        p.tail.push_back(responses_event(
            "response.function_call_arguments.done",
            {{"item_id", item_id}, {"output_index", output_index}, {"arguments", tool_json}}));
        item["arguments"] = tool_json;
    } else {
        p.tail.push_back(
            responses_event("response.output_text.done", {{"item_id", item_id},
                                                          {"output_index", output_index},
                                                          {"content_index", 0},
                                                          {"text", s.text}}));
        part["text"] = s.text;
        p.tail.push_back(
            responses_event("response.content_part.done", {{"item_id", item_id},
                                                           {"output_index", output_index},
                                                           {"content_index", 0},
                                                           {"part", part}}));
        json::array content;
        content.push_back(std::move(part));
        item["content"] = std::move(content);
    }
    item["status"] = "completed";
    p.tail.push_back(responses_event("response.output_item.done",
                                     {{"output_index", output_index}, {"item", item}}));
    json::object r = response("completed");
    json::object usage;
    usage["input_tokens"] = u.input + u.cache_read;
    json::object in_details;
    in_details["cached_tokens"] = u.cache_read;
    usage["input_tokens_details"] = std::move(in_details);
    usage["output_tokens"] = u.output;
    json::object out_details;
    out_details["reasoning_tokens"] = 0;
    usage["output_tokens_details"] = std::move(out_details);
    usage["total_tokens"] = u.input + u.cache_read + u.output;
    r["usage"] = std::move(usage);
    p.tail.push_back(responses_event("response.completed", {{"response", std::move(r)}}));
    return p;
}

}  // namespace

stream_plan plan_stream(const step& s, api kind, const std::string& model,
                        std::int64_t input_tokens, std::size_t call_number) {
    stream_plan p;
    const bool tool = s.type == step::kind::tool_call;
    const std::string tool_json = tool ? json::serialize(s.tool_arguments) : std::string();
    const std::vector<std::string> pieces =
        split_chunks(tool ? std::string_view(tool_json) : std::string_view(s.text), s.chunks);
    const usage_numbers u = usage_of(s, input_tokens, tool ? tool_json.size() : s.text.size());
    const std::string n = std::to_string(call_number);

    if (kind == api::responses) return responses_plan(s, model, u, pieces, tool_json, n);
    if (kind == api::openai) {
        const std::string id = "chatcmpl-fakellm-" + n;
        {
            json::object delta;
            delta["role"] = "assistant";
            if (tool) {
                delta["content"] = nullptr;
                json::object fn;
                fn["name"] = s.tool_name;
                fn["arguments"] = "";
                json::object tc;
                tc["index"] = 0;
                tc["id"] = "call_fakellm_" + n;
                tc["type"] = "function";
                tc["function"] = std::move(fn);
                json::array tcs;
                tcs.push_back(std::move(tc));
                delta["tool_calls"] = std::move(tcs);
            } else {
                delta["content"] = "";
            }
            auto c = openai_chunk(id, model);
            c["choices"] = openai_choice(std::move(delta), nullptr);
            p.head.push_back(data_line(c));
        }
        // thinking: the reasoning_content deltas of compatible servers (llama.cpp, vLLM)
        if (s.thinking)
            for (const auto& piece : split_chunks(*s.thinking, std::nullopt)) {
                json::object delta;
                delta["reasoning_content"] = piece;
                auto c = openai_chunk(id, model);
                c["choices"] = openai_choice(std::move(delta), nullptr);
                p.head.push_back(data_line(c));
            }
        {
            json::object delta;
            if (tool) {
                json::object fn;
                fn["arguments"] = piece_marker;
                json::object tc;
                tc["index"] = 0;
                tc["function"] = std::move(fn);
                json::array tcs;
                tcs.push_back(std::move(tc));
                delta["tool_calls"] = std::move(tcs);
            } else {
                delta["content"] = piece_marker;
            }
            auto c = openai_chunk(id, model);
            c["choices"] = openai_choice(std::move(delta), nullptr);
            fill_chunks(data_line(c), pieces, p.chunks);
        }
        if (s.type == step::kind::sse_error) {
            json::object err;
            err["message"] = s.error_message;
            err["type"] = s.error_type;
            err["code"] = nullptr;
            json::object e;
            e["error"] = std::move(err);
            p.tail.push_back(data_line(e));
            return p;
        }
        {
            auto c = openai_chunk(id, model);
            c["choices"] = openai_choice(json::object(), tool ? "tool_calls" : "stop");
            p.tail.push_back(data_line(c));
        }
        {
            auto c = openai_chunk(id, model);
            c["choices"] = json::array();
            json::object usage;
            usage["prompt_tokens"] = u.input + u.cache_read;
            usage["completion_tokens"] = u.output;
            usage["total_tokens"] = u.input + u.cache_read + u.output;
            json::object details;
            details["cached_tokens"] = u.cache_read;
            usage["prompt_tokens_details"] = std::move(details);
            c["usage"] = std::move(usage);
            p.tail.push_back(data_line(c));
        }
        p.tail.emplace_back("data: [DONE]\n\n");
        return p;
    }

    // Anthropic Messages
    {
        json::object usage;
        usage["input_tokens"] = u.input;
        usage["cache_creation_input_tokens"] = u.cache_write;
        usage["cache_read_input_tokens"] = u.cache_read;
        usage["output_tokens"] = 1;
        json::object msg;
        msg["id"] = "msg_fakellm_" + n;
        msg["type"] = "message";
        msg["role"] = "assistant";
        msg["model"] = model;
        msg["content"] = json::array();
        msg["stop_reason"] = nullptr;
        msg["stop_sequence"] = nullptr;
        msg["usage"] = std::move(usage);
        json::object ev;
        ev["type"] = "message_start";
        ev["message"] = std::move(msg);
        p.head.push_back(event_block("message_start", ev));
    }
    // a thinking block first (index 0): its start, its thinking in deltas, its signature
    const bool has_thinking = s.thinking || s.redacted_thinking;
    const int index = has_thinking ? 1 : 0;  // the reply's block
    if (has_thinking) {
        json::object block;
        if (s.redacted_thinking) {
            block["type"] = "redacted_thinking";
            block["data"] = *s.redacted_thinking;
        } else {
            block["type"] = "thinking";
            block["thinking"] = "";
            block["signature"] = "";
        }
        json::object ev;
        ev["type"] = "content_block_start";
        ev["index"] = 0;
        ev["content_block"] = std::move(block);
        p.head.push_back(event_block("content_block_start", ev));
        if (s.thinking) {
            for (const auto& piece : split_chunks(*s.thinking, std::nullopt)) {
                json::object delta;
                delta["type"] = "thinking_delta";
                delta["thinking"] = piece;
                json::object d;
                d["type"] = "content_block_delta";
                d["index"] = 0;
                d["delta"] = std::move(delta);
                p.head.push_back(event_block("content_block_delta", d));
            }
            json::object delta;
            delta["type"] = "signature_delta";
            delta["signature"] = s.signature.empty() ? "fakellm-signature-" + n : s.signature;
            json::object d;
            d["type"] = "content_block_delta";
            d["index"] = 0;
            d["delta"] = std::move(delta);
            p.head.push_back(event_block("content_block_delta", d));
        }
        json::object stop;
        stop["type"] = "content_block_stop";
        stop["index"] = 0;
        p.head.push_back(event_block("content_block_stop", stop));
    }
    const bool has_block = tool || !s.text.empty() || s.type == step::kind::text;
    if (has_block) {
        json::object block;
        if (tool) {
            block["type"] = "tool_use";
            block["id"] = "toolu_fakellm_" + n;
            block["name"] = s.tool_name;
            block["input"] = json::object();
        } else {
            block["type"] = "text";
            block["text"] = "";
        }
        json::object ev;
        ev["type"] = "content_block_start";
        ev["index"] = index;
        ev["content_block"] = std::move(block);
        p.head.push_back(event_block("content_block_start", ev));
    }
    {
        json::object ping;
        ping["type"] = "ping";
        p.head.push_back(event_block("ping", ping));
    }
    {
        json::object delta;
        if (tool) {
            delta["type"] = "input_json_delta";
            delta["partial_json"] = piece_marker;
        } else {
            delta["type"] = "text_delta";
            delta["text"] = piece_marker;
        }
        json::object ev;
        ev["type"] = "content_block_delta";
        ev["index"] = index;
        ev["delta"] = std::move(delta);
        fill_chunks(event_block("content_block_delta", ev), pieces, p.chunks);
    }
    if (s.type == step::kind::sse_error) {
        json::object err;
        err["type"] = s.error_type;
        err["message"] = s.error_message;
        json::object ev;
        ev["type"] = "error";
        ev["error"] = std::move(err);
        p.tail.push_back(event_block("error", ev));
        return p;
    }
    if (has_block) {
        json::object ev;
        ev["type"] = "content_block_stop";
        ev["index"] = index;
        p.tail.push_back(event_block("content_block_stop", ev));
    }
    {
        json::object delta;
        delta["stop_reason"] = tool ? "tool_use" : "end_turn";
        delta["stop_sequence"] = nullptr;
        json::object usage;
        usage["output_tokens"] = u.output;
        json::object ev;
        ev["type"] = "message_delta";
        ev["delta"] = std::move(delta);
        ev["usage"] = std::move(usage);
        p.tail.push_back(event_block("message_delta", ev));
    }
    {
        json::object ev;
        ev["type"] = "message_stop";
        p.tail.push_back(event_block("message_stop", ev));
    }
    return p;
}

}  // namespace coagent::fakellm

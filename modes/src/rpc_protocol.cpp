#include <coagent/modes/rpc_protocol.hpp>
#include <coagent/runtime/json_input.hpp>

#include <boost/json/serialize.hpp>

#include <array>
#include <cstring>
#include <utility>

namespace coagent::rpc {

// ---- line_reader ------------------------------------------------------------------------

line_reader::item line_reader::take_line() {
    item it;
    it.size = buf_.size();
    if (!buf_.empty() && buf_.back() == '\r') buf_.pop_back();
    it.text = std::move(buf_);
    buf_ = std::string();
    return it;
}

void line_reader::feed(std::string_view data, std::vector<item>& out) {
    while (!data.empty()) {
        const auto* lf = static_cast<const char*>(std::memchr(data.data(), '\n', data.size()));
        const std::size_t chunk = lf ? static_cast<std::size_t>(lf - data.data()) : data.size();
        if (discarding_) {
            discarded_ += chunk;
        } else if (buf_.size() + chunk > max_) {
            // over the limit: drop what we hold and skip to the next LF
            discarding_ = true;
            discarded_ = buf_.size() + chunk;
            buf_ = std::string();  // release the memory, not just clear it
        } else {
            buf_.append(data.data(), chunk);
        }
        if (!lf) return;
        if (discarding_) {
            item it;
            it.type = item::kind::too_long;
            it.size = discarded_;
            out.push_back(std::move(it));
            discarding_ = false;
            discarded_ = 0;
        } else {
            out.push_back(take_line());
        }
        data.remove_prefix(chunk + 1);
    }
}

std::optional<line_reader::item> line_reader::finish() {
    if (discarding_) {
        item it;
        it.type = item::kind::too_long;
        it.size = discarded_;
        discarding_ = false;
        discarded_ = 0;
        return it;
    }
    if (buf_.empty()) return std::nullopt;
    return take_line();
}

// ---- UTF-8 ------------------------------------------------------------------------------

std::optional<std::size_t> find_invalid_utf8(std::string_view s) noexcept {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const std::size_t n = s.size();
    std::size_t i = 0;
    while (i < n) {
        const unsigned char c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        std::size_t len = 0;
        unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c == 0xE0) {
            len = 3, lo = 0xA0;  // no overlong forms
        } else if (c == 0xED) {
            len = 3, hi = 0x9F;  // no surrogates
        } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
            len = 3;
        } else if (c == 0xF0) {
            len = 4, lo = 0x90;
        } else if (c >= 0xF1 && c <= 0xF3) {
            len = 4;
        } else if (c == 0xF4) {
            len = 4, hi = 0x8F;  // not above U+10FFFF
        } else {
            return i;
        }
        if (i + len > n) return i;
        if (p[i + 1] < lo || p[i + 1] > hi) return i;
        for (std::size_t k = 2; k < len; ++k)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF) return i;
        i += len;
    }
    return std::nullopt;
}

// ---- commands ---------------------------------------------------------------------------

namespace {

struct name_entry {
    command_kind kind;
    std::string_view name;
};

constexpr std::array<name_entry, 19> command_names{{
    {command_kind::prompt, "prompt"},
    {command_kind::steer, "steer"},
    {command_kind::follow_up, "follow_up"},
    {command_kind::abort, "abort"},
    {command_kind::abort_retry, "abort_retry"},
    {command_kind::retry_now, "retry_now"},
    {command_kind::set_auto_retry, "set_auto_retry"},
    {command_kind::set_auto_compaction, "set_auto_compaction"},
    {command_kind::compact, "compact"},
    {command_kind::get_state, "get_state"},
    {command_kind::get_messages, "get_messages"},
    {command_kind::get_last_assistant_text, "get_last_assistant_text"},
    {command_kind::new_session, "new_session"},
    {command_kind::set_model, "set_model"},
    {command_kind::get_available_models, "get_available_models"},
    {command_kind::get_session_stats, "get_session_stats"},
    {command_kind::set_session_name, "set_session_name"},
    {command_kind::set_thinking_level, "set_thinking_level"},
    {command_kind::cycle_thinking_level, "cycle_thinking_level"},
}};

/// Compact JSON of a value for an error message, cut at 80 characters.
std::string shown(const json::value& v) {
    return json_excerpt(v);
}

std::string_view kind_name(const json::value& v) noexcept {
    switch (v.kind()) {
        case json::kind::null:
            return "null";
        case json::kind::bool_:
            return "boolean";
        case json::kind::int64:
        case json::kind::uint64:
        case json::kind::double_:
            return "number";
        case json::kind::string:
            return "string";
        case json::kind::array:
            return "array";
        case json::kind::object:
            return "object";
    }
    return "value";
}

/// Field access with errors that name the field; the first error wins.
class fields {
  public:
    explicit fields(const json::object& o) : o_(o) {}

    std::string required_string(std::string_view key) {
        const json::value* v = o_.if_contains(key);
        if (!v) {
            fail("Missing field \"" + std::string(key) + "\" (a string)");
            return {};
        }
        if (!v->is_string()) {
            wrong(key, "a string", *v);
            return {};
        }
        return std::string(v->get_string());
    }
    std::optional<std::string> optional_string(std::string_view key) {
        const json::value* v = o_.if_contains(key);
        if (!v || v->is_null()) return std::nullopt;
        if (!v->is_string()) {
            wrong(key, "a string", *v);
            return std::nullopt;
        }
        return std::string(v->get_string());
    }
    bool required_bool(std::string_view key) {
        const json::value* v = o_.if_contains(key);
        if (!v) {
            fail("Missing field \"" + std::string(key) + "\" (a boolean)");
            return false;
        }
        if (!v->is_bool()) {
            wrong(key, "a boolean", *v);
            return false;
        }
        return v->get_bool();
    }
    /// `images`: absent, null, or an array of {type?:"image", data:<base64>, mimeType:"image/…"}
    /// (the reference's ImageContent); each error names the element and its field.
    std::vector<image_block> images() {
        std::vector<image_block> out;
        const json::value* v = o_.if_contains("images");
        if (!v || v->is_null()) return out;
        if (!v->is_array()) {
            wrong("images", "an array", *v);
            return out;
        }
        const auto& a = v->get_array();
        for (std::size_t i = 0; i < a.size(); ++i) {
            const std::string at = "images[" + std::to_string(i) + "]";
            if (!a[i].is_object()) {
                wrong(at, "an object {type:\"image\",data,mimeType}", a[i]);
                return out;
            }
            const auto& io = a[i].get_object();
            if (const auto* t = io.if_contains("type");
                t && !(t->is_string() && t->get_string() == "image")) {
                wrong(at + ".type", "\"image\"", *t);
                return out;
            }
            image_block im;
            for (auto [key, dest] : {std::pair{"data", &im.data}, {"mimeType", &im.mime_type}}) {
                const json::value* f = io.if_contains(key);
                if (!f) {
                    fail("Missing field \"" + at + "." + key + "\" (a string)");
                    return out;
                }
                if (!f->is_string()) {
                    wrong(at + "." + key, "a string", *f);
                    return out;
                }
                *dest = f->get_string();
            }
            if (auto e = image_error(im)) {
                fail("Field \"" + at + "\": " + *e);
                return out;
            }
            out.push_back(std::move(im));
        }
        return out;
    }
    void fail(std::string e) {
        if (!error) error = std::move(e);
    }
    void wrong(std::string_view key, std::string_view expected, const json::value& v) {
        fail("Field \"" + std::string(key) + "\" must be " + std::string(expected) + ", found " +
             std::string(kind_name(v)) + " " + shown(v));
    }

    std::optional<std::string> error;

  private:
    const json::object& o_;
};

/// The `id` of a line that is JSON apart from invalid UTF-8, so the error can echo it: a
/// number, or a string that is valid UTF-8 itself.
std::optional<json::value> salvage_id(std::string_view line) {
    json::parse_options po;
    po.allow_invalid_utf8 = true;
    auto parsed = parse_json_strict(line, po);  // an id beyond the double range is not echoed
    if (!parsed) return std::nullopt;
    const json::value& v = parsed.value;
    if (!v.is_object()) return std::nullopt;
    const json::value* id = v.get_object().if_contains("id");
    if (!id) return std::nullopt;
    if (id->is_number() || id->is_null()) return *id;
    if (id->is_string() && !find_invalid_utf8(id->get_string())) return *id;
    return std::nullopt;
}

}  // namespace

std::string_view to_string(command_kind k) noexcept {
    for (const auto& e : command_names)
        if (e.kind == k) return e.name;
    return "unknown";
}

std::optional<command_kind> command_from_string(std::string_view s) noexcept {
    for (const auto& e : command_names)
        if (e.name == s) return e.kind;
    return std::nullopt;
}

parse_result parse_command(std::string_view line) {
    if (auto bad = find_invalid_utf8(line))
        return command_error{
            salvage_id(line), "parse",
            "Failed to parse command: invalid UTF-8 at byte " + std::to_string(*bad)};

    // default limits: depth 32, strict JSON, no number beyond the double range (it would be
    // echoed as `Infinity`)
    const auto parsed = parse_json_strict(line);
    if (const auto& e = parsed.error) {
        if (e->non_finite)
            return command_error{std::nullopt, "parse",
                                 "Failed to parse command: " + e->describe()};
        return command_error{std::nullopt, "parse",
                             "Failed to parse command: " + e->message + " (at byte " +
                                 std::to_string(e->offset) + ")"};
    }
    const json::value& v = parsed.value;
    if (!v.is_object())
        return command_error{
            std::nullopt, "parse",
            "Failed to parse command: expected a JSON object, found " + std::string(kind_name(v))};
    const json::object& o = v.get_object();

    command c;
    if (const auto* id = o.if_contains("id")) c.id = *id;
    const json::value* type = o.if_contains("type");
    if (!type)
        return command_error{c.id, "parse", "Missing field \"type\" (a string naming the command)"};
    if (!type->is_string())
        return command_error{c.id, "parse",
                             "Field \"type\" must be a string, found " +
                                 std::string(kind_name(*type)) + " " + shown(*type)};
    const std::string name(type->get_string());
    const auto kind = command_from_string(name);
    if (!kind) return command_error{c.id, name, "Unknown command: " + name};
    c.kind = *kind;

    fields f(o);
    switch (c.kind) {
        case command_kind::prompt: {
            c.message = f.required_string("message");
            c.images = f.images();
            if (auto b = f.optional_string("streamingBehavior")) {
                if (*b == "steer")
                    c.behavior = streaming_behavior::steer;
                else if (*b == "followUp")
                    c.behavior = streaming_behavior::follow_up;
                else
                    f.fail("Field \"streamingBehavior\" must be \"steer\" or \"followUp\", found " +
                           shown(o.at("streamingBehavior")));
            }
            break;
        }
        case command_kind::steer:
        case command_kind::follow_up:
            c.message = f.required_string("message");
            c.images = f.images();
            break;
        case command_kind::set_auto_retry:
        case command_kind::set_auto_compaction:
            c.enabled = f.required_bool("enabled");
            break;
        case command_kind::compact:
            c.custom_instructions = f.optional_string("customInstructions");
            break;
        case command_kind::new_session:
            c.parent_session = f.optional_string("parentSession");
            break;
        case command_kind::set_thinking_level: {
            const std::string level = f.required_string("level");
            if (f.error) break;
            if (auto l = thinking_level_from_string(level))
                c.level = *l;
            else
                f.fail(
                    "Field \"level\" must be one of off, minimal, low, medium, high, xhigh, "
                    "found " +
                    shown(o.at("level")));
            break;
        }
        case command_kind::set_model:
            c.provider = f.required_string("provider");
            c.model_id = f.required_string("modelId");
            break;
        case command_kind::set_session_name:
            c.name = f.required_string("name");
            break;
        case command_kind::abort:
        case command_kind::abort_retry:
        case command_kind::retry_now:
        case command_kind::get_state:
        case command_kind::get_messages:
        case command_kind::get_last_assistant_text:
        case command_kind::get_available_models:
        case command_kind::get_session_stats:
        case command_kind::cycle_thinking_level:
            break;
    }
    if (f.error) return command_error{c.id, name, std::move(*f.error)};
    return c;
}

json::object to_json(const command& c) {
    using k = command_kind;
    json::object o;
    o["type"] = to_string(c.kind);
    if (c.kind == k::prompt || c.kind == k::steer || c.kind == k::follow_up) {
        o["message"] = c.message;
        if (!c.images.empty()) {
            json::array images;
            for (const auto& im : c.images) {
                json::object io;
                io["type"] = "image";
                io["data"] = im.data;
                io["mimeType"] = im.mime_type;
                images.emplace_back(std::move(io));
            }
            o["images"] = std::move(images);
        }
    }
    if (c.kind == k::prompt && c.behavior == streaming_behavior::steer)
        o["streamingBehavior"] = "steer";
    if (c.kind == k::prompt && c.behavior == streaming_behavior::follow_up)
        o["streamingBehavior"] = "followUp";
    if (c.kind == k::set_auto_retry || c.kind == k::set_auto_compaction) o["enabled"] = c.enabled;
    if (c.kind == k::compact && c.custom_instructions)
        o["customInstructions"] = *c.custom_instructions;
    if (c.kind == k::new_session && c.parent_session) o["parentSession"] = *c.parent_session;
    if (c.kind == k::set_model) {
        o["provider"] = c.provider;
        o["modelId"] = c.model_id;
    }
    if (c.kind == k::set_session_name) o["name"] = c.name;
    if (c.kind == k::set_thinking_level) o["level"] = to_string(c.level);
    if (c.id) o["id"] = *c.id;
    return o;
}

command_error too_long_error(std::size_t size, std::size_t limit) {
    return command_error{std::nullopt, "parse",
                         "Failed to parse command: line of " + std::to_string(size) +
                             " bytes exceeds the limit of " + std::to_string(limit) +
                             " bytes; it was skipped"};
}

// ---- responses --------------------------------------------------------------------------

namespace {

json::object envelope(const std::optional<json::value>& id, std::string_view command,
                      bool success) {
    json::object o;
    if (id) o["id"] = *id;
    o["type"] = "response";
    o["command"] = command;
    o["success"] = success;
    return o;
}

}  // namespace

json::object success_response(const std::optional<json::value>& id, std::string_view command,
                              std::optional<json::value> data) {
    json::object o = envelope(id, command, true);
    if (data) o["data"] = std::move(*data);
    return o;
}

json::object error_response(const std::optional<json::value>& id, std::string_view command,
                            std::string_view error) {
    json::object o = envelope(id, command, false);
    o["error"] = error;
    return o;
}

json::object error_response(const command_error& e) {
    return error_response(e.id, e.command, e.error);
}

std::string to_line(const json::object& o) {
    std::string s = json::serialize(o);
    s.push_back('\n');
    return s;
}

}  // namespace coagent::rpc

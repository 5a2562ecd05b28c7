// Wire formats of the HTTP providers (see http_protocol.hpp): the API names, the request body
// and stream decoder of each API (http_openai.cpp, http_anthropic.cpp, http_openai_responses.cpp),
// what the decoders share, and URLs. Response headers and error texts: http_headers.cpp. Pure
// functions and small state machines: unit-testable without sockets.

#include "http_wire.hpp"

#include <boost/asio/ip/address.hpp>

namespace coagent::http_protocol {

using namespace detail;

std::string_view to_string(api_kind k) noexcept {
    switch (k) {
        case api_kind::openai_completions:
            return "openai-completions";
        case api_kind::anthropic_messages:
            return "anthropic-messages";
        case api_kind::openai_responses:
            return "openai-responses";
    }
    return "openai-completions";
}

std::optional<api_kind> api_from_string(std::string_view s) noexcept {
    if (s == "openai-completions") return api_kind::openai_completions;
    if (s == "anthropic-messages") return api_kind::anthropic_messages;
    if (s == "openai-responses") return api_kind::openai_responses;
    return std::nullopt;
}

std::string_view endpoint_path(api_kind k) noexcept {
    switch (k) {
        case api_kind::openai_completions:
            return "/chat/completions";
        case api_kind::anthropic_messages:
            return "/messages";
        case api_kind::openai_responses:
            return "/responses";
    }
    return "/chat/completions";
}

namespace {

// The reference's downgradeUnsupportedImages: each run of images becomes one placeholder text
// (none after a placeholder already there).
std::vector<content_block> replace_images(const std::vector<content_block>& content,
                                          std::string_view placeholder) {
    std::vector<content_block> out;
    out.reserve(content.size());
    bool previous_was_placeholder = false;
    for (const auto& b : content) {
        if (std::holds_alternative<image_block>(b)) {
            if (!previous_was_placeholder) out.emplace_back(text_block{std::string(placeholder)});
            previous_was_placeholder = true;
            continue;
        }
        out.push_back(b);
        const auto* t = std::get_if<text_block>(&b);
        previous_was_placeholder = t && t->text == placeholder;
    }
    return out;
}

}  // namespace

std::optional<provider_request> without_images(const provider_request& req) {
    if (req.model.image_input) return std::nullopt;
    std::optional<provider_request> copy;
    for (std::size_t i = 0; i < req.messages.size(); ++i) {
        const message& m = *req.messages[i];
        if (m.role == message_role::assistant || image_count(m) == 0) continue;
        if (!copy) copy = req;
        auto replaced = std::make_shared<message>(m);
        replaced->content =
            replace_images(m.content, m.role == message_role::user ? user_image_placeholder
                                                                   : tool_image_placeholder);
        copy->messages[i] = std::move(replaced);
    }
    return copy;
}

std::string build_request_body(api_kind k, const provider_request& original) {
    // a model without "image" in its input gets placeholders instead of images
    const std::optional<provider_request> downgraded = without_images(original);
    const provider_request& req = downgraded ? *downgraded : original;
    std::string body;
    switch (k) {
        case api_kind::openai_completions:
            body = openai_body(req);
            break;
        case api_kind::anthropic_messages:
            body = anthropic_body(req);
            break;
        case api_kind::openai_responses:
            body = openai_responses_body(req);
            break;
    }
    if (req.fragments) req.fragments->trim(req.messages.size());  // the conversation got shorter
    return body;
}

std::unique_ptr<stream_decoder> stream_decoder::make(api_kind k) {
    switch (k) {
        case api_kind::openai_completions:
            return make_openai_decoder();
        case api_kind::anthropic_messages:
            return make_anthropic_decoder();
        case api_kind::openai_responses:
            return make_openai_responses_decoder();
    }
    return make_openai_decoder();
}

void stream_decoder::fail(message& out, std::string text, std::string type) {
    state_ = state::error;             // first: finish_text_and_tools must not fail again
    (void)finish_text_and_tools(out);  // a failed reply keeps the arguments that parse
    out.stop = stop_reason::error;
    out.error_message = std::move(text);
    if (!type.empty()) out.error_type = std::move(type);
    state_ = state::error;
}

void stream_decoder::fail_error_event(message& out, std::string message, std::string type) {
    std::string text = stream_error_text(std::move(message), type);
    fail(out, std::move(text), std::move(type));
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

const json::object* stream_decoder::parse_event(const sse_event& ev, message& out,
                                                event_scratch& scratch) {
    auto parsed = parse_json_strict(ev.data, {}, json::storage_ptr(&scratch.resource));
    if (!parsed || !parsed.value.is_object()) {
        fail(out, "Invalid stream data from the provider: " +
                      (parsed.error ? parsed.error->describe() : std::string("not an object")));
        return nullptr;
    }
    scratch.value = std::move(parsed.value);  // the same resource: moved, not copied
    return &scratch.value.get_object();
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

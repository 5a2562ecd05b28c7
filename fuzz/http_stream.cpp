// Fuzz target: an HTTP response body as coagent reads it from a provider — the SSE stream
// through the parser into the three stream decoders (OpenAI chat completions, OpenAI Responses,
// Anthropic Messages),
// and the same bytes as an error body, as response headers (retry hints) and as an HTTP-date.
// Invariants: a decoder ends in done or error; an error has a text and stopReason "error"; a
// done reply has a success stop reason; the message serialises to strict JSON that reads back
// (what the session file and RPC write); retry hints are positive. The reply budget (issue 16):
// decoded again under a small limit, what the reply holds (text, tool-call names and ids, 256
// bytes a block) never exceeds it, names stay within 256 bytes and ids within 512.

#include "fuzz_support.hpp"
#include "known_bugs.hpp"

#include <coagent/providers/http_protocol.hpp>
#include <coagent/providers/sse_parser.hpp>
#include <coagent/runtime/time_math.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

using namespace coagent;
namespace json = boost::json;
namespace hp = coagent::http_protocol;

namespace {

struct counting_observer final : stream_observer {
    int starts = 0;
    std::size_t delta_bytes = 0;
    void on_message_start(const message&) override { ++starts; }
    void on_text_delta(const message&, std::string_view d) override { delta_bytes += d.size(); }
};

void decode(std::string_view body, hp::api_kind api, std::size_t max_reply) {
    message out;
    out.role = message_role::assistant;
    counting_observer obs;
    auto decoder = hp::stream_decoder::make(api);
    decoder->set_max_reply_bytes(max_reply);
    sse_parser sse(1 << 16);
    std::size_t pos = 0;
    bool known_bug = false;
    for (std::size_t n : fuzz::chunking(body, 64, static_cast<std::uint64_t>(api))) {
        const auto s = sse.feed(body.substr(pos, n), [&](const sse_event& ev) {
            boost::system::error_code ec;
            const auto v = json::parse(ev.data, ec);
            if (!ec && fuzz::skip_huge_numbers(v))
                known_bug = true;  // UB in int_of / the usage sum
            if (!known_bug) decoder->on_event(ev, out, obs);
        });
        pos += n;
        if (known_bug) return;
        if (s != sse_parser::status::ok || decoder->status() == hp::stream_decoder::state::error)
            break;
    }
    sse.finish();
    decoder->on_end(out);
    FUZZ_CHECK(decoder->status() != hp::stream_decoder::state::streaming);
    // the budget: everything held counts, and never more than the limit
    std::size_t held = 0;
    for (const auto& b : out.content) {
        held += hp::reply_budget::block_bytes;
        if (const auto* t = std::get_if<text_block>(&b)) {
            held += t->text.size();
        } else if (const auto* c = std::get_if<tool_call_block>(&b)) {
            FUZZ_CHECK(c->name.size() <= hp::reply_budget::max_tool_name_bytes);
            FUZZ_CHECK(c->id.size() <= hp::reply_budget::max_tool_id_bytes);
            held += c->name.size() + c->id.size();
        }
    }
    FUZZ_CHECK(held <= decoder->reply_bytes());
    FUZZ_CHECK(decoder->reply_bytes() <= max_reply);
    if (decoder->status() == hp::stream_decoder::state::error) {
        FUZZ_CHECK(out.stop == stop_reason::error);
        FUZZ_CHECK(out.error_message && !out.error_message->empty());
    } else {
        FUZZ_CHECK(out.stop == stop_reason::stop || out.stop == stop_reason::length ||
                   out.stop == stop_reason::tool_use);
    }
    // what the session file and RPC events carry: strict JSON that reads back
    const json::object as_json = to_json(out);
    if (fuzz::skip_non_finite(as_json)) return;  // known bug: tool arguments written as Infinity
    const std::string line = json::serialize(as_json);
    boost::system::error_code ec;
    const json::value back = json::parse(line, ec);
    FUZZ_CHECK(!ec);
    const message again = message_from_json(back);
    FUZZ_CHECK(again.stop == out.stop);
    FUZZ_CHECK(text_of(again) == text_of(out));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = fuzz::as_text(data, size);
    for (const std::size_t max_reply : {hp::default_max_reply_bytes, std::size_t{1024}}) {
        decode(text, hp::api_kind::openai_completions, max_reply);
        decode(text, hp::api_kind::anthropic_messages, max_reply);
        decode(text, hp::api_kind::openai_responses, max_reply);
    }

    // an error body
    for (int status : {400, 429, 503}) {
        const auto d = hp::http_error_text(status, text);
        FUZZ_CHECK(d.text.starts_with(std::to_string(status) + " "));
        std::string t = d.text;
        hp::append_retry_hint(t, 1500);
        hp::append_retry_hint(t, 1500);  // never twice
        FUZZ_CHECK(t.size() >= d.text.size());
    }

    // response headers, one "name: value" a line
    hp::header_list headers;
    std::size_t start = 0;
    while (start <= text.size()) {
        std::size_t end = text.find('\n', start);
        if (end == std::string_view::npos) end = text.size();
        const auto line = text.substr(start, end - start);
        if (auto colon = line.find(':'); colon != std::string_view::npos)
            headers.emplace_back(std::string(line.substr(0, colon)),
                                 std::string(line.substr(colon + 1)));
        start = end + 1;
    }
    for (std::int64_t now :
         {std::int64_t{0}, std::int64_t{1'700'000'000'000}, INT64_MAX, INT64_MIN}) {
        if (auto hint = hp::retry_hint_from_headers(headers, now)) FUZZ_CHECK(*hint > 0);
    }
    (void)hp::should_retry_header(headers);
    (void)coagent::parse_http_date(text);
    (void)coagent::parse_http_date(text, coagent::day_check::up_to_31);
    return 0;
}

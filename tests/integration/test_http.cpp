// The HTTP layer: the sans-io SSE parser and wire formats, coagent-fakellm's script, and the
// providers over loopback against coagent-fakellm (real sockets, in process), incl. https with a
// test CA generated at test time.

#include "http/loopback.hpp"
#include "support/expected_events.hpp"

#include <coagent/classify/classify.hpp>
#include <coagent/modes/app.hpp>
#include <coagent/providers/http_protocol.hpp>
#include <coagent/providers/sse_parser.hpp>
#include <coagent/providers/stream_deadline.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>

using namespace coagent;
using namespace coagent::test;
using api_kind = http_protocol::api_kind;
using strings = std::vector<std::string>;

namespace {

std::vector<sse_event> parse_all(std::string_view bytes, std::size_t chunk,
                                 std::size_t max = sse_parser::default_max_event_bytes) {
    sse_parser p(max);
    std::vector<sse_event> out;
    for (std::size_t i = 0; i < bytes.size(); i += chunk)
        p.feed(bytes.substr(i, chunk), [&](const sse_event& e) { out.push_back(e); });
    p.finish();
    return out;
}

bool retryable(const message& m) {
    return classify(m, model_info{"fake", "fake-model", "x", 32000, 4096}, 1'700'000'000'000)
        .retryable();
}

}  // namespace

// ---- SSE parser ----------------------------------------------------------------------------

TEST_CASE("sse parser: events, fields and line endings at every chunk size", "[http][sse]") {
    const std::string stream =
        "\xEF\xBB\xBF"  // BOM
        ": a comment\r\n"
        "event: message_start\r\n"
        "data: {\"a\":1}\r\n"
        "\r\n"
        "data:no space\n"
        "data:  two spaces\n"
        "id: 7\n"
        "retry: 1500\n"
        "\n"
        "event: ping\r"
        "data\r"
        "\r"
        "event: dropped-without-data\n"
        "\n"
        "field-unknown: x\n"
        "data: last\n"
        "\n"
        "data: unterminated at the end";
    for (std::size_t chunk :
         {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{7}, stream.size()}) {
        INFO("chunk size " << chunk);
        auto ev = parse_all(stream, chunk);
        REQUIRE(ev.size() == 4);
        CHECK(ev[0].type == "message_start");
        CHECK(ev[0].data == "{\"a\":1}");
        CHECK(ev[1].type == "message");
        CHECK(ev[1].data == "no space\n two spaces");
        CHECK(ev[1].id == "7");
        CHECK(ev[1].retry_ms == 1500);
        CHECK(ev[2].type == "ping");
        CHECK(ev[2].data.empty());
        CHECK(ev[2].id == "7");  // the last event id persists
        CHECK_FALSE(ev[2].retry_ms);
        CHECK(ev[3].data == "last");
    }
}

TEST_CASE("sse parser: a bounded event size stops the parser", "[http][sse]") {
    sse_parser p(64);
    int n = 0;
    auto on = [&](const sse_event&) { ++n; };
    CHECK(p.feed("data: small\n\n", on) == sse_parser::status::ok);
    CHECK(n == 1);
    const std::string big = "data: " + std::string(100, 'x');
    CHECK(p.feed(big.substr(0, 30), on) == sse_parser::status::ok);
    CHECK(p.feed(big.substr(30), on) == sse_parser::status::event_too_large);
    CHECK(p.feed("\n\ndata: more\n\n", on) == sse_parser::status::event_too_large);
    CHECK(n == 1);
    // many lines of one event count together
    sse_parser q(64);
    sse_parser::status s = sse_parser::status::ok;
    for (int i = 0; i < 20 && s == sse_parser::status::ok; ++i)
        s = q.feed("data: 0123456789\n", on);
    CHECK(s == sse_parser::status::event_too_large);
    q.reset();
    CHECK(q.feed("data: ok\n\n", on) == sse_parser::status::ok);
    CHECK(n == 2);
}

TEST_CASE("sse parser: a CR at a chunk end and a LF at the next start are one line break",
          "[http][sse]") {
    auto ev = parse_all("data: a\r\n\r\ndata: b\r\n\r\n", 8);
    REQUIRE(ev.size() == 2);
    CHECK(ev[0].data == "a");
    CHECK(ev[1].data == "b");
}

// ---- wire formats ----------------------------------------------------------------------------

TEST_CASE("http error text: the reference's forms", "[http][protocol]") {
    using http_protocol::http_error_text;
    CHECK(
        http_error_text(503, R"({"error":{"message":"Service Unavailable: upstream overloaded"}})")
            .text == "503 Service Unavailable: upstream overloaded");
    CHECK(http_error_text(503, "").text == "503 status code (no body)");
    CHECK(http_error_text(502, "  \n").text == "502 status code (no body)");
    CHECK(http_error_text(500, "fakellm script exhausted").text == "500 fakellm script exhausted");
    auto a = http_error_text(
        529, R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
    CHECK(a.text == "529 Overloaded");
    CHECK(a.type == "overloaded_error");
    auto o = http_error_text(
        429,
        R"({"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}})");
    CHECK(o.text == "429 You exceeded your current quota");
    CHECK(o.type == "insufficient_quota");
    CHECK(http_error_text(400, R"({"detail":"bad"})").text == R"(400 {"detail":"bad"})");
    CHECK(http_error_text(404, R"({"message":"no such model"})").text == "404 no such model");
}

namespace {

struct null_observer final : stream_observer {
    void on_message_start(const message&) override {}
    void on_text_delta(const message&, std::string_view) override {}
};

// Decodes `body` (an SSE stream) with a fresh decoder of `api`.
message decode_stream(api_kind api, std::string_view body,
                      std::size_t max_reply = http_protocol::default_max_reply_bytes) {
    message out;
    out.role = message_role::assistant;
    null_observer obs;
    auto d = http_protocol::stream_decoder::make(api);
    d->set_max_reply_bytes(max_reply);
    sse_parser p;
    p.feed(body, [&](const sse_event& ev) { d->on_event(ev, out, obs); });
    p.finish();
    d->on_end(out);
    return out;
}

}  // namespace

TEST_CASE("fixed finding 1: a number beyond a double in a provider's stream is an error reply",
          "[http][protocol][limits]") {
    // in an event: the reply fails, naming where
    auto m = decode_stream(
        api_kind::anthropic_messages,
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1e400}}}\n\n");
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message ==
          "Invalid stream data from the provider: number out of range at "
          "\"message.usage.input_tokens\" "
          "(a JSON number must fit a double: at most about 1.8e308)");
    CHECK_FALSE(retryable(m));
    // in tool-call arguments (streamed as text, parsed at the end): the reply fails, and the
    // arguments are not kept (they would be written to the session file as Infinity)
    m = decode_stream(
        api_kind::openai_completions,
        "data: "
        "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c1\",\"function\":{"
        "\"name\":\"calc\","
        "\"arguments\":\"{\\\"x\\\":-1e999}\"}}]}}]}\n\n"
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: "
        "[DONE]\n\n");
    CHECK(m.stop == stop_reason::error);
    CHECK(
        m.error_message ==
        "Invalid stream data from the provider: the arguments of tool call \"calc\": number out of "
        "range at \"x\" (a JSON number must fit a double: at most about 1.8e308)");
    REQUIRE(tool_calls_of(m).size() == 1);
    CHECK(tool_calls_of(m)[0]->arguments.empty());
    CHECK(boost::json::serialize(to_json(m)).find("Infinity") == std::string::npos);
    // an error body with one: shown as text, not as `Infinity`
    CHECK(http_protocol::http_error_text(400, R"({"n":1e400})").text == R"(400 {"n":1e400})");
}

TEST_CASE("openai-completions: the SAX reader reads an event as its DOM would",
          "[http][protocol]") {
    const auto decode = [](std::initializer_list<std::string_view> events) {
        std::string body;
        for (const auto e : events) body += "data: " + std::string(e) + "\n\n";
        return decode_stream(api_kind::openai_completions, body);
    };
    const std::string_view stop = R"({"choices":[{"delta":{},"finish_reason":"stop"}]})";
    // a repeated key: the last one wins, a container's whole value too
    auto m = decode({R"({"choices":[{"delta":{"content":"a","content":"b"}}]})", stop, "[DONE]"});
    CHECK(text_of(m) == "b");
    m = decode({R"({"choices":[{"delta":{"content":"a","content":5}}]})", stop, "[DONE]"});
    CHECK(text_of(m).empty());
    m = decode({R"({"choices":[{"delta":{"content":"a"},"delta":{"role":"assistant"}}]})", stop,
                "[DONE]"});
    CHECK(text_of(m).empty());
    m = decode({R"({"choices":[{"delta":{"content":"a"}}],"choices":[]})", stop, "[DONE]"});
    CHECK(text_of(m).empty());
    m = decode(
        {R"({"usage":{"prompt_tokens":5,"completion_tokens":1},"usage":{"completion_tokens":2}})",
         stop, "[DONE]"});
    CHECK(m.usage.input == 0);
    CHECK(m.usage.output == 2);
    m = decode({R"({"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":1}}]})",
                stop, "[DONE]"});
    CHECK(text_of(m).empty());
    // only choices[0], and only when it is an object; a delta that is not one still lets
    // finish_reason through
    m = decode(
        {R"({"choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]})", stop, "[DONE]"});
    CHECK(text_of(m) == "a");
    m = decode({R"({"choices":["x",{"delta":{"content":"b"}}]})", stop, "[DONE]"});
    CHECK(text_of(m).empty());
    m = decode({R"({"choices":[{"delta":"x","finish_reason":"length"}]})", "[DONE]"});
    CHECK(m.stop == stop_reason::length);
    // keys and strings with escapes (given to the reader in parts)
    m = decode({R"({"choices":[{"delta":{"cont\u0065nt":"h\u00e9\n\"q\""}}]})", stop, "[DONE]"});
    CHECK(text_of(m) == "h\xc3\xa9\n\"q\"");
    // the reasoning fields in the reference's order of preference, whatever their order here
    m = decode({R"({"choices":[{"delta":{"reasoning":"second","reasoning_content":"first"}}]})",
                stop, "[DONE]"});
    REQUIRE(m.content.size() == 1);
    const auto* th = std::get_if<thinking_block>(&m.content[0]);
    REQUIRE(th);
    CHECK(th->thinking == "first");
    CHECK(th->signature == "reasoning_content");
    // usage with cached tokens
    m = decode(
        {R"({"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}},"choices":[]})",
         stop, "[DONE]"});
    CHECK(m.usage.input == 6);
    CHECK(m.usage.cache_read == 4);
    CHECK(m.usage.output == 3);
    CHECK(m.usage.total_tokens == 13);
    // tool calls over events by index; an element that is not an object is skipped; without a
    // "function" object only the id is read
    m = decode(
        {R"({"choices":[{"delta":{"tool_calls":[7,{"index":0,"id":"c1","function":{"name":"calc","arguments":"{\"a\":"}},{"index":1,"id":"c2","function":"f"}]}}]})",
         R"({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}},{"index":1,"function":{"name":"echo","arguments":"{}"}}]}}]})",
         R"({"choices":[{"delta":{},"finish_reason":"tool_calls"}]})", "[DONE]"});
    CHECK(m.stop == stop_reason::tool_use);
    const auto calls = tool_calls_of(m);
    REQUIRE(calls.size() == 2);
    CHECK(calls[0]->id == "c1");
    CHECK(calls[0]->name == "calc");
    CHECK(boost::json::serialize(calls[0]->arguments) == R"({"a":1})");
    CHECK(calls[1]->id == "c2");
    CHECK(calls[1]->name == "echo");
    // read as a DOM: an error, a number beyond a double anywhere (in a field nobody reads too),
    // text that is not JSON or not an object
    m = decode({R"({"error":{"message":"Overloaded","type":"overloaded_error"}})"});
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message == "overloaded_error: Overloaded");
    m = decode({R"({"choices":[{"delta":{"content":"a"}}],"error":"went away"})"});
    CHECK(m.error_message == "went away");
    CHECK(text_of(m).empty());
    m = decode({R"({"created":1e999,"choices":[{"delta":{"content":"a"}}]})"});
    CHECK(m.error_message ==
          "Invalid stream data from the provider: number out of range at \"created\" (a JSON "
          "number must fit a double: at most about 1.8e308)");
    CHECK(text_of(m).empty());
    m = decode({R"({"choices":[{"delta":{"content":"a"}})"});
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message.value_or("").starts_with("Invalid stream data from the provider: "));
    CHECK(text_of(m).empty());
    m = decode({R"({"choices":[]} {})"});
    CHECK(m.error_message.value_or("").starts_with("Invalid stream data from the provider: "));
    m = decode({R"(["choices"])"});
    CHECK(m.error_message == "Invalid stream data from the provider: not an object");
    // a number beyond a double in a value a repeated key replaced: the DOM drops it, so does the
    // decoder
    m = decode({R"({"x":1e400,"x":1,"choices":[{"delta":{"content":"hi"}}]})", stop, "[DONE]"});
    CHECK(m.stop == stop_reason::stop);
    CHECK(text_of(m) == "hi");
    m = decode(
        {R"({"usage":{"prompt_tokens":1e400},"usage":{"prompt_tokens":3}})",
         R"({"choices":[{"delta":{"content":-1e999}}],"choices":[{"delta":{"content":"b"}}]})",
         stop, "[DONE]"});
    CHECK(m.usage.input == 3);
    CHECK(text_of(m) == "b");
    // more repeated and misplaced keys, as a DOM reads them
    m = decode(
        {R"({"choices":[{"delta":{"tool_calls":[[1],{"index":0,"index":2,"id":"a","function":{"name":"x"},"function":{"arguments":"{}"}}],"tool_calls":[{"index":2,"id":"b","function":{"name":"y","arguments":"{}"}}]}}]})",
         R"({"choices":[{"delta":{},"finish_reason":"tool_calls"}]})", "[DONE]"});
    REQUIRE(tool_calls_of(m).size() == 1);
    CHECK(tool_calls_of(m)[0]->id == "b");
    CHECK(tool_calls_of(m)[0]->name == "y");
    m = decode(
        {R"({"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":4},"prompt_tokens_details":7}})",
         R"({"choices":[[{"delta":{"content":"no"}}]],"nested":{"error":"not this one"}})", stop,
         "[DONE]"});
    CHECK(m.stop == stop_reason::stop);
    CHECK(m.usage.input == 9);
    CHECK(m.usage.cache_read == 0);
    CHECK(text_of(m).empty());
    // a long escaped string reaches the reader in parts
    std::string long_text(6000, 'a');
    std::string escaped;
    for (char ch : long_text) escaped += ch == 'a' ? std::string("\\u0061") : std::string(1, ch);
    const std::string long_event = R"({"choices":[{"delta":{"content":")" + escaped + R"("}}]})";
    m = decode({long_event, stop, "[DONE]"});
    CHECK(text_of(m) == long_text);
}

TEST_CASE("fixed finding 9: provider usage beyond int64 saturates", "[http][protocol][limits]") {
    auto m = decode_stream(
        api_kind::anthropic_messages,
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1e19,"
        "\"cache_read_input_tokens\":9223372036854775807}}}\n\n"
        "data: "
        "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_"
        "tokens\":18446744073709551615}}\n\n"
        "data: {\"type\":\"message_stop\"}\n\n");
    CHECK(m.stop == stop_reason::stop);
    CHECK(m.usage.input == INT64_MAX);
    CHECK(m.usage.output == INT64_MAX);
    CHECK(m.usage.cache_read == INT64_MAX);
    CHECK(m.usage.total_tokens == INT64_MAX);
    m = decode_stream(
        api_kind::openai_completions,
        "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}],"
        "\"usage\":{\"prompt_tokens\":9e18,\"completion_tokens\":9e18}}\n\ndata: [DONE]\n\n");
    CHECK(m.usage.total_tokens == INT64_MAX);
    CHECK(m.usage.input == 9'000'000'000'000'000'000);
}

TEST_CASE("limits: a provider's whole reply is bounded (text and tool-call arguments)",
          "[http][protocol][limits]") {
    CHECK(http_protocol::default_max_reply_bytes == 16u * 1024 * 1024);
    const std::string chunk =
        "data: "
        "{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":"
        "\"0123456789\"}}\n\n";
    std::string body =
        "data: "
        "{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
        "\"text\":\"\"}}\n\n";
    for (int i = 0; i < 5; ++i) body += chunk;
    body +=
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\ndata: "
        "{\"type\":\"message_stop\"}\n\n";
    // 50 bytes of text and one block (256)
    CHECK(decode_stream(api_kind::anthropic_messages, body, 306).stop ==
          stop_reason::stop);  // exactly at the limit
    auto m = decode_stream(api_kind::anthropic_messages, body, 305);
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message ==
          "Reply too large: the provider streamed more than 305 bytes of text, tool-call names, "
          "ids and arguments (and 256 a content block): the limit of one reply");
    CHECK(text_of(m) == "0123456789012345678901234567890123456789");  // what came before the limit
    CHECK_FALSE(retryable(m));
    // tool-call arguments count too
    m = decode_stream(api_kind::openai_completions,
                      "data: "
                      "{\"choices\":[{\"delta\":{\"content\":\"12345\",\"tool_calls\":[{\"index\":"
                      "0,\"id\":\"c1\",\"function\":{\"name\":\"t\","
                      "\"arguments\":\"{\\\"a\\\":123}\"}}]}}]}\n\n",
                      10 + 2 * 256);
    CHECK(m.stop == stop_reason::error);
    CHECK_THAT(*m.error_message, Catch::StartsWith("Reply too large"));
}

namespace {

std::string openai_tool_event(int index, std::string_view id, std::string_view name,
                              std::string_view args) {
    json::object fn;
    if (!name.empty()) fn["name"] = name;
    fn["arguments"] = args;
    json::object tc;
    tc["index"] = index;
    if (!id.empty()) tc["id"] = id;
    tc["function"] = std::move(fn);
    json::array tcs;
    tcs.push_back(std::move(tc));
    json::object delta;
    delta["tool_calls"] = std::move(tcs);
    json::object choice;
    choice["delta"] = std::move(delta);
    json::array choices;
    choices.push_back(std::move(choice));
    json::object o;
    o["choices"] = std::move(choices);
    return "data: " + json::serialize(o) + "\n\n";
}

std::string anthropic_tool_event(int index, std::string_view id, std::string_view name) {
    json::object cb;
    cb["type"] = "tool_use";
    cb["id"] = id;
    cb["name"] = name;
    cb["input"] = json::object();
    json::object o;
    o["type"] = "content_block_start";
    o["index"] = index;
    o["content_block"] = std::move(cb);
    return "data: " + json::serialize(o) + "\n\n";
}

constexpr std::string_view openai_tool_end =
    "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
constexpr std::string_view anthropic_tool_end =
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\ndata: "
    "{\"type\":\"message_stop\"}\n\n";

}  // namespace

TEST_CASE(
    "issue 16 item 1: tool-call names, ids and blocks count in the reply limit, names "
    "and ids are bounded",
    "[http][protocol][limits]") {
    CHECK(http_protocol::reply_budget::max_tool_name_bytes == 256);
    CHECK(http_protocol::reply_budget::max_tool_id_bytes == 512);
    const std::string name256(256, 'n'), id512(512, 'i');
    // at the bounds: kept, in both APIs
    auto m =
        decode_stream(api_kind::openai_completions,
                      openai_tool_event(0, id512, name256, "{}") + std::string(openai_tool_end));
    REQUIRE(m.stop == stop_reason::tool_use);
    CHECK(std::get<tool_call_block>(m.content.at(0)).name == name256);
    m = decode_stream(api_kind::anthropic_messages,
                      anthropic_tool_event(0, id512, name256) + std::string(anthropic_tool_end));
    REQUIRE(m.stop == stop_reason::tool_use);
    CHECK(std::get<tool_call_block>(m.content.at(0)).id == id512);
    // one byte over: the reply fails (not retryable), nothing of the name or id kept
    for (const api_kind api : {api_kind::openai_completions, api_kind::anthropic_messages}) {
        auto body = [&](std::string_view id, std::string_view name) {
            return api == api_kind::openai_completions
                       ? openai_tool_event(0, id, name, "{}") + std::string(openai_tool_end)
                       : anthropic_tool_event(0, id, name) + std::string(anthropic_tool_end);
        };
        m = decode_stream(api, body("c1", name256 + "n"));
        CHECK(m.stop == stop_reason::error);
        CHECK(m.error_message ==
              "Invalid stream data from the provider: a tool-call name of 257 bytes is longer "
              "than 256 bytes, the most a tool-call name may have");
        CHECK_FALSE(retryable(m));
        m = decode_stream(api, body(id512 + "i", "t"));
        CHECK(m.stop == stop_reason::error);
        CHECK(m.error_message ==
              "Invalid stream data from the provider: a tool-call id of 513 bytes is longer than "
              "512 bytes, the most a tool-call id may have");
        CHECK_FALSE(retryable(m));
        for (const auto& b : m.content)
            if (const auto* c = std::get_if<tool_call_block>(&b)) CHECK(c->id.size() <= 512);
    }
    // names, ids and blocks count: one block (256) + "call_1" (6) + "read" (4) + "{}" (2)
    const std::string one =
        openai_tool_event(0, "call_1", "read", "{}") + std::string(openai_tool_end);
    CHECK(decode_stream(api_kind::openai_completions, one, 268).stop == stop_reason::tool_use);
    m = decode_stream(api_kind::openai_completions, one, 267);
    CHECK(m.stop == stop_reason::error);
    CHECK_THAT(*m.error_message, Catch::StartsWith("Reply too large"));
    // a name sent again replaces the old one: counted once
    const std::string again = openai_tool_event(0, "call_1", "read", "") +
                              openai_tool_event(0, "", "read", "{}") + std::string(openai_tool_end);
    CHECK(decode_stream(api_kind::openai_completions, again, 268).stop == stop_reason::tool_use);
    // empty blocks count too: 64 tool calls without a byte of their own
    std::string empties;
    for (int i = 0; i < 64; ++i) empties += openai_tool_event(i, "", "", "");
    empties += openai_tool_end;
    CHECK(decode_stream(api_kind::openai_completions, empties, 64 * 256).stop ==
          stop_reason::tool_use);
    m = decode_stream(api_kind::openai_completions, empties, 64 * 256 - 1);
    CHECK(m.stop == stop_reason::error);
    CHECK(m.content.size() == 63);
    std::string anthropic_empties;
    for (int i = 0; i < 64; ++i)
        anthropic_empties +=
            "data: {\"type\":\"content_block_start\",\"index\":" + std::to_string(i) +
            ",\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n";
    anthropic_empties += anthropic_tool_end;
    m = decode_stream(api_kind::anthropic_messages, anthropic_empties, 64 * 256 - 1);
    CHECK(m.stop == stop_reason::error);
    CHECK(m.content.size() == 63);
}

TEST_CASE(
    "issue 16 item 1: huge streamed tool-call names end the reply at the first piece "
    "(linear work)",
    "[http][protocol][limits]") {
    // Four tool calls whose names are streamed in 64 KiB pieces (the issue's 8 MiB names, cut
    // to 1 MiB each): the reply fails on the first piece, and the decoder keeps at most one
    // block's worth; the rest of the stream is skipped without being parsed.
    const std::string piece(64 * 1024, 'n');
    std::string body;
    for (int call = 0; call < 4; ++call)
        for (int i = 0; i < 16; ++i) body += openai_tool_event(call, i == 0 ? "c" : "", piece, "");
    body += openai_tool_end;
    message out;
    out.role = message_role::assistant;
    null_observer obs;
    auto d = http_protocol::stream_decoder::make(api_kind::openai_completions);
    sse_parser p;
    std::uint64_t events_after_failure = 0;
    for (std::size_t at = 0; at < body.size(); at += 16 * 1024)
        p.feed(std::string_view(body).substr(at, 16 * 1024), [&](const sse_event& ev) {
            if (d->status() != http_protocol::stream_decoder::state::streaming)
                ++events_after_failure;
            d->on_event(ev, out, obs);
        });
    CHECK(d->status() == http_protocol::stream_decoder::state::error);
    CHECK_THAT(out.error_message.value_or(""),
               Catch::StartsWith("Invalid stream data from the provider: a tool-call name of "
                                 "65536 bytes"));
    CHECK(events_after_failure == 4 * 16 - 1 + 2);  // every event after the first ignored
    CHECK(d->reply_bytes() <= http_protocol::reply_budget::block_bytes + 1);
    for (const auto& b : out.content)
        if (const auto* c = std::get_if<tool_call_block>(&b)) CHECK(c->name.size() <= 256);
}

TEST_CASE("retry hint from headers: every form, largest wins", "[http][protocol][appendix-a]") {
    using http_protocol::retry_hint_from_headers;
    const std::int64_t now = 1'700'000'000'000;  // 2023-11-14T22:13:20Z
    auto hint = [&](http_protocol::header_list h) { return retry_hint_from_headers(h, now); };
    CHECK(hint({{"retry-after", "1"}}) == 1000);
    CHECK(hint({{"retry-after", "1.5"}}) == 1500);
    CHECK(hint({{"retry-after-ms", "250"}}) == 250);
    CHECK(hint({{"retry-after-ms", "0.2"}}) == 1);
    CHECK(hint({{"retry-after", "Tue, 14 Nov 2023 22:13:50 GMT"}}) == 30000);
    CHECK(hint({{"retry-after", "Tuesday, 14-Nov-23 22:13:50 GMT"}}) == 30000);
    CHECK(hint({{"retry-after", "Tue Nov 14 22:13:50 2023"}}) == 30000);
    CHECK_FALSE(hint({{"retry-after", "Tue, 14 Nov 2023 22:13:00 GMT"}}));  // in the past
    CHECK_FALSE(hint({{"retry-after", "0"}}));
    CHECK_FALSE(hint({{"retry-after", "soon"}}));
    CHECK(hint({{"x-ratelimit-reset-ms", "700"}}) == 700);
    CHECK(hint({{"x-ratelimit-reset-ms", "1700000002000"}}) == 2000);  // epoch ms
    CHECK(hint({{"x-ratelimit-reset", "3"}}) == 3000);
    CHECK(hint({{"x-ratelimit-reset", "1700000005"}}) == 5000);  // epoch seconds
    CHECK(hint({{"retry-after", "1"}, {"retry-after-ms", "1200"}, {"x-ratelimit-reset", "2"}}) ==
          2000);
    CHECK_FALSE(hint({{"content-type", "application/json"}}));
    CHECK(hint({{"retry-after", "Tue, 14 Nov 2023 22:13:30 GMT"}}) == 10'000);
    // a header's date may name day 31 of any month (kept from before the shared parser)
    CHECK(hint({{"retry-after", "Tue, 31 Feb 2026 00:00:00 GMT"}}).has_value());
}

TEST_CASE("retry hint suffix: appended once, never twice", "[http][protocol][appendix-a]") {
    std::string t = "429 Rate limit reached for requests";
    http_protocol::append_retry_hint(t, 1000);
    CHECK(t == "429 Rate limit reached for requests retry-after-ms=1000");
    http_protocol::append_retry_hint(t, 5000);
    CHECK(t == "429 Rate limit reached for requests retry-after-ms=1000");
    std::string u = "429 slow down (Retry-After-MS=10)";
    http_protocol::append_retry_hint(u, 99);
    CHECK(u == "429 slow down (Retry-After-MS=10)");
    std::string v = "503 x";
    http_protocol::append_retry_hint(v, std::nullopt);
    CHECK(v == "503 x");
    CHECK(parse_retry_hint(t, 0) == 1000);  // the classifier reads it back
}

TEST_CASE("request bodies: OpenAI and Anthropic shapes", "[http][protocol]") {
    provider_request r;
    r.model = model_info{"p", "m1", "x", 1000, 321};
    r.system_prompt = "sys";
    r.messages.push_back(std::make_shared<message>(make_user_message("hello")));
    auto a = std::make_shared<message>();
    a->role = message_role::assistant;
    a->content.emplace_back(text_block{"calling"});
    json::object args;
    args["path"] = "/x";
    a->content.emplace_back(tool_call_block{"call_1", "read", args});
    a->stop = stop_reason::tool_use;
    r.messages.push_back(a);
    r.messages.push_back(
        std::make_shared<message>(make_tool_result("call_1", "read", "file text", false)));
    tool_definition td;
    td.name = "read";
    td.description = "reads";
    r.tools.push_back(td);

    auto o =
        json::parse(http_protocol::build_request_body(api_kind::openai_completions, r)).as_object();
    CHECK(o.at("model") == "m1");
    CHECK(o.at("stream") == true);
    CHECK(o.at("stream_options").at("include_usage") == true);
    const auto& om = o.at("messages").as_array();
    REQUIRE(om.size() == 4);
    CHECK(om[0].at("role") == "system");
    CHECK(om[2].at("tool_calls").at(0).at("function").at("arguments") == R"({"path":"/x"})");
    CHECK(om[3].at("role") == "tool");
    CHECK(om[3].at("tool_call_id") == "call_1");
    CHECK(o.at("tools").at(0).at("function").at("parameters").at("type") == "object");

    auto b =
        json::parse(http_protocol::build_request_body(api_kind::anthropic_messages, r)).as_object();
    CHECK(b.at("system") == "sys");
    CHECK(b.at("max_tokens") == 321);
    const auto& bm = b.at("messages").as_array();
    REQUIRE(bm.size() == 3);
    CHECK(bm[1].at("content").at(1).at("type") == "tool_use");
    CHECK(bm[1].at("content").at(1).at("input").at("path") == "/x");
    CHECK(bm[2].at("role") == "user");
    CHECK(bm[2].at("content").at(0).at("type") == "tool_result");
    CHECK(b.at("tools").at(0).at("input_schema").at("type") == "object");
}

namespace {
// every kind of message and block, escaping, empty texts and tool results in a row
provider_request wide_request() {
    provider_request r;
    r.model = model_info{"p", "m\"1", "x", 1000, 0};
    r.system_prompt = "line1\nline2\t\"q\" \\ \x01 é ✓";
    r.messages.push_back(std::make_shared<message>(make_user_message("hi \x1f there\r\n")));
    auto a = std::make_shared<message>();
    a->role = message_role::assistant;
    a->content.emplace_back(text_block{"part one, "});
    a->content.emplace_back(text_block{""});
    a->content.emplace_back(text_block{"part two"});
    json::object args;
    args["q"] = "a\"b";
    args["n"] = 2;
    a->content.emplace_back(tool_call_block{"c1", "search", args});
    a->stop = stop_reason::tool_use;
    r.messages.push_back(a);
    r.messages.push_back(std::make_shared<message>(make_tool_result("c1", "search", "r1", false)));
    r.messages.push_back(std::make_shared<message>(make_tool_result("c2", "search", "", true)));
    auto only_call = std::make_shared<message>();
    only_call->role = message_role::assistant;
    only_call->content.emplace_back(tool_call_block{"c3", "x", json::object()});
    r.messages.push_back(only_call);
    auto empty = std::make_shared<message>();
    empty->role = message_role::assistant;
    r.messages.push_back(empty);
    r.messages.push_back(std::make_shared<message>(make_user_message("")));
    tool_definition td;
    td.name = "search";
    td.description = "finds \"things\"";
    td.parameters["type"] = "object";
    r.tools.push_back(td);
    return r;
}
}  // namespace

TEST_CASE("request bodies: exact text, escaping, empty and multi-block messages",
          "[http][protocol]") {
    const provider_request r = wide_request();
    const std::string openai = http_protocol::build_request_body(api_kind::openai_completions, r);
    CHECK(
        openai ==
        R"({"model":"m\"1","messages":[{"role":"system","content":"line1\nline2\t\"q\" \\ \u0001 é ✓"},)"
        R"({"role":"user","content":"hi \u001f there\r\n"},)"
        R"({"role":"assistant","content":"part one, part two","tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{\"q\":\"a\\\"b\",\"n\":2}"}}]},)"
        R"({"role":"tool","tool_call_id":"c1","content":"r1"},{"role":"tool","tool_call_id":"c2","content":""},)"
        R"({"role":"assistant","content":null,"tool_calls":[{"id":"c3","type":"function","function":{"name":"x","arguments":"{}"}}]},)"
        R"({"role":"assistant","content":""},{"role":"user","content":""}],)"
        R"("stream":true,"stream_options":{"include_usage":true},)"
        R"("tools":[{"type":"function","function":{"name":"search","description":"finds \"things\"","parameters":{"type":"object"}}}]})");
    // Boost.JSON writes the same text for the same values
    CHECK(json::serialize(json::parse(openai)) == openai);

    const std::string anthropic =
        http_protocol::build_request_body(api_kind::anthropic_messages, r);
    CHECK(
        anthropic ==
        R"({"model":"m\"1","max_tokens":4096,"system":"line1\nline2\t\"q\" \\ \u0001 é ✓","messages":[)"
        R"({"role":"user","content":[{"type":"text","text":"hi \u001f there\r\n"}]},)"
        R"({"role":"assistant","content":[{"type":"text","text":"part one, "},{"type":"text","text":"part two"},)"
        R"({"type":"tool_use","id":"c1","name":"search","input":{"q":"a\"b","n":2}}]},)"
        R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"c1","content":"r1"},)"
        R"({"type":"tool_result","tool_use_id":"c2","content":"","is_error":true}]},)"
        R"({"role":"assistant","content":[{"type":"tool_use","id":"c3","name":"x","input":{}}]},)"
        R"({"role":"user","content":[{"type":"text","text":" "}]}],)"
        R"("stream":true,"tools":[{"name":"search","description":"finds \"things\"","input_schema":{"type":"object"}}]})");
    CHECK(json::serialize(json::parse(anthropic)) == anthropic);
}

// ---- content: images and thinking (issue 24) ----------------------------------------------

namespace {

// the context of the content tests: a user prompt with an image, a reply with signed thinking,
// redacted thinking and a tool call, the tool's result with an image only, and an unsigned
// thinking block (an aborted stream's)
provider_request content_request() {
    provider_request r;
    r.model = model_info{"p", "m1", "x", 1000, 2048};
    r.model.image_input = true;
    r.messages.push_back(std::make_shared<message>(
        make_user_message("what is this?", {image_block{"iVBORw0KGgo=", "image/png"}})));
    auto reply = std::make_shared<message>();
    reply->role = message_role::assistant;
    reply->content.emplace_back(thinking_block{"Let me look.", "c2lnLzEr+A==", false});
    reply->content.emplace_back(thinking_block{"[Reasoning redacted]", "EnCrYpTeD", true});
    reply->content.emplace_back(text_block{"A logo."});
    reply->content.emplace_back(tool_call_block{"t1", "zoom", json::object()});
    r.messages.push_back(reply);
    message result = make_tool_result("t1", "zoom", "", false);
    result.content.clear();
    result.content.emplace_back(image_block{"R0lGOD lh", "image/gif"});
    r.messages.push_back(std::make_shared<message>(std::move(result)));
    auto unsigned_reply = std::make_shared<message>();
    unsigned_reply->role = message_role::assistant;
    unsigned_reply->content.emplace_back(thinking_block{"half a thought", "", false});
    unsigned_reply->content.emplace_back(thinking_block{"  ", std::nullopt, false});
    r.messages.push_back(unsigned_reply);
    return r;
}

}  // namespace

TEST_CASE("issue 24: images and thinking are encoded for each API, signatures byte for byte",
          "[http][protocol][content]") {
    const provider_request r = content_request();
    const std::string anthropic =
        http_protocol::build_request_body(api_kind::anthropic_messages, r);
    CHECK(
        anthropic ==
        R"({"model":"m1","max_tokens":2048,"messages":[)"
        R"({"role":"user","content":[{"type":"text","text":"what is this?"},)"
        R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},)"
        R"({"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","signature":"c2lnLzEr+A=="},)"
        R"({"type":"redacted_thinking","data":"EnCrYpTeD"},{"type":"text","text":"A logo."},)"
        R"({"type":"tool_use","id":"t1","name":"zoom","input":{}}]},)"
        R"({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[)"
        R"x({"type":"text","text":"(see attached image)"},)x"
        R"({"type":"image","source":{"type":"base64","media_type":"image/gif","data":"R0lGOD lh"}}]}]},)"
        R"({"role":"assistant","content":[{"type":"text","text":"half a thought"}]}],"stream":true})");
    CHECK(json::serialize(json::parse(anthropic)) == anthropic);

    const std::string openai = http_protocol::build_request_body(api_kind::openai_completions, r);
    CHECK(
        openai ==
        R"({"model":"m1","messages":[)"
        R"({"role":"user","content":[{"type":"text","text":"what is this?"},)"
        R"({"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}]},)"
        R"({"role":"assistant","content":"A logo.","tool_calls":[{"id":"t1","type":"function","function":{"name":"zoom","arguments":"{}"}}]},)"
        R"x({"role":"tool","tool_call_id":"t1","content":"(see attached image)"},)x"
        R"({"role":"user","content":[{"type":"text","text":"Attached image(s) from tool result:"},)"
        R"({"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGOD lh"}}]},)"
        R"({"role":"assistant","content":""}],"stream":true,"stream_options":{"include_usage":true}})");
    CHECK(json::serialize(json::parse(openai)) == openai);
}

TEST_CASE("issue 24: a model without image input gets the reference's placeholders, in each API",
          "[http][protocol][content]") {
    provider_request r;
    r.model = model_info{"p", "m1", "x", 1000, 2048};  // no "image" in its input
    auto prompt = std::make_shared<message>(make_user_message(
        "compare", {image_block{"iVBORw0KGgo=", "image/png"}, image_block{"R0lGOD", "image/gif"}}));
    r.messages.push_back(prompt);
    r.messages.push_back(std::make_shared<message>(make_user_message("thanks")));
    auto call = std::make_shared<message>();
    call->role = message_role::assistant;
    call->content.emplace_back(tool_call_block{"t1", "shot", json::object()});
    r.messages.push_back(call);
    message result = make_tool_result("t1", "shot", "", false);
    result.content.clear();
    result.content.emplace_back(image_block{"R0lGOD", "image/gif"});
    r.messages.push_back(std::make_shared<message>(std::move(result)));
    CHECK(
        http_protocol::build_request_body(api_kind::openai_completions, r) ==
        R"({"model":"m1","messages":[)"
        R"x({"role":"user","content":[{"type":"text","text":"compare"},{"type":"text","text":"(image omitted: model does not support images)"}]},)x"
        R"({"role":"user","content":"thanks"},)"
        R"({"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"shot","arguments":"{}"}}]},)"
        R"x({"role":"tool","tool_call_id":"t1","content":"(tool image omitted: model does not support images)"}],)x"
        R"("stream":true,"stream_options":{"include_usage":true}})");
    CHECK(
        http_protocol::build_request_body(api_kind::anthropic_messages, r) ==
        R"({"model":"m1","max_tokens":2048,"messages":[)"
        R"x({"role":"user","content":[{"type":"text","text":"compare"},{"type":"text","text":"(image omitted: model does not support images)"}]},)x"
        R"({"role":"user","content":[{"type":"text","text":"thanks"}]},)"
        R"({"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"shot","input":{}}]},)"
        R"x({"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"(tool image omitted: model does not support images)"}]}],"stream":true})x");
    CHECK(
        http_protocol::build_request_body(api_kind::openai_responses, r) ==
        R"({"model":"m1","input":[)"
        R"x({"role":"user","content":[{"type":"input_text","text":"compare"},{"type":"input_text","text":"(image omitted: model does not support images)"}]},)x"
        R"({"role":"user","content":[{"type":"input_text","text":"thanks"}]},)"
        R"({"type":"function_call","call_id":"t1","name":"shot","arguments":"{}"},)"
        R"x({"type":"function_call_output","call_id":"t1","output":"(tool image omitted: model does not support images)"}],)x"
        R"("stream":true,"store":false,"max_output_tokens":2048})");
    // the session's messages keep their images
    CHECK(image_count(*prompt) == 2);
    // with "image" in its input the images go out
    r.model.image_input = true;
    CHECK(http_protocol::build_request_body(api_kind::openai_responses, r).find("input_image") !=
          std::string::npos);
}

TEST_CASE("issue 24: thinkingLevel becomes Anthropic budget_tokens and OpenAI reasoning_effort",
          "[http][protocol][content]") {
    provider_request r;
    r.model = model_info{"p", "m1", "x", 100000, 64000};
    r.model.reasoning = true;
    r.messages.push_back(std::make_shared<message>(make_user_message("hi")));
    const auto anthropic_thinking = [&](thinking_level l, std::int64_t max_tokens) {
        r.thinking = l;
        r.model.max_tokens = max_tokens;
        const auto o =
            json::parse(http_protocol::build_request_body(api_kind::anthropic_messages, r));
        const auto* t = o.as_object().if_contains("thinking");
        return t ? json::serialize(*t) : std::string("none");
    };
    CHECK(anthropic_thinking(thinking_level::off, 64000) == "none");
    CHECK(anthropic_thinking(thinking_level::minimal, 64000) ==
          R"({"type":"enabled","budget_tokens":1024})");
    CHECK(anthropic_thinking(thinking_level::low, 64000) ==
          R"({"type":"enabled","budget_tokens":2048})");
    CHECK(anthropic_thinking(thinking_level::medium, 64000) ==
          R"({"type":"enabled","budget_tokens":8192})");
    CHECK(anthropic_thinking(thinking_level::high, 64000) ==
          R"({"type":"enabled","budget_tokens":16384})");
    CHECK(anthropic_thinking(thinking_level::xhigh, 64000) ==
          R"({"type":"enabled","budget_tokens":16384})");
    // 1024 tokens stay for the answer; below the API's minimum budget nothing is sent
    CHECK(anthropic_thinking(thinking_level::high, 4096) ==
          R"({"type":"enabled","budget_tokens":3072})");
    CHECK(anthropic_thinking(thinking_level::high, 2047) == "none");
    CHECK(anthropic_thinking(thinking_level::high, 2048) ==
          R"({"type":"enabled","budget_tokens":1024})");
    r.model.max_tokens = 64000;
    r.thinking = thinking_level::low;
    CHECK(http_protocol::build_request_body(api_kind::anthropic_messages, r) ==
          R"({"model":"m1","max_tokens":64000,"thinking":{"type":"enabled","budget_tokens":2048},)"
          R"("messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"stream":true})");

    const auto effort = [&](thinking_level l) {
        r.thinking = l;
        const auto o =
            json::parse(http_protocol::build_request_body(api_kind::openai_completions, r));
        const auto* e = o.as_object().if_contains("reasoning_effort");
        return e ? std::string(e->as_string()) : std::string("none");
    };
    CHECK(effort(thinking_level::off) == "none");
    CHECK(effort(thinking_level::minimal) == "minimal");
    CHECK(effort(thinking_level::low) == "low");
    CHECK(effort(thinking_level::medium) == "medium");
    CHECK(effort(thinking_level::high) == "high");
    CHECK(effort(thinking_level::xhigh) == "high");
    r.thinking = thinking_level::medium;
    CHECK(http_protocol::build_request_body(api_kind::openai_completions, r) ==
          R"({"model":"m1","messages":[{"role":"user","content":"hi"}],"stream":true,)"
          R"("stream_options":{"include_usage":true},"reasoning_effort":"medium"})");

    // a model that does not reason: the level is ignored, the body is what it was without one
    r.model.reasoning = false;
    for (auto api : {api_kind::anthropic_messages, api_kind::openai_completions}) {
        r.thinking = thinking_level::high;
        const std::string with = http_protocol::build_request_body(api, r);
        r.thinking = thinking_level::off;
        CHECK(with == http_protocol::build_request_body(api, r));
    }
}

namespace {

struct thinking_observer final : stream_observer {
    std::vector<std::string> text, thinking;
    void on_message_start(const message&) override {}
    void on_text_delta(const message&, std::string_view d) override { text.emplace_back(d); }
    void on_thinking_delta(const message&, std::string_view d) override {
        thinking.emplace_back(d);
    }
};

std::string anthropic_event(std::string_view data) {
    return "event: x\ndata: " + std::string(data) + "\n\n";
}

// an Anthropic stream: signed thinking in two deltas (signature in two), redacted thinking, text
std::string thinking_stream() {
    return anthropic_event(R"({"type":"message_start","message":{"usage":{"input_tokens":5}}})") +
           anthropic_event(
               R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}})") +
           anthropic_event(
               R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Let me "}})") +
           anthropic_event(
               R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"look."}})") +
           anthropic_event(
               R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"c2lnLz"}})") +
           anthropic_event(
               R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"Er+A=="}})") +
           anthropic_event(R"({"type":"content_block_stop","index":0})") +
           anthropic_event(
               R"({"type":"content_block_start","index":1,"content_block":{"type":"redacted_thinking","data":"EnCrYpTeD"}})") +
           anthropic_event(R"({"type":"content_block_stop","index":1})") +
           anthropic_event(
               R"({"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}})") +
           anthropic_event(
               R"({"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"A logo."}})") +
           anthropic_event(R"({"type":"content_block_stop","index":2})") +
           anthropic_event(
               R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9}})") +
           anthropic_event(R"({"type":"message_stop"})");
}

}  // namespace

TEST_CASE("issue 24: Anthropic thinking deltas, signatures and redacted thinking are kept",
          "[http][protocol][content]") {
    message out;
    out.role = message_role::assistant;
    thinking_observer obs;
    auto d = http_protocol::stream_decoder::make(api_kind::anthropic_messages);
    sse_parser p;
    const std::string body = thinking_stream();
    p.feed(body, [&](const sse_event& ev) { d->on_event(ev, out, obs); });
    p.finish();
    d->on_end(out);
    REQUIRE(out.stop == stop_reason::stop);
    CHECK(obs.thinking == strings{"Let me ", "look."});
    CHECK(obs.text == strings{"A logo."});
    std::string line;
    append_json(line, out);
    CHECK(line.starts_with(
        R"({"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","thinkingSignature":"c2lnLzEr+A=="},)"
        R"({"type":"thinking","thinking":"[Reasoning redacted]","thinkingSignature":"EnCrYpTeD","redacted":true},)"
        R"({"type":"text","text":"A logo."}],)"));
    // sent back unchanged: the next request holds the same blocks
    provider_request next;
    next.model = model_info{"p", "m1", "x", 1000, 100};
    next.messages.push_back(std::make_shared<message>(out));
    CHECK(
        http_protocol::build_request_body(api_kind::anthropic_messages, next) ==
        R"({"model":"m1","max_tokens":100,"messages":[{"role":"assistant","content":[)"
        R"({"type":"thinking","thinking":"Let me look.","signature":"c2lnLzEr+A=="},)"
        R"({"type":"redacted_thinking","data":"EnCrYpTeD"},{"type":"text","text":"A logo."}]}],"stream":true})");

    // every byte counts toward the reply limit: thinking 12 + signature 12 + redacted 9 + text 7
    // + 3 blocks
    const std::size_t all = 12 + 12 + 9 + 7 + 3 * 256;
    CHECK(decode_stream(api_kind::anthropic_messages, body, all).stop == stop_reason::stop);
    for (std::size_t cut : {all - 1, all - 7 - 256, std::size_t{256 + 12 + 11}}) {
        const auto m = decode_stream(api_kind::anthropic_messages, body, cut);
        CHECK(m.stop == stop_reason::error);
        CHECK(m.error_message->starts_with("Reply too large"));
    }
}

// ---- the OpenAI Responses API (issue 24) ---------------------------------------------------

namespace {

std::string responses_event(std::string_view data) {
    const auto t = json::parse(data).at("type").as_string();
    return "event: " + std::string(t) + "\ndata: " + std::string(data) + "\n\n";
}

// a Responses stream: a reasoning item with a two-delta summary, a text delta before its part
// (dropped, as the reference drops it), a message, a function call, response.completed
std::string responses_stream() {
    return responses_event(
               R"({"type":"response.created","response":{"id":"resp_1","status":"in_progress"}})") +
           responses_event(
               R"({"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}})") +
           responses_event(
               R"({"type":"response.reasoning_summary_part.added","item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":""}})") +
           responses_event(
               R"({"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"Let me "})") +
           responses_event(
               R"({"type":"response.reasoning_summary_text.delta","item_id":"rs_1","output_index":0,"summary_index":0,"delta":"look."})") +
           responses_event(
               R"({"type":"response.reasoning_summary_part.done","item_id":"rs_1","output_index":0,"summary_index":0,"part":{"type":"summary_text","text":"Let me look."}})") +
           responses_event(
               R"({"type":"response.output_item.done","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Let me look."}],"encrypted_content":"gAAA+/=="}})") +
           responses_event(
               R"({"type":"response.output_item.added","output_index":1,"item":{"id":"msg_1","type":"message","status":"in_progress","role":"assistant","content":[]}})") +
           responses_event(
               R"({"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"before its part"})") +
           responses_event(
               R"({"type":"response.content_part.added","item_id":"msg_1","output_index":1,"content_index":0,"part":{"type":"output_text","text":"","annotations":[]}})") +
           responses_event(
               R"({"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"A "})") +
           responses_event(
               R"({"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"logo."})") +
           responses_event(
               R"({"type":"response.output_item.done","output_index":1,"item":{"id":"msg_1","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","text":"A logo.","annotations":[]}]}})") +
           responses_event(
               R"({"type":"response.output_item.added","output_index":2,"item":{"id":"fc_1","type":"function_call","status":"in_progress","arguments":"","call_id":"call_1","name":"zoom"}})") +
           responses_event(
               R"({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":2,"delta":"{\"x\":"})") +
           responses_event(
               R"({"type":"response.function_call_arguments.delta","item_id":"fc_1","output_index":2,"delta":"1}"})") +
           responses_event(
               R"({"type":"response.function_call_arguments.done","item_id":"fc_1","output_index":2,"arguments":"{\"x\":1}"})") +
           responses_event(
               R"({"type":"response.output_item.done","output_index":2,"item":{"id":"fc_1","type":"function_call","status":"completed","arguments":"{\"x\":1}","call_id":"call_1","name":"zoom"}})") +
           responses_event(
               R"({"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":20,"input_tokens_details":{"cached_tokens":5},"output_tokens":7,"total_tokens":27}}})");
}

constexpr std::string_view reasoning_item =
    R"({"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"Let me look."}],"encrypted_content":"gAAA+/=="})";

message decode_with(stream_observer& obs, api_kind api, std::string_view body) {
    message out;
    out.role = message_role::assistant;
    auto d = http_protocol::stream_decoder::make(api);
    sse_parser p;
    p.feed(body, [&](const sse_event& ev) { d->on_event(ev, out, obs); });
    p.finish();
    d->on_end(out);
    return out;
}

}  // namespace

TEST_CASE("openai-responses: the stream decoder keeps reasoning items, text and function calls",
          "[http][protocol][responses]") {
    thinking_observer obs;
    message out = decode_with(obs, api_kind::openai_responses, responses_stream());
    REQUIRE(out.stop == stop_reason::tool_use);
    CHECK_FALSE(out.error_message);
    // the exact deltas: the summary part's end adds "\n\n" (the reference's), the final thinking
    // is the item's summary
    CHECK(obs.thinking == strings{"Let me ", "look.", "\n\n"});
    CHECK(obs.text == strings{"A ", "logo."});
    std::string line;
    append_json(line, out);
    const std::string sig = json::serialize(json::value(json::string_view(reasoning_item)));
    CHECK(line.starts_with(
        R"({"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","thinkingSignature":)" +
        sig +
        R"(},{"type":"text","text":"A logo."},)"
        R"({"type":"toolCall","id":"call_1|fc_1","name":"zoom","arguments":{"x":1}}],)"));
    CHECK(out.usage.input == 15);
    CHECK(out.usage.cache_read == 5);
    CHECK(out.usage.output == 7);
    CHECK(out.usage.total_tokens == 27);

    // every byte counts toward the reply limit: thinking 12 + "\n\n" 2, then the final 12
    // replaces the 14 + the item 113; text 7; the call's id 11, name 4, arguments 7; 3 blocks
    const std::size_t all = 12 + reasoning_item.size() + 7 + 11 + 4 + 7 + 3 * 256;
    CHECK(decode_stream(api_kind::openai_responses, responses_stream(), all).stop ==
          stop_reason::tool_use);
    const auto m = decode_stream(api_kind::openai_responses, responses_stream(), all - 1);
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message->starts_with("Reply too large"));
}

TEST_CASE("openai-responses: failed, error, incomplete and cut streams",
          "[http][protocol][responses]") {
    const auto text_head =
        responses_event(
            R"({"type":"response.output_item.added","output_index":0,"item":{"id":"msg_1","type":"message","role":"assistant","content":[]}})") +
        responses_event(
            R"({"type":"response.content_part.added","item_id":"msg_1","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}})") +
        responses_event(
            R"({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"partial"})");
    // response.failed: "<code>: <message>", the code kept as the error type
    auto m = decode_stream(
        api_kind::openai_responses,
        text_head +
            responses_event(
                R"({"type":"response.failed","response":{"status":"failed","error":{"code":"server_error","message":"The server had an error"}}})"));
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message == "server_error: The server had an error");
    CHECK(m.error_type == "server_error");
    CHECK(text_of(m) == "partial");
    CHECK(retryable(m));
    // the API's overflow goes to compaction like the other APIs' overflow bodies
    m = decode_stream(
        api_kind::openai_responses,
        responses_event(
            R"({"type":"response.failed","response":{"status":"failed","error":{"code":"context_length_exceeded","message":"Your input exceeds the context window of this model."}}})"));
    CHECK(m.error_message ==
          "context_length_exceeded: Your input exceeds the context window of this model.");
    CHECK(classify(m, model_info{"fake", "fake-model", "x", 32000, 4096}, 1'700'000'000'000).kind ==
          error_kind::context_overflow);
    m = decode_stream(api_kind::openai_responses,
                      responses_event(R"({"type":"response.failed","response":{}})"));
    CHECK(m.error_message == "Unknown error (no error details in response)");
    m = decode_stream(
        api_kind::openai_responses,
        responses_event(
            R"({"type":"response.failed","response":{"incomplete_details":{"reason":"content_filter"}}})"));
    CHECK(m.error_message == "incomplete: content_filter");
    // an error event: the same text format as the other APIs' stream errors
    m = decode_stream(
        api_kind::openai_responses,
        text_head +
            responses_event(
                R"({"type":"error","code":"rate_limit_exceeded","message":"Rate limit reached","param":null})"));
    CHECK(m.error_message == "rate_limit_exceeded: Rate limit reached");
    CHECK(m.error_type == "rate_limit_exceeded");
    CHECK(retryable(m));
    // response.incomplete at the output limit: the reply is kept, stopReason length
    m = decode_stream(
        api_kind::openai_responses,
        text_head +
            responses_event(
                R"({"type":"response.incomplete","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":3,"output_tokens":4,"total_tokens":7}}})"));
    CHECK(m.stop == stop_reason::length);
    CHECK(text_of(m) == "partial");
    CHECK(m.usage.output == 4);
    // a stream without response.completed is incomplete: a retryable error
    m = decode_stream(api_kind::openai_responses, text_head);
    CHECK(m.stop == stop_reason::error);
    CHECK(m.error_message ==
          "Stream ended without response.completed (the response was incomplete)");
    CHECK(retryable(m));
}

namespace {

// a conversation of this very model over the Responses API, then another model's reply
provider_request responses_request() {
    provider_request r;
    r.model = model_info{"openai", "gpt-5", "openai-responses", 400000, 128000};
    r.model.reasoning = true;
    r.model.image_input = true;
    r.system_prompt = "be brief";
    r.session_id = "s-1";
    r.messages.push_back(std::make_shared<message>(
        make_user_message("what is this?", {image_block{"iVBORw0KGgo=", "image/png"}})));
    thinking_observer obs;
    auto reply =
        std::make_shared<message>(decode_with(obs, api_kind::openai_responses, responses_stream()));
    reply->provider = "openai";
    reply->api = "openai-responses";
    reply->model = "gpt-5";
    r.messages.push_back(reply);
    message result = make_tool_result("call_1|fc_1", "zoom", "zoomed", false);
    result.content.emplace_back(text_block{"twice"});
    result.content.emplace_back(image_block{"R0lGOD", "image/gif"});
    r.messages.push_back(std::make_shared<message>(std::move(result)));
    auto other = std::make_shared<message>();
    other->role = message_role::assistant;
    other->provider = "anthropic";
    other->api = "anthropic-messages";
    other->model = "claude";
    other->content.emplace_back(thinking_block{"Anthropic's thought", "c2ln", false});
    other->content.emplace_back(tool_call_block{"toolu_1", "zoom", json::object()});
    r.messages.push_back(other);
    r.messages.push_back(std::make_shared<message>(make_tool_result("toolu_1", "zoom", "", false)));
    tool_definition td;
    td.name = "zoom";
    td.description = "zooms";
    r.tools.push_back(td);
    return r;
}

}  // namespace

TEST_CASE("openai-responses: the request body, its reasoning items sent back byte for byte",
          "[http][protocol][responses]") {
    provider_request r = responses_request();
    r.thinking = thinking_level::high;
    const std::string body = http_protocol::build_request_body(api_kind::openai_responses, r);
    CHECK(
        body ==
        R"({"model":"gpt-5","input":[{"role":"developer","content":"be brief"},)"
        R"({"role":"user","content":[{"type":"input_text","text":"what is this?"},)"
        R"({"type":"input_image","detail":"auto","image_url":"data:image/png;base64,iVBORw0KGgo="}]},)" +
            std::string(reasoning_item) +
            R"(,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A logo.","annotations":[]}],"status":"completed","id":"msg_1"},)"
            R"({"type":"function_call","id":"fc_1","call_id":"call_1","name":"zoom","arguments":"{\"x\":1}"},)"
            R"({"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"zoomed\ntwice"},)"
            R"({"type":"input_image","detail":"auto","image_url":"data:image/gif;base64,R0lGOD"}]},)"
            R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Anthropic's thought","annotations":[]}],"status":"completed","id":"msg_3"},)"
            R"({"type":"function_call","call_id":"toolu_1","name":"zoom","arguments":"{}"},)"
            R"x({"type":"function_call_output","call_id":"toolu_1","output":"(see attached image)"}],)x"
            R"("stream":true,"prompt_cache_key":"s-1","store":false,"max_output_tokens":32000,)"
            R"("tools":[{"type":"function","name":"zoom","description":"zooms","parameters":{"type":"object","properties":{}},"strict":false}],)"
            R"("reasoning":{"effort":"high","summary":"auto"},"include":["reasoning.encrypted_content"]})");
    CHECK(json::serialize(json::parse(body)) == body);

    // off (or a model that does not reason): no reasoning field, the system prompt's role is
    // "system" without reasoning
    r.thinking = thinking_level::off;
    CHECK(
        http_protocol::build_request_body(api_kind::openai_responses, r).find(R"("reasoning":{)") ==
        std::string::npos);
    r.thinking = thinking_level::xhigh;
    CHECK(
        http_protocol::build_request_body(api_kind::openai_responses, r)
            .ends_with(
                R"("reasoning":{"effort":"high","summary":"auto"},"include":["reasoning.encrypted_content"]})"));
    r.model.reasoning = false;
    const std::string plain = http_protocol::build_request_body(api_kind::openai_responses, r);
    CHECK(
        plain.starts_with(R"({"model":"gpt-5","input":[{"role":"system","content":"be brief"},)"));
    CHECK(plain.find(R"("reasoning":{)") == std::string::npos);
    // another model of the same provider and API: its reasoning item is not sent (it becomes
    // text) and its function-call item id is left out (it was paired with that reasoning)
    r.model.reasoning = true;
    r.model.id = "gpt-5-mini";
    const std::string other = http_protocol::build_request_body(api_kind::openai_responses, r);
    CHECK(other.find(R"("encrypted_content")") == std::string::npos);
    CHECK(
        other.find(
            R"({"type":"message","role":"assistant","content":[{"type":"output_text","text":"Let me look.","annotations":[]}],"status":"completed","id":"msg_1"})") !=
        std::string::npos);
    CHECK(
        other.find(
            R"({"type":"function_call","call_id":"call_1","name":"zoom","arguments":"{\"x\":1}"})") !=
        std::string::npos);

    // the kept texts: copied for the same message at the same position for the same model,
    // written anew for another model
    r.model.id = "gpt-5";
    wire_fragments kept;
    r.fragments = &kept;
    CHECK(http_protocol::build_request_body(api_kind::openai_responses, r) ==
          http_protocol::build_request_body(api_kind::openai_responses, r));
    CHECK(kept.size() == r.messages.size() - 1);
    r.model.id = "gpt-5-mini";
    CHECK(http_protocol::build_request_body(api_kind::openai_responses, r) == other);
}

// ---- coagent-fakellm's script -------------------------------------------------------------

TEST_CASE(
    "request bodies: a message's text is kept between requests and copied only for the "
    "same message at the same position in the same format",
    "[http][protocol]") {
    provider_request r = wide_request();
    for (const api_kind api : {api_kind::openai_completions, api_kind::anthropic_messages}) {
        INFO(http_protocol::to_string(api));
        const std::string plain = http_protocol::build_request_body(api, r);
        wire_fragments kept;
        r.fragments = &kept;
        CHECK(http_protocol::build_request_body(api, r) == plain);  // written and kept
        // every message but the newest (kept from its next request on) and those the API is
        // not sent (Anthropic: the empty assistant message before the last one)
        const std::size_t n = r.messages.size();
        const bool skips = api == api_kind::anthropic_messages;
        CHECK(kept.size() == (skips ? n - 2 : n - 1));
        for (std::size_t i = 0; i + 1 < n; ++i)
            CHECK((kept.find(i, r.messages[i], int(api)) != nullptr) !=
                  (skips && r.messages[i]->content.empty()));
        CHECK(kept.find(n - 1, r.messages[n - 1], int(api)) == nullptr);
        CHECK(http_protocol::build_request_body(api, r) == plain);  // copied
        // the copy is what goes out: a kept text stands for its message
        kept.keep(0, r.messages[0], int(api), R"({"kept":0})");
        CHECK(http_protocol::build_request_body(api, r).find(R"({"kept":0})") != std::string::npos);
        // another message at that position is written anew
        auto replaced = r;
        replaced.fragments = nullptr;
        replaced.messages[0] = std::make_shared<message>(make_user_message("another first"));
        const std::string replaced_plain = http_protocol::build_request_body(api, replaced);
        replaced.fragments = &kept;
        CHECK(http_protocol::build_request_body(api, replaced) == replaced_plain);
        // the other wire format does not take this one's texts
        const api_kind other = api == api_kind::openai_completions ? api_kind::anthropic_messages
                                                                   : api_kind::openai_completions;
        r.fragments = nullptr;
        const std::string other_plain = http_protocol::build_request_body(other, r);
        r.fragments = &kept;
        CHECK(http_protocol::build_request_body(other, r) == other_plain);
        // a shorter conversation: the positions beyond it are forgotten
        auto shorter = r;
        shorter.messages.resize(2);
        (void)http_protocol::build_request_body(api, shorter);
        CHECK(kept.size() == 2);
        r.fragments = nullptr;
    }
}

TEST_CASE("fakellm script: steps, errors naming step and field, example scripts",
          "[http][fakellm]") {
    auto s = fakellm::script::parse(
        R"([{"status":503,"body":{"error":{"message":"x"}},"headers":{"Retry-After":1},"times":2},{"text":"Hi","chunks":2,"usage":{"input":3}},
            {"text":"a b","cutAfterChunks":1},{"text":"a b","stallAfterChunks":1,"stallMs":50},{"sseError":{"type":"overloaded_error","message":"Overloaded"}},
            {"toolCall":{"name":"t","arguments":{"k":1}},"delayMs":5}])",
        "<t>");
    REQUIRE(s.steps.size() == 6);
    CHECK(s.steps[0].times == 2);
    CHECK(s.steps[0].headers.at(0).second == "1");
    CHECK(s.steps[2].cut_after_chunks == 1);
    CHECK(s.steps[3].stall_ms == 50);
    CHECK(s.steps[4].type == fakellm::step::kind::sse_error);
    CHECK(s.steps[5].delay_ms == 5);
    CHECK_THROWS_WITH(
        fakellm::script::parse(R"([{"text":"a","stallMs":"x"}])", "f.json"),
        Catch::Contains("f.json: step 1: \"stallMs\" must be a non-negative integer"));
    CHECK_THROWS_WITH(fakellm::script::parse(R"([{"txt":"a"}])", "f.json"),
                      Catch::Contains("step 1: unknown field \"txt\""));
    CHECK_THROWS_WITH(fakellm::script::parse("[{\"text\":", "f.json"),
                      Catch::StartsWith("f.json:1:"));
    CHECK_THROWS_WITH(fakellm::script::parse(R"([{"status":200,"text":"a"}])", "f.json"),
                      Catch::Contains("cannot be combined"));
    CHECK(fakellm::split_chunks("héllo wörld", 3) == strings{"hél", "lo w", "örld"});
    CHECK(fakellm::split_chunks("a bc d", std::nullopt) == strings{"a", " bc", " d"});
    CHECK(fakellm::api_of_path("/v1/chat/completions?x=1") == fakellm::api::openai);
    CHECK(fakellm::api_of_path("/messages") == fakellm::api::anthropic);
    CHECK(fakellm::api_of_path("/v1/models") == fakellm::api::unknown);
    for (const auto& e :
         std::filesystem::directory_iterator(COAGENT_SOURCE_DIR "/examples/fakellm")) {
        INFO(e.path());
        CHECK_NOTHROW(fakellm::script::from_argument(e.path().string()));
    }
}

// ---- providers over loopback --------------------------------------------------------------

TEST_CASE("issue 16 item 5: the attempt deadline and the idle timer (sans-io)",
          "[http][protocol][limits]") {
    using clock = stream_deadline::clock;
    const clock::time_point t0{};
    stream_deadline d(t0, 200, 1000);
    CHECK(d.expiry() == t0 + 200ms);
    d.on_progress(t0 + 150ms);
    CHECK(d.expiry() == t0 + 350ms);
    d.on_progress(t0 + 900ms);
    CHECK(d.expiry() == t0 + 1000ms);  // the attempt's deadline comes first
    CHECK(d.timeout_text(t0 + 999ms) == "Stream idle timeout: no data for 200 ms (timed out)");
    CHECK(d.timeout_text(t0 + 1000ms) ==
          "Attempt timeout: no complete reply within provider.attemptTimeoutMs (1000 ms) (timed "
          "out)");
    message m;
    m.role = message_role::assistant;
    m.stop = stop_reason::error;
    m.error_message = d.timeout_text(t0 + 1000ms);
    CHECK(retryable(m));
    stream_deadline off(t0, 200, 0);  // 0: no attempt deadline
    off.on_progress(t0 + 24h);
    CHECK(off.expiry() == t0 + 24h + 200ms);
    CHECK_FALSE(off.attempt_expired(t0 + 24h));
    // SSE comments are not progress; data, fields and the blank line ending an event are
    for (const std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{1000}}) {
        sse_parser p;
        const std::string pings = ": ping\n\n:\n\r\n: keep-alive\r\n\r\n";
        for (std::size_t i = 0; i < pings.size(); i += chunk)
            p.feed(std::string_view(pings).substr(i, chunk), [](const sse_event&) {});
        CHECK(p.progress() == 0);
        const std::string data = "data: x\n\n";
        for (std::size_t i = 0; i < data.size(); i += chunk)
            p.feed(std::string_view(data).substr(i, chunk), [](const sse_event&) {});
        CHECK(p.progress() == data.size());
    }
}

namespace {

// A server that answers one request with the headers of an event stream, then writes `piece`
// every 20 ms, `times` times (a server that pings, or trickles data, for ever).
asio::awaitable<void> trickle_server(std::shared_ptr<asio::ip::tcp::acceptor> acceptor,
                                     std::string piece, int times) {
    auto sock = co_await acceptor->async_accept(asio::use_awaitable);
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    co_await asio::async_write(sock, asio::buffer(head), asio::use_awaitable);
    asio::steady_timer t(sock.get_executor());
    for (int i = 0; i < times; ++i) {
        t.expires_after(20ms);
        co_await t.async_wait(asio::use_awaitable);
        auto [ec, n] = co_await asio::async_write(sock, asio::buffer(piece),
                                                  asio::as_tuple(asio::use_awaitable));
        (void)n;
        if (ec) co_return;
    }
}

message stream_from_trickle(std::string piece, std::int64_t idle_ms, std::int64_t attempt_ms) {
    loopback lb("[]");
    auto acceptor = std::make_shared<asio::ip::tcp::acceptor>(
        lb.io, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    const auto port = acceptor->local_endpoint().port();
    const auto on_done = [](std::exception_ptr e) {
        if (e) std::rethrow_exception(e);
    };
    asio::co_spawn(lb.io, trickle_server(acceptor, std::move(piece), 500), on_done);
    auto o = lb.options(api_kind::openai_completions);
    o.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
    o.stream_idle_timeout_ms = idle_ms;
    o.attempt_timeout_ms = attempt_ms;
    http_provider p(o);
    recording_observer obs;
    abort_signal abort;
    return lb.stream_once(p, simple_request(p.model()), obs, abort);
}

}  // namespace

TEST_CASE("issue 16 item 5: SSE comments do not reset the idle timer", "[http][loopback][limits]") {
    // pings every 20 ms for 10 s; the idle timeout (150 ms) still ends the attempt
    const auto out = stream_from_trickle(": ping\n\n", 150, 0);
    CHECK(out.stop == stop_reason::error);
    CHECK(out.error_message == "Stream idle timeout: no data for 150 ms (timed out)");
    CHECK(retryable(out));
}

TEST_CASE("issue 16 item 5: provider.attemptTimeoutMs ends an attempt that trickles data",
          "[http][loopback][limits]") {
    CHECK(http_provider_options{}.attempt_timeout_ms == 600000);
    CHECK(settings{}.provider.attempt_timeout_ms == 600000);
    // a content delta every 20 ms for 10 s: never idle for 150 ms, but past 300 ms in all
    const auto out =
        stream_from_trickle("data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", 150, 300);
    CHECK(out.stop == stop_reason::error);
    CHECK(out.error_message ==
          "Attempt timeout: no complete reply within provider.attemptTimeoutMs (300 ms) (timed "
          "out)");
    CHECK(retryable(out));
    CHECK_THAT(text_of(out), Catch::StartsWith("xxx"));  // what came before the deadline
}

TEST_CASE(
    "fakellm failFor: every request of the window gets its answer, then the script goes "
    "on (issue 19)",
    "[http][fakellm][issue-19]") {
    auto parsed = fakellm::script::parse(
        R"([{"failFor":{"ms":400,"status":503,"headers":{"retry-after":1},"body":"down"},"delayMs":1},{"text":"back"}])",
        "<t>");
    REQUIRE(parsed.steps.size() == 2);
    CHECK(parsed.steps[0].fail_for_ms == 400);
    CHECK(parsed.steps[0].type == fakellm::step::kind::status);
    CHECK(parsed.steps[0].status == 503);
    CHECK(parsed.steps[0].delay_ms == 1);
    CHECK_THROWS_WITH(fakellm::script::parse(R"([{"failFor":{"ms":0,"status":503}}])", "f.json"),
                      "f.json: step 1: \"ms\" must be a positive integer (milliseconds), found 0");
    CHECK_THROWS_WITH(fakellm::script::parse(R"([{"failFor":{"ms":5}}])", "f.json"),
                      "f.json: step 1: \"failFor\" needs \"ms\" and \"status\"");
    CHECK_THROWS_WITH(
        fakellm::script::parse(R"([{"text":"a"},{"failFor":{"ms":5,"status":503},"times":2}])",
                               "f.json"),
        "f.json: step 2: \"failFor\" can only be combined with \"delayMs\", found \"times\"");
    CHECK_THROWS_WITH(
        fakellm::script::parse(R"([{"failFor":{"ms":5,"status":503,"text":"x"}}])", "f.json"),
        "f.json: step 1: unknown field \"failFor.text\" (known: ms, status, headers, body)");
    CHECK_THROWS_WITH(
        fakellm::script::parse(R"([{"failFor":{"ms":5,"status":99}}])", "f.json"),
        "f.json: step 1 \"failFor\": step 1: \"status\" must be an HTTP status (100-599), "
        "found 99");

    loopback lb(R"([{"failFor":{"ms":1000,"status":503,"body":"down"}},{"text":"back"}])");
    http_provider p(lb.options(api_kind::openai_completions));
    recording_observer obs;
    abort_signal abort;
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int> statuses;
    // within the window: every request, however many, gets the 503
    for (int i = 0; i < 5; ++i) {
        const auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(out.error_status == 503);
    }
    REQUIRE(std::chrono::steady_clock::now() - t0 < 1000ms);  // they all fell in the window
    // past the window the script goes on
    asio::steady_timer t(lb.io, t0 + 1050ms);
    bool waited = false;
    t.async_wait([&](boost::system::error_code) { waited = true; });
    REQUIRE(lb.run_until([&] { return waited; }));
    auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.stop == stop_reason::stop);
    CHECK(text_of(out) == "back");
    out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.error_status == 500);  // then exhausted
    for (const auto& r : lb.server->requests()) statuses.push_back(r.status);
    CHECK(statuses == std::vector<int>{503, 503, 503, 503, 503, 200, 500});
}

TEST_CASE("both OpenAI APIs: a streamed reply with usage over loopback",
          "[http][loopback][responses]") {
    for (const auto api : {api_kind::openai_completions, api_kind::openai_responses}) {
        INFO(to_string(api));
        loopback lb(
            R"([{"text":"Hello there friend","usage":{"input":11,"output":3,"cacheRead":4}}])");
        http_provider p(lb.options(api));
        recording_observer obs;
        abort_signal abort;
        auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(out.stop == stop_reason::stop);
        CHECK_FALSE(out.error_message);
        CHECK(text_of(out) == "Hello there friend");
        CHECK(obs.starts == 1);
        CHECK(obs.deltas == strings{"Hello", " there", " friend"});
        CHECK(out.usage.input == 11);
        CHECK(out.usage.cache_read == 4);
        CHECK(out.usage.output == 3);
        CHECK(out.usage.total_tokens == 18);
        auto reqs = lb.server->requests();
        REQUIRE(reqs.size() == 1);
        CHECK(reqs[0].authorization == "Bearer sk-test-0001");
        CHECK(reqs[0].x_api_key.empty());
        CHECK(reqs[0].roles == strings{"system", "user"});
        CHECK(fakellm::to_json(reqs[0]).at("api") == json::value(to_string(api)));
        if (api == api_kind::openai_completions) {
            CHECK(reqs[0].path == "/v1/chat/completions");
            CHECK(reqs[0].model == "fake-model");
            CHECK(reqs[0].stream);
        } else {
            CHECK(reqs[0].path == "/v1/responses");
            CHECK(
                reqs[0].body ==
                R"({"model":"fake-model","input":[{"role":"system","content":"be brief"},)"
                R"({"role":"user","content":[{"type":"input_text","text":"hi"}]}],)"
                R"("stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":4096})");
        }
    }
}

TEST_CASE("a long reply sent at once arrives whole, twice over one kept-alive connection",
          "[http][loopback]") {
    // 2000 events written in one go: the connection's reads grow from 512 bytes to 16 KiB (a
    // read that got all it asked for), an event spans two reads, and a read holds more body than
    // the 2 KiB a parser step takes; the second reply comes through the grown buffer
    std::string text;
    for (int i = 0; i < 2000; ++i) text += "w" + std::to_string(i) + " ";
    text.pop_back();
    const std::string step = R"({"text":")" + text + R"(","chunks":2000})";
    loopback lb("[" + step + "," + step + "]");
    http_provider p(lb.options(api_kind::openai_completions));
    abort_signal abort;
    std::size_t reads_before = 0;
    for (int reply = 0; reply < 2; ++reply) {
        INFO("reply " << reply);
        recording_observer obs;
        auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(out.stop == stop_reason::stop);
        CHECK_FALSE(out.error_message);
        CHECK(text_of(out) == text);
        CHECK(obs.deltas.size() == 2000);
        // about 300 KB: some 600 reads of 512 bytes; reads of up to 16 KiB take a small part
        // of that (the bound is loose: a read gets less than it asks when the server is not
        // done writing)
        CHECK(p.body_reads() - reads_before < 200);
        reads_before = p.body_reads();
    }
    CHECK(p.connections_opened() == 1);
}

TEST_CASE("issue 24: fakellm streams signed thinking, the next request sends it back unchanged",
          "[http][loopback][content]") {
    loopback lb(R"([{"text":"A logo.","thinking":"Let me look.","signature":"c2lnLzEr+A=="},)"
                R"({"text":"Sure.","redactedThinking":"EnCrYpTeD"},{"text":"ok"}])");
    http_provider p(lb.options(api_kind::anthropic_messages));
    recording_observer obs;
    abort_signal abort;
    provider_request req = simple_request(p.model(), "what is this?", "");
    req.messages[0] = std::make_shared<message>(
        make_user_message("what is this?", {image_block{"iVBORw0KGgo=", "image/png"}}));
    auto first = lb.stream_once(p, req, obs, abort);
    REQUIRE(first.stop == stop_reason::stop);
    REQUIRE(first.content.size() == 2);
    const auto* th = std::get_if<thinking_block>(&first.content[0]);
    REQUIRE(th);
    CHECK(th->thinking == "Let me look.");
    CHECK(th->signature == "c2lnLzEr+A==");
    req.messages.push_back(std::make_shared<message>(first));
    req.messages.push_back(std::make_shared<message>(make_user_message("and now?")));
    auto second = lb.stream_once(p, req, obs, abort);
    REQUIRE(second.stop == stop_reason::stop);
    const auto* red = std::get_if<thinking_block>(&second.content.at(0));
    REQUIRE(red);
    CHECK(red->redacted);
    CHECK(red->signature == "EnCrYpTeD");
    req.messages.push_back(std::make_shared<message>(second));
    req.messages.push_back(std::make_shared<message>(make_user_message("thanks")));
    CHECK(lb.stream_once(p, req, obs, abort).stop == stop_reason::stop);

    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 3);
    CHECK(
        reqs[1].body ==
        R"({"model":"fake-model","max_tokens":4096,"messages":[)"
        R"({"role":"user","content":[{"type":"text","text":"what is this?"},)"
        R"({"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]},)"
        R"({"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","signature":"c2lnLzEr+A=="},)"
        R"({"type":"text","text":"A logo."}]},{"role":"user","content":[{"type":"text","text":"and now?"}]}],"stream":true})");
    // the log says what each request carried
    CHECK(fakellm::to_json(reqs[0]).at("images") == 1);
    CHECK(fakellm::to_json(reqs[0]).at("thinking") == 0);
    CHECK(fakellm::to_json(reqs[1]).at("thinking") == 1);
    CHECK(fakellm::to_json(reqs[2]).at("thinking") == 2);
    CHECK(reqs[2].body.find(R"({"type":"redacted_thinking","data":"EnCrYpTeD"})") !=
          std::string::npos);
}

TEST_CASE("issue 24: openai-completions sends a prompt's image as a data URL over loopback",
          "[http][loopback][content]") {
    loopback lb(R"([{"text":"A logo."}])");
    http_provider p(lb.options(api_kind::openai_completions));
    recording_observer obs;
    abort_signal abort;
    provider_request req = simple_request(p.model(), "", "");
    req.messages[0] = std::make_shared<message>(
        make_user_message("what is this?", {image_block{"/9j/4AAQ", "image/jpeg"}}));
    auto out = lb.stream_once(p, req, obs, abort);
    CHECK(out.stop == stop_reason::stop);
    CHECK(text_of(out) == "A logo.");
    CHECK(out.content.size() == 1);
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 1);
    CHECK(
        reqs[0].body ==
        R"({"model":"fake-model","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},)"
        R"({"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4AAQ"}}]}],)"
        R"("stream":true,"stream_options":{"include_usage":true}})");
    CHECK(reqs[0].images == 1);
}

TEST_CASE(
    "issue 24: openai-completions keeps reasoning_content and sends it back to the same model",
    "[http][loopback][content]") {
    loopback lb(R"([{"text":"A logo.","thinking":"Let me look."},{"text":"ok"}])");
    auto o = lb.options(api_kind::openai_completions);
    o.model.reasoning = true;
    http_provider p(o);
    recording_observer obs;
    abort_signal abort;
    provider_request req = simple_request(p.model(), "what is this?", "");
    auto first = lb.stream_once(p, req, obs, abort);
    REQUIRE(first.stop == stop_reason::stop);
    REQUIRE(first.content.size() == 2);
    const auto* th = std::get_if<thinking_block>(&first.content[0]);
    REQUIRE(th);
    CHECK(th->thinking == "Let me look.");
    CHECK(th->signature == "reasoning_content");  // the field it came in (the reference's)
    CHECK(text_of(first) == "A logo.");
    first.provider = "fake";
    first.api = "openai-completions";
    first.model = "fake-model";
    req.messages.push_back(std::make_shared<message>(first));
    req.messages.push_back(std::make_shared<message>(make_user_message("and now?")));
    CHECK(lb.stream_once(p, req, obs, abort).stop == stop_reason::stop);
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 2);
    CHECK(
        reqs[1].body ==
        R"({"model":"fake-model","messages":[{"role":"user","content":"what is this?"},)"
        R"({"role":"assistant","content":"A logo.","reasoning_content":"Let me look."},)"
        R"({"role":"user","content":"and now?"}],"stream":true,"stream_options":{"include_usage":true}})");
    // to Anthropic the reasoning of another API is text (its signature means nothing there)
    auto for_anthropic = req;
    for_anthropic.model.api = "anthropic-messages";
    auto redacted = std::make_shared<message>(first);
    redacted->content.insert(redacted->content.begin(),
                             thinking_block{"[Reasoning redacted]", "opaque", true});
    for_anthropic.messages[1] = redacted;
    CHECK(
        http_protocol::build_request_body(api_kind::anthropic_messages, for_anthropic)
            .find(
                R"({"role":"assistant","content":[{"type":"text","text":"Let me look."},{"type":"text","text":"A logo."}]})") !=
        std::string::npos);
    // another model's reasoning is not sent
    req.model.id = "other-model";
    CHECK(http_protocol::build_request_body(api_kind::openai_completions, req)
              .find("reasoning_content") == std::string::npos);
    // the first of the reference's fields wins: reasoning_content, reasoning, reasoning_text
    const auto m = decode_stream(
        api_kind::openai_completions,
        "data: {\"choices\":[{\"delta\":{\"reasoning\":\"a\",\"reasoning_text\":\"b\"}}]}\n\n"
        "data: "
        "{\"choices\":[{\"delta\":{\"reasoning_text\":\"c\"},\"finish_reason\":\"stop\"}]}\n\n"
        "data: [DONE]\n\n");
    REQUIRE(m.content.size() == 1);
    CHECK(std::get<thinking_block>(m.content[0]).thinking == "ac");
    CHECK(std::get<thinking_block>(m.content[0]).signature == "reasoning");
}

TEST_CASE(
    "fakellm --per-conversation: each conversation plays the script, forConversations picks "
    "a share, chunkDelayMs paces",
    "[http][loopback][fakellm]") {
    // keys below and above the middle of [0, 1): the share is a fixed hash of the key
    std::vector<std::string> low, high;
    for (int i = 0; low.size() < 2 || high.size() < 2; ++i) {
        std::string k = "conversation " + std::to_string(i);
        (fakellm::conversation_share(k) < 0.5 ? low : high).push_back(std::move(k));
    }
    CHECK(fakellm::conversation_share("x") == fakellm::conversation_share("x"));
    fakellm::server_options so;
    so.per_conversation = true;
    loopback lb(
        R"([{"status":503,"body":"Service Unavailable","forConversations":[0,0.5]},{"text":"ok now","chunks":5,"chunkDelayMs":30}])",
        so);
    http_provider p(lb.options(api_kind::openai_completions));
    const auto once = [&](const std::string& key) {
        recording_observer obs;
        abort_signal abort;
        return lb.stream_once(p, simple_request(p.model(), key), obs, abort);
    };
    // two conversations of the failing share: each meets the 503 first (one script each)
    for (const auto& k : {low[0], low[1]}) {
        INFO(k);
        CHECK(once(k).stop == stop_reason::error);
    }
    const auto t0 = std::chrono::steady_clock::now();
    const message paced = once(low[0]);
    CHECK(std::chrono::steady_clock::now() - t0 >= 4 * 30ms);  // 5 chunks, 4 pauses between
    CHECK(paced.stop == stop_reason::stop);
    CHECK(text_of(paced) == "ok now");
    // the other share skips the step
    CHECK(once(high[0]).stop == stop_reason::stop);
    CHECK(once(high[1]).stop == stop_reason::stop);
    // each conversation's script is over now
    CHECK(once(high[0]).error_message.value_or("").find(fakellm::server::exhausted_text) !=
          std::string::npos);
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 6);
    CHECK(reqs[0].conversation == low[0]);
    CHECK(reqs[0].status == 503);
    CHECK(reqs[1].status == 503);
    CHECK(reqs[2].status == 200);

    // without --per-conversation one script serves all: the second conversation gets step 2
    loopback shared(R"([{"status":503,"body":"x"},{"text":"ok"}])");
    http_provider q(shared.options(api_kind::openai_completions));
    recording_observer obs;
    abort_signal abort;
    CHECK(shared.stream_once(q, simple_request(q.model(), "a"), obs, abort).stop ==
          stop_reason::error);
    CHECK(shared.stream_once(q, simple_request(q.model(), "b"), obs, abort).stop ==
          stop_reason::stop);

    CHECK_THROWS_WITH(fakellm::script::parse(R"([{"status":503,"chunkDelayMs":5}])", "f.json"),
                      Catch::Contains("step 1: chunks, usage, cutAfterChunks, stallAfterChunks "
                                      "and chunkDelayMs belong to streamed steps"));
    CHECK_THROWS_WITH(
        fakellm::script::parse(R"([{"text":"a","forConversations":[1,1]}])", "f.json"),
        Catch::Contains("step 1: \"forConversations\" must be [from, to] with 0 <= from < to <= "
                        "1, found [1,1]"));
    CHECK_THROWS_WITH(fakellm::script::parse(R"([{"text":"a","chunkDelayMs":-1}])", "f.json"),
                      Catch::Contains("\"chunkDelayMs\" must be an integer from 0 to 3600000"));
}

TEST_CASE("anthropic-messages: a streamed reply with usage over loopback", "[http][loopback]") {
    loopback lb(
        R"([{"text":"Bonjour tout le monde","chunks":2,"usage":{"input":9,"output":4,"cacheWrite":2}}])");
    http_provider p(lb.options(api_kind::anthropic_messages, "ak-0002"));
    recording_observer obs;
    abort_signal abort;
    auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.stop == stop_reason::stop);
    CHECK(text_of(out) == "Bonjour tout le monde");
    CHECK(obs.deltas.size() == 2);
    CHECK(out.usage.input == 9);
    CHECK(out.usage.output == 4);
    CHECK(out.usage.cache_write == 2);
    auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 1);
    CHECK(reqs[0].path == "/v1/messages");
    CHECK(reqs[0].x_api_key == "ak-0002");
    CHECK(reqs[0].authorization.empty());
    CHECK(reqs[0].roles == strings{"system", "user"});
    auto body = json::parse(reqs[0].body).as_object();
    CHECK(body.at("max_tokens") == 4096);
}

TEST_CASE("tool calls stream in the three APIs", "[http][loopback]") {
    for (auto api :
         {api_kind::openai_completions, api_kind::anthropic_messages, api_kind::openai_responses}) {
        INFO(http_protocol::to_string(api));
        loopback lb(
            R"([{"toolCall":{"name":"read_file","arguments":{"path":"README.md","n":2}},"chunks":4}])");
        http_provider p(lb.options(api));
        recording_observer obs;
        abort_signal abort;
        auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(out.stop == stop_reason::tool_use);
        auto calls = tool_calls_of(out);
        REQUIRE(calls.size() == 1);
        CHECK(calls[0]->name == "read_file");
        CHECK_FALSE(calls[0]->id.empty());
        CHECK(calls[0]->arguments.at("path") == "README.md");
        CHECK(calls[0]->arguments.at("n") == 2);
    }
}

TEST_CASE("openai-responses: a tool call round trip, the second request's exact body",
          "[http][loopback][responses]") {
    loopback lb(
        R"([{"toolCall":{"name":"read_file","arguments":{"path":"README.md","n":2}},"chunks":3},{"text":"done"}])");
    http_provider p(lb.options(api_kind::openai_responses));
    recording_observer obs;
    abort_signal abort;
    provider_request req = simple_request(p.model());
    auto first = lb.stream_once(p, req, obs, abort);
    REQUIRE(first.stop == stop_reason::tool_use);
    const auto calls = tool_calls_of(first);
    REQUIRE(calls.size() == 1);
    CHECK(calls[0]->id == "call_fakellm_1|fc_fakellm_1");  // "<call_id>|<item id>"
    CHECK(calls[0]->name == "read_file");
    CHECK(json::serialize(calls[0]->arguments) == R"({"path":"README.md","n":2})");
    first.provider = "fake";
    first.api = "openai-responses";
    first.model = "fake-model";
    req.messages.push_back(std::make_shared<message>(first));
    req.messages.push_back(
        std::make_shared<message>(make_tool_result(calls[0]->id, "read_file", "# README", false)));
    auto second = lb.stream_once(p, req, obs, abort);
    CHECK(second.stop == stop_reason::stop);
    CHECK(text_of(second) == "done");
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 2);
    CHECK(
        reqs[1].body ==
        R"({"model":"fake-model","input":[{"role":"system","content":"be brief"},)"
        R"({"role":"user","content":[{"type":"input_text","text":"hi"}]},)"
        R"({"type":"function_call","id":"fc_fakellm_1","call_id":"call_fakellm_1","name":"read_file","arguments":"{\"path\":\"README.md\",\"n\":2}"},)"
        R"({"type":"function_call_output","call_id":"call_fakellm_1","output":"# README"}],)"
        R"("stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":4096})");
    CHECK(reqs[1].roles == strings{"system", "user", "function_call", "function_call_output"});
}

TEST_CASE("openai-responses: fakellm's reasoning items come back unchanged in the next request",
          "[http][loopback][responses][content]") {
    loopback lb(R"([{"text":"A logo.","thinking":"Let me look.","signature":"gAAAAB+/=="},)"
                R"({"text":"Sure.","redactedThinking":"OPAQUE"},{"text":"ok"}])");
    auto o = lb.options(api_kind::openai_responses);
    o.model.reasoning = true;
    http_provider p(o);
    thinking_observer obs;
    abort_signal abort;
    provider_request req = simple_request(p.model(), "what is this?", "");
    req.thinking = thinking_level::low;
    const auto stream = [&] {
        message out;
        out.role = message_role::assistant;
        out.provider = "fake";
        out.api = "openai-responses";
        out.model = "fake-model";
        bool done = false;
        asio::co_spawn(lb.io, p.stream(req, out, obs, abort),
                       [&](std::exception_ptr) { done = true; });
        REQUIRE(lb.run_until([&] { return done; }));
        return out;
    };
    const std::string item1 =
        R"({"id":"rs_fakellm_1","type":"reasoning","summary":[{"type":"summary_text","text":"Let me look."}],"encrypted_content":"gAAAAB+/=="})";
    const std::string item2 =
        R"({"id":"rs_fakellm_2","type":"reasoning","summary":[],"encrypted_content":"OPAQUE"})";
    auto first = stream();
    REQUIRE(first.stop == stop_reason::stop);
    REQUIRE(first.content.size() == 2);
    const auto* th = std::get_if<thinking_block>(&first.content[0]);
    REQUIRE(th);
    CHECK(th->thinking == "Let me look.");
    CHECK(th->signature == item1);
    CHECK(obs.thinking == strings{"Let", " me", " look.", "\n\n"});
    req.messages.push_back(std::make_shared<message>(first));
    req.messages.push_back(std::make_shared<message>(make_user_message("and now?")));
    auto second = stream();
    REQUIRE(second.stop == stop_reason::stop);
    const auto* enc = std::get_if<thinking_block>(&second.content.at(0));
    REQUIRE(enc);
    CHECK(enc->thinking.empty());  // encrypted reasoning only: no summary
    CHECK(enc->signature == item2);
    req.messages.push_back(std::make_shared<message>(second));
    req.messages.push_back(std::make_shared<message>(make_user_message("thanks")));
    CHECK(stream().stop == stop_reason::stop);

    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 3);
    CHECK(
        reqs[1].body ==
        R"({"model":"fake-model","input":[{"role":"user","content":[{"type":"input_text","text":"what is this?"}]},)" +
            item1 +
            R"(,{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A logo.","annotations":[]}],"status":"completed","id":"msg_1"},)"
            R"({"role":"user","content":[{"type":"input_text","text":"and now?"}]}],)"
            R"("stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":4096,)"
            R"("reasoning":{"effort":"low","summary":"auto"},"include":["reasoning.encrypted_content"]})");
    CHECK(reqs[2].body.find("," + item2 + ",") != std::string::npos);
    // the log says what each request carried
    CHECK(fakellm::to_json(reqs[0]).at("thinking") == 0);
    CHECK(fakellm::to_json(reqs[1]).at("thinking") == 1);
    CHECK(fakellm::to_json(reqs[2]).at("thinking") == 2);
    CHECK(reqs[1].roles == strings{"user", "reasoning", "assistant", "user"});
}

TEST_CASE("openai-responses: a prompt's image is an input_image over loopback",
          "[http][loopback][responses][content]") {
    loopback lb(R"([{"text":"A logo."}])");
    http_provider p(lb.options(api_kind::openai_responses));
    recording_observer obs;
    abort_signal abort;
    provider_request req = simple_request(p.model(), "", "");
    req.messages[0] = std::make_shared<message>(
        make_user_message("what is this?", {image_block{"/9j/4AAQ", "image/jpeg"}}));
    auto out = lb.stream_once(p, req, obs, abort);
    CHECK(out.stop == stop_reason::stop);
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 1);
    CHECK(
        reqs[0].body ==
        R"({"model":"fake-model","input":[{"role":"user","content":[{"type":"input_text","text":"what is this?"},)"
        R"({"type":"input_image","detail":"auto","image_url":"data:image/jpeg;base64,/9j/4AAQ"}]}],)"
        R"("stream":true,"prompt_cache_key":"session-1","store":false,"max_output_tokens":4096})");
    CHECK(reqs[0].images == 1);
}

TEST_CASE("HTTP errors become the reference's error text with structured fields",
          "[http][loopback]") {
    loopback lb(
        R"([{"status":503,"body":{"error":{"message":"Service Unavailable: upstream overloaded","type":"server_error"}}},
                    {"status":502},
                    {"status":529,"body":{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}},
                    {"status":401,"body":{"error":{"message":"Incorrect API key provided: sk-abc***","type":"invalid_request_error"}}}])");
    const api_kind api = GENERATE(api_kind::openai_completions, api_kind::anthropic_messages,
                                  api_kind::openai_responses);
    INFO(http_protocol::to_string(api));
    http_provider p(lb.options(api));
    recording_observer obs;
    abort_signal abort;
    auto req = simple_request(p.model());
    auto a = lb.stream_once(p, req, obs, abort);
    CHECK(a.stop == stop_reason::error);
    CHECK(a.error_message == "503 Service Unavailable: upstream overloaded");
    CHECK(a.error_status == 503);
    CHECK(a.error_type == "server_error");
    CHECK(retryable(a));
    auto b = lb.stream_once(p, req, obs, abort);
    CHECK(b.error_message == "502 status code (no body)");
    auto c = lb.stream_once(p, req, obs, abort);
    CHECK(c.error_message == "529 Overloaded");
    CHECK(c.error_type == "overloaded_error");
    CHECK(retryable(c));
    auto d = lb.stream_once(p, req, obs, abort);
    CHECK(d.error_message == "401 Incorrect API key provided: sk-abc***");
    CHECK_FALSE(retryable(d));
    auto e = lb.stream_once(p, req, obs, abort);  // the script ran out
    CHECK(e.error_message == "500 fakellm script exhausted");
    CHECK(obs.starts == 0);
    CHECK(p.connections_opened() == 1);  // keep-alive: one connection for all five
}

TEST_CASE("retry-after headers add the retry-after-ms suffix (largest wins)",
          "[http][loopback][appendix-a]") {
    loopback lb(
        R"([{"status":429,"headers":{"Retry-After":"1"},"body":{"error":{"message":"Rate limit reached for requests"}}},
                    {"status":429,"headers":{"retry-after-ms":"1500","x-ratelimit-reset-ms":"2500","Retry-After":"2"}},
                    {"status":429,"headers":{"Retry-After":"9"},"body":{"error":{"message":"slow down retry-after-ms=10"}}},
                    {"status":503,"headers":{"x-should-retry":"false"}}])");
    const api_kind api = GENERATE(api_kind::openai_completions, api_kind::anthropic_messages,
                                  api_kind::openai_responses);
    INFO(http_protocol::to_string(api));
    http_provider p(lb.options(api));
    recording_observer obs;
    abort_signal abort;
    auto req = simple_request(p.model());
    CHECK(lb.stream_once(p, req, obs, abort).error_message ==
          "429 Rate limit reached for requests retry-after-ms=1000");
    CHECK(lb.stream_once(p, req, obs, abort).error_message ==
          "429 status code (no body) retry-after-ms=2500");
    CHECK(lb.stream_once(p, req, obs, abort).error_message == "429 slow down retry-after-ms=10");
    const auto vetoed = lb.stream_once(p, req, obs, abort);
    CHECK(vetoed.error_message == "503 status code (no body)");
    // §2.7: the header is recorded on the message (honoured only with retry.honorShouldRetry)
    CHECK(vetoed.should_retry == std::optional<bool>(false));
}

TEST_CASE("a connection dropped mid-stream is a retryable connection error", "[http][loopback]") {
    for (auto api :
         {api_kind::openai_completions, api_kind::anthropic_messages, api_kind::openai_responses}) {
        INFO(http_protocol::to_string(api));
        loopback lb(R"([{"text":"one two three four five","cutAfterChunks":2},{"text":"ok"}])");
        http_provider p(lb.options(api));
        recording_observer obs;
        abort_signal abort;
        auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(out.stop == stop_reason::error);
        REQUIRE(out.error_message);
        CHECK_THAT(*out.error_message, Catch::StartsWith("Connection error:"));
        CHECK(text_of(out) == "one two");  // what arrived is kept on the errored message
        CHECK(retryable(out));
        auto next = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(next.stop == stop_reason::stop);
        CHECK(p.connections_opened() == 2);  // the dropped connection was not reused
    }
}

TEST_CASE("a stalled stream hits the idle timeout: a retryable 'timed out' error",
          "[http][loopback]") {
    for (auto api : {api_kind::anthropic_messages, api_kind::openai_responses}) {
        INFO(http_protocol::to_string(api));
        loopback lb(R"([{"text":"one two three","stallAfterChunks":1,"stallMs":5000}])");
        auto o = lb.options(api);
        o.stream_idle_timeout_ms = 150;
        http_provider p(o);
        recording_observer obs;
        abort_signal abort;
        const auto t0 = std::chrono::steady_clock::now();
        auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
        CHECK(std::chrono::steady_clock::now() - t0 < 3s);
        CHECK(out.stop == stop_reason::error);
        CHECK(out.error_message == "Stream idle timeout: no data for 150 ms (timed out)");
        CHECK(retryable(out));
        CHECK(text_of(out) == "one");
    }
}

TEST_CASE("a stall shorter than the idle timeout is just slow", "[http][loopback]") {
    loopback lb(R"([{"text":"one two three","stallAfterChunks":1,"stallMs":100}])");
    auto o = lb.options(api_kind::openai_completions);
    o.stream_idle_timeout_ms = 2000;
    http_provider p(o);
    recording_observer obs;
    abort_signal abort;
    auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.stop == stop_reason::stop);
    CHECK(text_of(out) == "one two three");
}

TEST_CASE("Anthropic error event mid-stream (overloaded_error) is retryable", "[http][loopback]") {
    loopback lb(
        R"([{"text":"partial words","sseError":{"type":"overloaded_error","message":"Overloaded"}},
                    {"sseError":{"type":"api_error","message":"Internal server error"}}])");
    http_provider p(lb.options(api_kind::anthropic_messages));
    recording_observer obs;
    abort_signal abort;
    auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.stop == stop_reason::error);
    CHECK(out.error_message == "overloaded_error: Overloaded");
    CHECK(out.error_type == "overloaded_error");
    CHECK(text_of(out) == "partial words");
    CHECK(retryable(out));
    // the same step in the OpenAI format: an error object in the stream
    http_provider q(lb.options(api_kind::openai_completions));
    auto o2 = lb.stream_once(q, simple_request(q.model()), obs, abort);
    CHECK(o2.error_message == "api_error: Internal server error");
    CHECK(retryable(o2));
}

TEST_CASE("openai-responses: an error event mid-stream keeps the text and is retryable",
          "[http][loopback][responses]") {
    loopback lb(
        R"([{"text":"partial words","sseError":{"type":"server_error","message":"The server had an error"}}])");
    http_provider p(lb.options(api_kind::openai_responses));
    recording_observer obs;
    abort_signal abort;
    auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.stop == stop_reason::error);
    CHECK(out.error_message == "server_error: The server had an error");
    CHECK(out.error_type == "server_error");
    CHECK(text_of(out) == "partial words");
    CHECK(retryable(out));
}

TEST_CASE("abort during a stream closes the socket promptly: stopReason aborted",
          "[http][loopback]") {
    loopback lb(
        R"([{"text":"one two three","stallAfterChunks":1,"stallMs":10000},{"text":"next"}])");
    http_provider p(lb.options(api_kind::openai_completions));
    recording_observer obs;
    abort_signal abort;
    message out;
    out.role = message_role::assistant;
    bool done = false;
    const auto req = simple_request(p.model());
    asio::co_spawn(lb.io, p.stream(req, out, obs, abort), [&](std::exception_ptr) { done = true; });
    REQUIRE(lb.run_until([&] { return obs.deltas.size() == 1; }));
    const auto t0 = std::chrono::steady_clock::now();
    abort.request();
    REQUIRE(lb.run_until([&] { return done; }, 2s));
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    CHECK(out.stop == stop_reason::aborted);
    CHECK(text_of(out) == "one");
    CHECK(p.idle_connections() == 0);
    // an abort requested before the call: no request at all
    abort_signal pre;
    pre.request();
    auto o2 = lb.stream_once(p, req, obs, pre);
    CHECK(o2.stop == stop_reason::aborted);
    CHECK(lb.server->request_count() == 1);
}

TEST_CASE("connection refused and connect timeout are retryable connection errors",
          "[http][loopback]") {
    asio::io_context io;
    std::uint16_t port;
    {
        asio::ip::tcp::acceptor a(io,
                                  asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        port = a.local_endpoint().port();
    }  // closed: nothing listens there now
    loopback lb("[]");
    auto o = lb.options(api_kind::openai_completions);
    o.base_url = "http://127.0.0.1:" + std::to_string(port) + "/v1";
    http_provider p(o);
    recording_observer obs;
    abort_signal abort;
    auto out = lb.stream_once(p, simple_request(p.model()), obs, abort);
    CHECK(out.stop == stop_reason::error);
    CHECK_THAT(*out.error_message,
               Catch::StartsWith("Connection error: cannot connect to 127.0.0.1:"));
    CHECK(retryable(out));
}

// ---- https ----------------------------------------------------------------------------------

namespace {

// A test CA, a server certificate for 127.0.0.1 / localhost signed by it, and an unrelated CA,
// made with the openssl CLI (EC keys: fast).
struct test_pki {
    temp_dir dir;
    std::filesystem::path ca, other_ca, cert, key;
    test_pki() {
        const auto d = dir.path.string();
        const std::string key_opts = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
        const std::string cmd =
            "(cd '" + d +
            "' && "
            "openssl req -x509" +
            key_opts +
            " -keyout ca.key -out ca.pem -days 2 -subj '/CN=coagent test CA' && "
            "openssl req" +
            key_opts +
            " -keyout server.key -out server.csr -subj '/CN=127.0.0.1' && "
            "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\n' > "
            "ext.cnf && "
            "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out "
            "server.pem -days 2 -extfile ext.cnf && "
            "openssl req -x509" +
            key_opts +
            " -keyout other.key -out other-ca.pem -days 2 -subj '/CN=another CA'"
            ") >/dev/null 2>&1";
        if (std::system(cmd.c_str()) != 0)
            throw std::runtime_error("openssl could not make the test certificates in " + d);
        ca = dir.path / "ca.pem";
        other_ca = dir.path / "other-ca.pem";
        cert = dir.path / "server.pem";
        key = dir.path / "server.key";
    }
};

}  // namespace

TEST_CASE(
    "https against a local TLS server: verified with the test CA, a wrong CA is a clear error",
    "[http][loopback][tls]") {
    test_pki pki;
    fakellm::server_options so;
    so.tls_cert_file = pki.cert;
    so.tls_key_file = pki.key;
    loopback lb(R"([{"text":"secure hello"},{"text":"by name"}])", so);

    auto o = lb.options(api_kind::openai_completions);
    o.base_url = lb.base_url("https");
    o.ca_file = pki.ca;
    http_provider good(o);
    recording_observer obs;
    abort_signal abort;
    auto out = lb.stream_once(good, simple_request(good.model()), obs, abort);
    CHECK(out.stop == stop_reason::stop);
    CHECK(text_of(out) == "secure hello");

    o.ca_file = pki.other_ca;
    http_provider wrong(o);
    auto bad = lb.stream_once(wrong, simple_request(wrong.model()), obs, abort);
    CHECK(bad.stop == stop_reason::error);
    REQUIRE(bad.error_message);
    CHECK_THAT(*bad.error_message,
               Catch::StartsWith("TLS certificate verification failed for 127.0.0.1:") &&
                   Catch::Contains("unable to get local issuer certificate"));
    CHECK_FALSE(retryable(bad));             // a certificate problem does not go away by retrying
    CHECK(lb.server->request_count() == 1);  // nothing was sent over the unverified connection

    // the host name is checked too: "localhost" is in the certificate, "127.0.0.2" is not
    o.ca_file = pki.ca;
    o.base_url = "https://localhost:" + std::to_string(lb.server->port()) + "/v1";
    http_provider by_name(o);
    auto named = lb.stream_once(by_name, simple_request(by_name.model()), obs, abort);
    CHECK(named.stop == stop_reason::stop);
    CHECK(text_of(named) == "by name");

    fakellm::server_options so2 = so;
    so2.bind_address = "127.0.0.2";
    so2.steps = fakellm::script::parse(R"([{"text":"never sent"}])", "<test>");
    fakellm::server other(lb.io.get_executor(), so2);
    other.start();
    o.base_url = "https://127.0.0.2:" + std::to_string(other.port()) + "/v1";
    http_provider mismatch(o);
    auto mm = lb.stream_once(mismatch, simple_request(mismatch.model()), obs, abort);
    CHECK_THAT(mm.error_message.value_or(""),
               Catch::StartsWith("TLS certificate verification failed for 127.0.0.2:") &&
                   Catch::Contains("IP address mismatch"));
    CHECK(other.request_count() == 0);
    other.stop();
}

// ---- models.json -----------------------------------------------------------------------------

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/providers/models_config.hpp>
#include <coagent/session/agent_session.hpp>

#include "support/session_harness.hpp"

#include <thread>

namespace {

void write_text(const std::filesystem::path& p, const std::string& text) {
    std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
}

std::string read_text(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string config_error_of(const std::string& text) {
    try {
        (void)models_config::parse(text, "/home/u/.coagent/models.json");
    } catch (const settings_error& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

TEST_CASE("models.json: the reference's shape over the built-in providers", "[http][config]") {
    auto c = models_config::parse(R"({"providers":{
        "local":{"baseUrl":"http://127.0.0.1:8080/v1","api":"openai-completions","apiKey":"any",
                 "compat":{"supportsDeveloperRole":false},
                 "models":[{"id":"m1","name":"M1","contextWindow":32000,"maxTokens":4096,"reasoning":false,"input":["text"],
                            "cost":{"input":0,"output":0}},{"id":"m2","api":"anthropic-messages"},
                           {"id":"gpt-5","api":"openai-responses","reasoning":true,"input":["text","image"]}]},
        "anthropic":{"baseUrl":"https://proxy.example/anthropic/v1","models":[{"id":"claude-next","contextWindow":500000}]}},
        "somethingElse":true})",
                                  "models.json");
    auto m1 = c.resolve("local", "m1");
    CHECK(m1.provider == "local");
    CHECK(m1.api == "openai-completions");
    CHECK(m1.context_window == 32000);
    CHECK(m1.max_tokens == 4096);
    CHECK(c.resolve("local", "").id == "m1");  // the first is the default
    auto m2 = c.resolve("local", "m2");
    CHECK(m2.api == "anthropic-messages");
    CHECK(m2.context_window == 128000);  // defaults
    CHECK(m2.max_tokens == 16384);
    CHECK_FALSE(m2.image_input);  // the reference's default input: ["text"]
    CHECK_FALSE(m1.image_input);
    auto m3 = c.resolve("local", "gpt-5");
    CHECK(m3.api == "openai-responses");
    CHECK(m3.image_input);
    CHECK(c.provider_options("local", "gpt-5", provider_settings{}).api ==
          api_kind::openai_responses);
    CHECK(c.resolve("openai", "gpt-4o").image_input);  // the built-in models read images
    // a built-in overridden: new base URL, its models kept, one added
    CHECK(c.find("anthropic")->base_url == "https://proxy.example/anthropic/v1");
    CHECK(c.resolve("anthropic", "claude-sonnet-4-5").context_window == 200000);
    CHECK(c.resolve("anthropic", "claude-next").context_window == 500000);
    CHECK(c.resolve("openai", "").id == "gpt-4.1");
    CHECK(c.find("openai")->base_url == "https://api.openai.com/v1");
    CHECK_THROWS_WITH(
        c.resolve("nope", ""),
        Catch::Contains("provider \"nope\" not found (known: faux, openai, anthropic, local"));
    CHECK_THROWS_WITH(c.resolve("local", "m9"),
                      Catch::Contains("model \"m9\" not found for provider local (it has: m1, m2"));

    auto o = c.provider_options("local", "m1", provider_settings{1234, 5678});
    CHECK(o.base_url == "http://127.0.0.1:8080/v1");
    CHECK(o.api_key == "any");
    CHECK(o.connect_timeout_ms == 1234);
    CHECK(o.stream_idle_timeout_ms == 5678);
    CHECK(models_config::load("/nonexistent/models.json").providers().size() == 2);
}

TEST_CASE("models.json: a broken file names the file, the key and what was expected",
          "[http][config]") {
    CHECK(
        config_error_of(
            R"({"providers":{"x":{"baseUrl":"http://a","api":"openai-completions","models":[{"id":"m","contextWindow":"big"}]}}})") ==
        R"(/home/u/.coagent/models.json: key "providers.x.models[0].contextWindow": expected a positive integer, found "big")");
    CHECK(
        config_error_of(
            R"({"providers":{"x":{"api":"openai-completions","models":[{"id":"m"}]}}})") ==
        R"(/home/u/.coagent/models.json: key "providers.x.baseUrl": expected an http:// or https:// URL, found nothing (missing))");
    CHECK(
        config_error_of(
            R"({"providers":{"x":{"baseUrl":"http://a","api":"openai-chat","models":[{"id":"m"}]}}})") ==
        R"(/home/u/.coagent/models.json: key "providers.x.api": expected "openai-completions", "openai-responses" or "anthropic-messages", found "openai-chat")");
    CHECK(
        config_error_of(
            R"({"providers":{"x":{"baseUrl":"http://a","api":"openai-completions","models":[]}}})") ==
        R"(/home/u/.coagent/models.json: key "providers.x.models": expected a non-empty array of models, found [])");
    CHECK(
        config_error_of(
            R"({"providers":{"x":{"baseUrl":"http://a","api":"openai-completions","models":[{"name":"m"}]}}})") ==
        R"(/home/u/.coagent/models.json: key "providers.x.models[0].id": expected a non-empty string, found nothing (missing))");
    CHECK(
        config_error_of(R"({"providers":[]})") ==
        R"(/home/u/.coagent/models.json: key "providers": expected an object of providers, found [])");
    CHECK(config_error_of("{\n  \"providers\": {,}\n}") ==
          "/home/u/.coagent/models.json:2:17: invalid JSON: syntax error");
}

TEST_CASE(
    "fixed: a value quoted in a models.json / auth.json error is cut on a code-point boundary",
    "[http][config]") {
    // 1 quote + 75 ASCII bytes, then 'é' at bytes 76-77: the old cut at byte 77 split it
    const std::string value = std::string(75, 'a') + "\xC3\xA9" + std::string(20, 'b');
    CHECK(config_error_of(R"({"providers":{"x":{"baseUrl":"http://h/v1","api":")" + value +
                          R"(","models":[{"id":"m"}]}}})") ==
          "/home/u/.coagent/models.json: key \"providers.x.api\": expected \"openai-completions\", "
          "\"openai-responses\" or \"anthropic-messages\", found \"" +
              std::string(75, 'a') + "...");
    temp_dir d;
    write_text(d.path / "auth.json",
               R"({"p":{"type":"api_key","key":"k","blockedUntil":")" + value + "\"}}");
    CHECK_THROWS_WITH(file_auth_storage(d.path / "auth.json"),
                      Catch::EndsWith("found \"" + std::string(75, 'a') + "..."));
}

TEST_CASE("API keys: models.json apiKey (literal or env name), else the built-in's variable",
          "[http][config]") {
    auto env = [](const char* name) -> const char* {
        if (std::string_view(name) == "OPENAI_API_KEY") return "sk-from-env";
        if (std::string_view(name) == "MY_KEY") return "sk-my";
        return nullptr;
    };
    auto c = models_config::parse(R"({"providers":{
        "a":{"baseUrl":"http://h","api":"openai-completions","apiKey":"MY_KEY","models":[{"id":"m"}]},
        "b":{"baseUrl":"http://h","api":"openai-completions","apiKey":"UNSET_VAR","models":[{"id":"m"}]},
        "c":{"baseUrl":"http://h","api":"openai-completions","apiKey":"sk-literal","models":[{"id":"m"}]},
        "d":{"baseUrl":"http://h","api":"openai-completions","models":[{"id":"m"}]}}})",
                                  "models.json");
    CHECK(models_config::static_api_key(*c.find("a"), env) == "sk-my");
    CHECK(models_config::static_api_key(*c.find("b"), env) == "UNSET_VAR");
    CHECK(models_config::static_api_key(*c.find("c"), env) == "sk-literal");
    CHECK(models_config::static_api_key(*c.find("d"), env).empty());
    CHECK(models_config::static_api_key(*c.find("openai"), env) == "sk-from-env");
    CHECK(models_config::static_api_key(*c.find("anthropic"), env).empty());
}

// ---- auth.json -------------------------------------------------------------------------------

TEST_CASE("auth.json: sticky credential per session, usage-limit blocks persisted, switching",
          "[http][auth]") {
    temp_dir d;
    const auto file = d.path / "auth.json";
    write_text(
        file,
        R"({"fake":[{"type":"api_key","key":"key-one"},{"type":"api_key","key":"key-two","note":"kept"}],
                          "solo":{"type":"api_key","key":"only"},
                          "oauthy":{"type":"oauth","refresh":"r"}})");
    std::int64_t now = 1'700'000'000'000;
    file_auth_storage a(file, [&] { return now; });
    CHECK(a.credential_count("fake") == 2);
    CHECK(a.credential_count("oauthy") == 0);
    CHECK(a.api_key("fake", "s1") == "key-one");
    CHECK(a.api_key("fake", "s1") == "key-one");
    CHECK(a.api_key("other", "s1").empty());
    CHECK_FALSE(a.mark_usage_limit_reached("fake", "never-asked", 5000));  // used no stored key

    CHECK(a.mark_usage_limit_reached("fake", "s1", 30'000));  // key-two is free: switch
    CHECK(a.api_key("fake", "s1") == "key-two");
    CHECK(a.blocked_until("fake", 0) == now + 30'000);
    CHECK(a.api_key("fake", "s2") == "key-two");  // a new session avoids the blocked key

    // persisted: the file has it, other fields kept; a new process honours it
    auto saved = json::parse(read_text(file));
    CHECK(saved.at("fake").at(0).at("blockedUntil") == now + 30'000);
    CHECK(saved.at("fake").at(1).at("note") == "kept");
    CHECK(saved.at("oauthy").at("refresh") == "r");
    CHECK((std::filesystem::status(file).permissions() & std::filesystem::perms::others_read) ==
          std::filesystem::perms::none);
    file_auth_storage b(file, [&] { return now; });
    CHECK(b.blocked_until("fake", 0) == now + 30'000);
    CHECK(b.api_key("fake", "s3") == "key-two");

    // both blocked: no switch; the session keeps its key
    CHECK_FALSE(a.mark_usage_limit_reached("fake", "s1", std::nullopt));
    CHECK(a.blocked_until("fake", 1) == now + file_auth_storage::default_block_ms);
    CHECK(a.api_key("fake", "s1") == "key-two");
    // a block never shrinks
    CHECK_FALSE(a.mark_usage_limit_reached("fake", "s2", 1));
    CHECK(a.blocked_until("fake", 1) == now + file_auth_storage::default_block_ms);

    // one credential: blocked until the hint, still used (there is nothing else)
    CHECK(a.api_key("solo", "s1") == "only");
    CHECK_FALSE(a.mark_usage_limit_reached("solo", "s1", 1000));
    CHECK(a.blocked_until("solo", 0) == now + 1000);
    CHECK(a.api_key("solo", "s9") == "only");
    CHECK(json::parse(read_text(file)).at("solo").at("blockedUntil") ==
          now + 1000);  // single-object shape kept

    // time passes: the block expires, a new session gets key-one again
    now += 31'000;
    CHECK(b.api_key("fake", "s4") == "key-one");
}

TEST_CASE("auth.json: a broken file names the key, concurrent writers lose no block",
          "[http][auth]") {
    temp_dir d;
    const auto file = d.path / "auth.json";
    write_text(file, R"({"p":[{"type":"api_key","key":""}]})");
    CHECK_THROWS_WITH(file_auth_storage(file),
                      (d.path / "auth.json").string() +
                          R"(: key "p[0].key": expected a non-empty string, found "")");
    write_text(file, R"({"p":{"type":"api_key","key":"k","blockedUntil":"soon"}})");
    CHECK_THROWS_WITH(file_auth_storage(file),
                      Catch::Contains(R"(key "p.blockedUntil": expected an epoch time in ms)"));
    write_text(file, "[1]");
    CHECK_THROWS_WITH(file_auth_storage(file),
                      Catch::Contains("expected a JSON object of providers"));
    CHECK(file_auth_storage(d.path / "missing.json").credential_count("p") == 0);

    // 8 "processes" (own instances, own file descriptions, so the flock applies) block 8
    // providers at once; every block must survive the others' rewrites.
    std::string text = "{";
    for (int i = 0; i < 8; ++i)
        text += (i ? "," : "") + std::string("\"p") + std::to_string(i) +
                R"(":[{"type":"api_key","key":"a"},{"type":"api_key","key":"b"}])";
    write_text(file, text + "}");
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
        threads.emplace_back([&file, i] {
            file_auth_storage s(file, [] { return std::int64_t{1000}; });
            const std::string p = "p" + std::to_string(i);
            (void)s.api_key(p, "s");
            (void)s.mark_usage_limit_reached(p, "s", 500 + i);
        });
    for (auto& t : threads) t.join();
    file_auth_storage check(file);
    for (int i = 0; i < 8; ++i) CHECK(check.blocked_until("p" + std::to_string(i), 0) == 1500 + i);
}

// ---- sessions over loopback: the retry policy against real HTTP ------------------------------

namespace {

struct session_loopback {
    loopback lb;
    std::shared_ptr<http_provider> provider;
    std::unique_ptr<agent_session> session;
    std::vector<json::object> events;
    subscription sub;
    std::optional<prompt_result> result;
    std::exception_ptr failure;

    session_loopback(const std::string& script, api_kind api, settings cfg,
                     const std::function<void(http_provider_options&)>& tweak = {})
        : lb(script) {
        auto o = lb.options(api);
        o.connect_timeout_ms = cfg.provider.connect_timeout_ms;
        o.stream_idle_timeout_ms = cfg.provider.stream_idle_timeout_ms;
        if (tweak) tweak(o);
        provider = std::make_shared<http_provider>(o);
        session_options so;
        so.executor = lb.io.get_executor();
        so.model_provider = provider;
        so.config = cfg;
        so.auth = provider->auth();
        session = std::make_unique<agent_session>(std::move(so));
        sub = session->subscribe([this](const event& e) { events.push_back(to_json(e)); });
    }

    void start(std::string text, std::vector<image_block> images = {}) {
        asio::co_spawn(lb.io, session->prompt(std::move(text), std::move(images)),
                       [this](std::exception_ptr e, prompt_result r) {
                           failure = e;
                           result = std::move(r);
                       });
    }
    void prompt(std::string text, std::chrono::milliseconds cap = 20s,
                std::vector<image_block> images = {}) {
        start(std::move(text), std::move(images));
        REQUIRE(lb.run_until([&] { return result.has_value(); }, cap));
        if (failure) std::rethrow_exception(failure);
    }
    std::vector<json::object> of(std::string_view type) const {
        std::vector<json::object> out;
        for (const auto& e : events)
            if (e.at("type").as_string() == type) out.push_back(e);
        return out;
    }
};

settings fast_settings(std::int64_t base_delay_ms = 10) {
    settings s;
    s.retry.base_delay_ms = base_delay_ms;
    return s;
}

std::string example(const std::string& name) {
    return read_text(COAGENT_SOURCE_DIR "/examples/fakellm/" + name);
}

}  // namespace

TEST_CASE(
    "loopback: 503 twice then success — 3 requests, errors not sent back, the design's events",
    "[http][loopback][session]") {
    for (auto api : {api_kind::openai_completions, api_kind::anthropic_messages}) {
        INFO(http_protocol::to_string(api));
        session_loopback t(example("retry-503.json"), api, fast_settings());
        t.prompt("Say hello");
        CHECK(t.result->outcome == prompt_result::status::succeeded);
        CHECK(text_of(*t.result->last_assistant) == "Hello! Two 503s later, here is the answer.");
        CHECK(brief(t.events) == coagent::test::two_retries_then_success_events);
        auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 2);
        CHECK(
            starts[0] ==
            obj(R"({"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":10,"errorMessage":"503 Service Unavailable: upstream overloaded","limit":"capacity","discarded":{"textChars":0,"thinkingChars":0,"toolCalls":0}})"));
        CHECK(starts[1].at("delayMs") == 20);
        auto reqs = t.lb.server->requests();
        REQUIRE(reqs.size() == 3);
        for (const auto& r : reqs)
            CHECK(r.roles == strings{"user"});  // the errored replies were not sent back
        auto ends = t.of("message_end");
        CHECK(ends[1].at("message").at("errorMessage") ==
              "503 Service Unavailable: upstream overloaded");
        CHECK(t.provider->connections_opened() == 1);  // keep-alive across the retries
    }
}

TEST_CASE("loopback: 429 with Retry-After — the suffix, honorRetryAfter and maxDelayMs",
          "[http][loopback][session][appendix-a]") {
    const std::string script =
        R"([{"status":429,"headers":{"Retry-After":"1"},"body":{"error":{"message":"Rate limit reached for requests"}}},{"text":"ok"}])";
    const std::string error = "429 Rate limit reached for requests retry-after-ms=1000";
    {
        session_loopback t(script, api_kind::openai_completions, fast_settings(100));
        t.prompt("hi");
        auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 1);
        CHECK(starts[0].at("errorMessage").as_string() == error);
        CHECK(starts[0].at("delayMs") == 100);  // by default the hint does not change the backoff
        CHECK(t.result->outcome == prompt_result::status::succeeded);
    }
    {
        auto cfg = fast_settings(100);
        cfg.retry.honor_retry_after = true;
        session_loopback t(script, api_kind::openai_completions, cfg);
        const auto t0 = std::chrono::steady_clock::now();
        t.prompt("hi");
        CHECK(std::chrono::steady_clock::now() - t0 >= 1000ms);
        auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 1);
        CHECK(starts[0].at("delayMs") == 1000);
        CHECK(t.result->outcome == prompt_result::status::succeeded);
    }
    {
        auto cfg = fast_settings(100);
        cfg.retry.honor_retry_after = true;
        cfg.retry.max_delay_ms = 500;
        session_loopback t(script, api_kind::openai_completions, cfg);
        t.prompt("hi");
        CHECK(t.of("auto_retry_start").empty());
        CHECK(brief(t.events) ==
              strings{"agent_start", "turn_start", "message_start:user", "message_end:user",
                      "message_start:assistant", "message_end:assistant:error", "turn_end",
                      "agent_end{final}", "auto_retry_end{fail,0}", "agent_settled"});
        CHECK(t.of("auto_retry_end")[0].at("finalError").as_string() ==
              error + " (server asked to wait 1s, above retry.maxDelayMs)");
        CHECK(t.result->outcome == prompt_result::status::failed);
        CHECK(t.lb.server->request_count() == 1);
    }
}

TEST_CASE("loopback: mid-stream cut, stall and Anthropic overloaded_error → retry → success",
          "[http][loopback][session]") {
    auto cfg = fast_settings();
    cfg.provider.stream_idle_timeout_ms = 200;
    for (auto api :
         {api_kind::openai_completions, api_kind::anthropic_messages, api_kind::openai_responses}) {
        INFO(http_protocol::to_string(api));
        session_loopback t(example("stream-faults.json"), api, cfg);
        t.prompt("hi");
        CHECK(t.result->outcome == prompt_result::status::succeeded);
        CHECK(text_of(*t.result->last_assistant) == "The third attempt streams all of its words.");
        auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 2);
        CHECK_THAT(std::string(starts[0].at("errorMessage").as_string()),
                   Catch::StartsWith("Connection error:"));
        CHECK(starts[1].at("errorMessage") ==
              "Stream idle timeout: no data for 200 ms (timed out)");
        CHECK(t.of("auto_retry_end")[0] ==
              obj(R"({"type":"auto_retry_end","success":true,"attempt":2})"));
        CHECK(t.lb.server->request_count() == 3);
    }
    session_loopback t(example("anthropic-overloaded.json"), api_kind::anthropic_messages, cfg);
    t.prompt("hi");
    CHECK(t.result->outcome == prompt_result::status::succeeded);
    auto starts = t.of("auto_retry_start");
    REQUIRE(starts.size() == 2);
    CHECK(starts[0].at("errorMessage") == "529 Overloaded");
    CHECK(starts[1].at("errorMessage") == "overloaded_error: Overloaded");
}

TEST_CASE("loopback: the overflow bodies of the three APIs go to compaction, never to retry",
          "[http][loopback][session]") {
    const std::pair<const char*, api_kind> cases[] = {
        {"openai-overflow.json", api_kind::openai_completions},
        {"openai-overflow.json", api_kind::openai_responses},
        {"anthropic-overflow.json", api_kind::anthropic_messages}};
    for (const auto& [file, api] : cases) {
        INFO(file << " " << http_protocol::to_string(api));
        session_loopback t(example(file), api, fast_settings());
        t.prompt("hi");
        CHECK(t.of("auto_retry_start").empty());
        CHECK(t.of("auto_retry_end").empty());
        auto cs = t.of("compaction_start");
        REQUIRE(cs.size() == 1);
        CHECK(cs[0].at("reason") == "overflow");
        auto errs = t.of("message_end");
        REQUIRE(errs.size() >= 2);
        CHECK(errs[1].at("message").at("stopReason") == "error");
        CHECK(classify_error_text(std::string(errs[1].at("message").at("errorMessage").as_string()),
                                  400, 0)
                  .kind == error_kind::context_overflow);
    }
}

TEST_CASE("loopback: usage limit with two credentials switches keys at once",
          "[http][loopback][session][auth]") {
    const std::pair<const char*, api_kind> cases[] = {
        {"openai-usage-limit.json", api_kind::openai_completions},
        {"anthropic-usage-limit.json", api_kind::anthropic_messages}};
    for (const auto& [file, api] : cases) {
        INFO(file);
        temp_dir d;
        write_text(
            d.path / "auth.json",
            R"({"fake":[{"type":"api_key","key":"key-one"},{"type":"api_key","key":"key-two"}]})");
        const std::int64_t now = wall_clock_ms();
        auto auth =
            std::make_shared<file_auth_storage>(d.path / "auth.json", [now] { return now; });
        session_loopback t(example(file), api, settings{}, [&](http_provider_options& o) {
            o.auth = auth;
            o.api_key = "static-key-unused";
        });
        t.prompt("hi");
        CHECK(t.result->outcome == prompt_result::status::succeeded);
        auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 1);
        CHECK(starts[0].at("delayMs") == 0);  // switched: no wait (policy §3 step 7)
        auto reqs = t.lb.server->requests();
        REQUIRE(reqs.size() == 2);
        if (api == api_kind::openai_completions) {
            CHECK(reqs[0].authorization == "Bearer key-one");
            CHECK(reqs[1].authorization == "Bearer key-two");
        } else {
            CHECK(reqs[0].x_api_key == "key-one");
            CHECK(reqs[1].x_api_key == "key-two");
        }
        const std::int64_t hint = api == api_kind::openai_completions ? 1'800'000 : 3'600'000;
        CHECK(auth->blocked_until("fake", 0) == now + hint);
        CHECK(json::parse(read_text(d.path / "auth.json")).at("fake").at(0).at("blockedUntil") ==
              now + hint);
    }
}

TEST_CASE("loopback: usage limit with one credential blocks it, the delay stays the backoff",
          "[http][loopback][session][auth]") {
    const std::string script =
        R"([{"status":429,"headers":{"Retry-After":"1"},"body":{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}},{"text":"ok"}])";
    for (bool honor : {false, true}) {
        INFO("honorRetryAfter " << honor);
        temp_dir d;
        write_text(d.path / "auth.json", R"({"fake":[{"type":"api_key","key":"only-key"}]})");
        const std::int64_t now = wall_clock_ms();
        auto auth =
            std::make_shared<file_auth_storage>(d.path / "auth.json", [now] { return now; });
        auto cfg = fast_settings(50);
        cfg.retry.honor_retry_after = honor;
        session_loopback t(script, api_kind::openai_completions, cfg,
                           [&](http_provider_options& o) { o.auth = auth; });
        t.prompt("hi");
        CHECK(t.result->outcome == prompt_result::status::succeeded);
        auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 1);
        CHECK(starts[0].at("errorMessage") ==
              "429 The usage limit has been reached retry-after-ms=1000");
        CHECK(starts[0].at("delayMs") ==
              (honor ? 1000 : 50));  // max(backoff, hint) only when honoured
        CHECK(auth->blocked_until("fake", 0) == now + 1000);
        auto reqs = t.lb.server->requests();
        REQUIRE(reqs.size() == 2);
        CHECK(reqs[1].authorization == "Bearer only-key");  // nothing else to use
    }
}

TEST_CASE("loopback: abort during a stream ends the prompt promptly as aborted",
          "[http][loopback][session]") {
    session_loopback t(
        R"([{"text":"one two three","stallAfterChunks":1,"stallMs":10000},{"text":"never"}])",
        api_kind::anthropic_messages, fast_settings());
    t.start("hi");
    REQUIRE(t.lb.run_until([&] { return !t.of("message_update").empty(); }));
    const auto t0 = std::chrono::steady_clock::now();
    t.session->abort();
    REQUIRE(t.lb.run_until([&] { return t.result.has_value(); }, 3s));
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    CHECK(t.result->outcome == prompt_result::status::aborted);
    CHECK(t.result->last_assistant->stop == stop_reason::aborted);
    CHECK(t.of("auto_retry_start").empty());
    CHECK(t.lb.server->request_count() == 1);
}

TEST_CASE(
    "loopback: a usage limit falls back to the next model of retry.fallbackChains (the app's "
    "catalog)",
    "[http][loopback][session][fallback]") {
    // one fakellm answers both models.json providers: the primary's limit, then the fallback
    loopback lb(
        R"([{"status":429,"body":{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached"}}},)"
        R"({"text":"from the backup"}])");
    temp_dir d;
    write_text(
        d.path / "models.json",
        R"({"providers":{"primary":{"baseUrl":")" + lb.base_url() +
            R"(","api":"openai-completions","apiKey":"key-primary","models":[{"id":"m1"}]},)"
            R"("backup":{"baseUrl":")" +
            lb.base_url() +
            R"(","api":"anthropic-messages","apiKey":"key-backup","models":[{"id":"m2"}]}}})");
    auto catalog = std::make_shared<app_catalog>(d.path, provider_settings{}, nullptr);
    settings cfg = fast_settings();
    cfg.retry.fallback =
        std::make_shared<const fallback_chains>(fallback_chains{{"default", {"backup/m2"}}});

    session_options so;
    so.executor = lb.io.get_executor();
    so.model_provider = catalog->make("primary", "m1");
    so.models = catalog;
    so.config = cfg;
    agent_session session(std::move(so));
    std::vector<json::object> events;
    auto sub = session.subscribe([&](const event& e) { events.push_back(to_json(e)); });
    std::optional<prompt_result> result;
    asio::co_spawn(lb.io, session.prompt("hi"), [&](std::exception_ptr e, prompt_result r) {
        if (e) std::rethrow_exception(e);
        result = std::move(r);
    });
    REQUIRE(lb.run_until([&] { return result.has_value(); }));
    CHECK(result->outcome == prompt_result::status::succeeded);
    CHECK(text_of(*result->last_assistant) == "from the backup");
    std::vector<std::string> retry_events;
    for (const auto& e : events) {
        const std::string_view t = e.at("type").as_string();
        if (t.starts_with("retry_fallback") || t.starts_with("auto_retry"))
            retry_events.push_back(json::serialize(e));
    }
    CHECK(
        retry_events ==
        std::vector<std::string>{
            R"({"type":"retry_fallback_applied","from":"primary/m1","to":"backup/m2","role":"default"})",
            R"({"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":0,"errorMessage":"429 The usage limit has been reached","limit":"quota","discarded":{"textChars":0,"thinkingChars":0,"toolCalls":0}})",
            R"({"type":"retry_fallback_succeeded","model":"backup/m2","role":"default"})",
            R"({"type":"auto_retry_end","success":true,"attempt":1})"});
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[0].path == "/v1/chat/completions");
    CHECK(reqs[0].authorization == "Bearer key-primary");
    CHECK(reqs[0].model == "m1");
    CHECK(reqs[1].path == "/v1/messages");
    CHECK(reqs[1].x_api_key == "key-backup");
    CHECK(reqs[1].model == "m2");
    CHECK(reqs[1].roles == std::vector<std::string>{"user"});  // the primary's error is not sent
    CHECK(session.model().provider == "backup");
}

TEST_CASE(
    "openai-responses: a session on a models.json model sends its reasoning item back in the "
    "next prompt",
    "[http][loopback][session][responses]") {
    loopback lb(R"([{"text":"A logo.","thinking":"Let me look.","signature":"gAAAAB=="},)"
                R"({"text":"ok"}])");
    temp_dir d;
    write_text(d.path / "models.json",
               R"({"providers":{"oai":{"baseUrl":")" + lb.base_url() +
                   R"(","api":"openai-responses","apiKey":"key-1","models":[)"
                   R"({"id":"gpt-5","reasoning":true,"maxTokens":64000}]}}})");
    auto catalog = std::make_shared<app_catalog>(d.path, provider_settings{}, nullptr);
    session_options so;
    so.executor = lb.io.get_executor();
    so.model_provider = catalog->make("oai", "gpt-5");
    so.models = catalog;
    so.config = fast_settings();
    agent_session session(std::move(so));
    CHECK(session.set_thinking_level(thinking_level::medium).empty());
    for (const char* text : {"what is this?", "and now?"}) {
        std::optional<prompt_result> result;
        asio::co_spawn(lb.io, session.prompt(text), [&](std::exception_ptr e, prompt_result r) {
            if (e) std::rethrow_exception(e);
            result = std::move(r);
        });
        REQUIRE(lb.run_until([&] { return result.has_value(); }));
        CHECK(result->outcome == prompt_result::status::succeeded);
    }
    const auto reqs = lb.server->requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[0].path == "/v1/responses");
    CHECK(reqs[0].authorization == "Bearer key-1");
    const auto body = json::parse(reqs[1].body).as_object();
    const auto& input = body.at("input").as_array();
    REQUIRE(input.size() >= 4);
    CHECK(
        json::serialize(input[input.size() - 3]) ==
        R"({"id":"rs_fakellm_1","type":"reasoning","summary":[{"type":"summary_text","text":"Let me look."}],"encrypted_content":"gAAAAB=="})");
    CHECK(
        reqs[1].body.find(
            R"("reasoning":{"effort":"medium","summary":"auto"},"include":["reasoning.encrypted_content"]})") !=
        std::string::npos);
    CHECK(reqs[1].thinking == 1);
}

// ---- issue 21: retry.resumePartial over loopback (Anthropic Messages prefill)
// --------------------

namespace {

// the last message of a recorded Anthropic request body: role and its text
std::pair<std::string, std::string> last_message(const std::string& body) {
    const auto msgs = json::parse(body).at("messages").as_array();
    const auto& m = msgs.back().as_object();
    std::string text;
    for (const auto& b : m.at("content").as_array())
        if (const auto* t = b.as_object().if_contains("text")) text += t->as_string();
    return {std::string(m.at("role").as_string()), text};
}

}  // namespace

TEST_CASE(
    "retry.resumePartial: cuts at several points, restart regenerates, continue prefills "
    "the partial text and the final message holds it once (issue 21)",
    "[http][loopback][session][issue-21]") {
    const std::string full = "one two three four five six seven eight";
    const auto chunks = scripted::split_words(full);
    for (const int cut : {1, 3, 6}) {
        for (const bool resume : {false, true}) {
            std::string partial;
            for (int i = 0; i < cut; ++i) partial += chunks[static_cast<std::size_t>(i)];
            const std::string continuation = full.substr(partial.size());
            INFO("cut after " << cut << " chunks, resumePartial " << resume);
            json::array script;
            script.push_back(json::object{{"text", full}, {"cutAfterChunks", cut}});
            script.push_back(json::object{{"text", resume ? continuation : full}});
            settings s = fast_settings();
            s.retry.resume_partial = resume;
            session_loopback t(json::serialize(script), api_kind::anthropic_messages, s);
            t.prompt("tell me");
            REQUIRE(t.result->outcome == prompt_result::status::succeeded);
            CHECK(text_of(*t.result->last_assistant) == full);  // the text once, not twice
            CHECK(t.result->last_assistant->content.size() == 1);
            CHECK(t.of("auto_retry_start").at(0).at("discarded") ==
                  obj(R"({"textChars":)" + std::to_string(partial.size()) +
                      R"(,"thinkingChars":0,"toolCalls":0})"));
            const auto reqs = t.lb.server->requests();
            REQUIRE(reqs.size() == 2);
            CHECK(last_message(reqs[0].body) ==
                  std::pair<std::string, std::string>{"user", "tell me"});
            // the second request ends with the partial text (continue) or the prompt (restart)
            CHECK(last_message(reqs[1].body) ==
                  (resume ? std::pair<std::string, std::string>{"assistant", partial}
                          : std::pair<std::string, std::string>{"user", "tell me"}));
            // the continued message starts with the partial text, its updates carry the rest
            const auto starts = t.of("message_start");
            const auto& second = starts.back().at("message").as_object();
            CHECK(second.at("role") == "assistant");
            std::string started;
            for (const auto& b : second.at("content").as_array())
                started += b.at("text").as_string();
            CHECK(started == (resume ? partial : ""));
            std::string deltas;
            bool after_retry = false;
            for (const auto& e : t.events) {
                if (e.at("type") == "auto_retry_start") after_retry = true;
                if (after_retry && e.at("type") == "message_update")
                    deltas += e.at("assistantMessageEvent").at("delta").as_string();
            }
            CHECK(deltas == (resume ? continuation : full));
            // usage: the cut attempt's and the continuation's, summed
            const auto ends = t.of("message_end");
            const auto& failed_usage = ends.at(1).at("message").at("usage").as_object();
            const auto& final_usage = ends.back().at("message").at("usage").as_object();
            if (resume)
                CHECK(final_usage.at("output").as_int64() ==
                      failed_usage.at("output").as_int64() +
                          static_cast<std::int64_t>(continuation.size() / 4 + 1));
        }
    }
}

TEST_CASE(
    "issue 24: a cut attempt that streamed thinking is discarded with its thinkingChars, and "
    "retry.resumePartial restarts it (never continues inside or after thinking)",
    "[http][loopback][session][content]") {
    for (const int cut : {0, 2}) {
        INFO("cut after " << cut << " text chunks");
        settings s = fast_settings();
        s.retry.resume_partial = true;
        session_loopback t(
            R"([{"text":"one two three","thinking":"d\u00e9ep thought","cutAfterChunks":)" +
                std::to_string(cut) +
                R"(},{"text":"one two three","thinking":"d\u00e9ep thought"}])",
            api_kind::anthropic_messages, s);
        t.prompt("tell me");
        REQUIRE(t.result->outcome == prompt_result::status::succeeded);
        CHECK(t.of("auto_retry_start").at(0).at("discarded") ==
              obj(R"({"textChars":)" + std::to_string(cut == 0 ? 0 : 7) +
                  R"(,"thinkingChars":12,"toolCalls":0})"));
        // the thinking streamed as message_updates of type thinking_delta
        std::vector<std::string> kinds;
        for (const auto& e : t.of("message_update"))
            kinds.emplace_back(e.at("assistantMessageEvent").at("type").as_string());
        CHECK(std::count(kinds.begin(), kinds.end(), "thinking_delta") == 4);  // 2 per attempt
        const auto reqs = t.lb.server->requests();
        REQUIRE(reqs.size() == 2);
        // a restart: the retried request ends with the prompt, no prefill
        CHECK(last_message(reqs[1].body) == std::pair<std::string, std::string>{"user", "tell me"});
        CHECK(reqs[1].thinking == 0);
        const auto& final_msg = *t.result->last_assistant;
        REQUIRE(final_msg.content.size() == 2);
        CHECK(std::get<thinking_block>(final_msg.content[0]).thinking == "d\u00e9ep thought");
        CHECK(std::get<thinking_block>(final_msg.content[0]).signature == "fakellm-signature-2");
        CHECK(text_of(final_msg) == "one two three");
    }
}

TEST_CASE(
    "issue 24 §11.33: Anthropic's 413 request_too_large with images over loopback: the older "
    "images omitted, one more request, compaction off",
    "[http][loopback][session][content]") {
    settings s = fast_settings();
    s.compaction.enabled = false;
    session_loopback t(
        R"([{"status":413,"body":{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}},)"
        R"({"text":"Two logos."}])",
        api_kind::anthropic_messages, s);
    t.prompt("compare", 20s, {image_block{"QUFB", "image/png"}, image_block{"QkJC", "image/gif"}});
    REQUIRE(t.result->outcome == prompt_result::status::succeeded);
    CHECK(text_of(*t.result->last_assistant) == "Two logos.");
    CHECK(
        t.of("images_omitted").at(0) ==
        obj(R"({"type":"images_omitted","omitted":1,"errorMessage":"413 Request exceeds the maximum size"})"));
    const auto reqs = t.lb.server->requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[0].status == 413);
    CHECK(reqs[0].images == 2);
    CHECK(reqs[1].images == 1);
    CHECK(
        reqs[1].body ==
        R"({"model":"fake-model","max_tokens":4096,"messages":[{"role":"user","content":[)"
        R"({"type":"text","text":"compare"},{"type":"text","text":"[image omitted: the request was too large]"},)"
        R"({"type":"image","source":{"type":"base64","media_type":"image/gif","data":"QkJC"}}]}],"stream":true})");
}

TEST_CASE(
    "retry.resumePartial: a rejected prefill is retried as a full restart and remembered "
    "for the model, no effect on OpenAI (issue 21)",
    "[http][loopback][session][issue-21]") {
    settings s = fast_settings();
    s.retry.resume_partial = true;
    SECTION("anthropic: rejected, then never tried again for the model") {
        session_loopback t(
            R"([{"text":"one two three four","cutAfterChunks":2},)"
            R"({"status":400,"body":{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill."}}},)"
            R"({"text":"one two three four"},)"
            R"({"text":"five six seven","cutAfterChunks":1},{"text":"five six seven"}])",
            api_kind::anthropic_messages, s);
        t.prompt("first");
        REQUIRE(t.result->outcome == prompt_result::status::succeeded);
        CHECK(text_of(*t.result->last_assistant) == "one two three four");
        t.result.reset();
        t.prompt("second");
        REQUIRE(t.result->outcome == prompt_result::status::succeeded);
        CHECK(text_of(*t.result->last_assistant) == "five six seven");
        const auto reqs = t.lb.server->requests();
        REQUIRE(reqs.size() == 5);
        CHECK(last_message(reqs[1].body).first == "assistant");  // the prefill, refused
        CHECK(last_message(reqs[2].body) == std::pair<std::string, std::string>{"user", "first"});
        CHECK(last_message(reqs[4].body) == std::pair<std::string, std::string>{"user", "second"});
        const auto starts = t.of("auto_retry_start");
        REQUIRE(starts.size() == 3);
        CHECK(starts[1].at("attempt") == 2);  // the rejection is retried: a full restart
        CHECK(std::string(starts[1].at("errorMessage").as_string()).find("prefill") !=
              std::string::npos);
    }
    SECTION("openai: the setting has no effect") {
        session_loopback t(
            R"([{"text":"one two three four","cutAfterChunks":2},{"text":"one two three four"}])",
            api_kind::openai_completions, s);
        t.prompt("first");
        REQUIRE(t.result->outcome == prompt_result::status::succeeded);
        CHECK(text_of(*t.result->last_assistant) == "one two three four");
        const auto reqs = t.lb.server->requests();
        REQUIRE(reqs.size() == 2);
        CHECK(reqs[1].roles == reqs[0].roles);  // no assistant turn added
    }
}

TEST_CASE(
    "retry.resumePartial over 20 random cuts: the text is never regenerated, once in the "
    "reply (issue 21, COAGENT_RESUME_TABLE=1 prints the table)",
    "[http][loopback][session][issue-21]") {
    std::mt19937 rng(21);
    const std::vector<std::string> vocabulary = {"the",   "retry",  "policy", "continues", "a",
                                                 "reply", "cut",    "mid",    "stream",    "of",
                                                 "text",  "tokens", "never",  "twice"};
    std::string full;
    for (int i = 0; i < 300; ++i) {
        if (i) full += ' ';
        full += vocabulary[rng() % vocabulary.size()];
    }
    const auto chunks = scripted::split_words(full);
    std::vector<int> cuts;
    for (int i = 0; i < 20; ++i) cuts.push_back(1 + static_cast<int>(rng() % (chunks.size() - 1)));
    std::sort(cuts.begin(), cuts.end());
    struct row {
        int cut;
        std::size_t partial, restart_chars, continue_chars;
        std::int64_t restart_out, continue_out, restart_in, continue_in;
    };
    std::vector<row> rows;
    for (const int cut : cuts) {
        std::string partial;
        for (int i = 0; i < cut; ++i) partial += chunks[static_cast<std::size_t>(i)];
        const std::string continuation = full.substr(partial.size());
        row r{cut, partial.size(), 0, 0, 0, 0, 0, 0};
        for (const bool resume : {false, true}) {
            INFO("cut after " << cut << " chunks, resumePartial " << resume);
            json::array script;
            script.push_back(json::object{{"text", full}, {"cutAfterChunks", cut}});
            script.push_back(json::object{{"text", resume ? continuation : full}});
            settings s = fast_settings(1);
            s.retry.resume_partial = resume;
            session_loopback t(json::serialize(script), api_kind::anthropic_messages, s);
            t.prompt("write it");
            REQUIRE(t.result->outcome == prompt_result::status::succeeded);
            REQUIRE(text_of(*t.result->last_assistant) == full);
            std::size_t retried_chars = 0;
            bool after = false;
            for (const auto& e : t.events) {
                if (e.at("type") == "auto_retry_start") after = true;
                if (after && e.at("type") == "message_update")
                    retried_chars += e.at("assistantMessageEvent").at("delta").as_string().size();
            }
            const auto ends = t.of("message_end");
            const std::int64_t failed_out =
                ends.at(1).at("message").at("usage").at("output").as_int64();
            const std::int64_t final_out =
                ends.back().at("message").at("usage").at("output").as_int64();
            const auto reqs = t.lb.server->requests();
            REQUIRE(reqs.size() == 2);
            const auto in = static_cast<std::int64_t>(reqs[1].body.size() / 4 + 1);
            if (resume) {
                r.continue_chars = retried_chars;
                r.continue_out = final_out - failed_out;  // the retried attempt's own output
                r.continue_in = in;
            } else {
                r.restart_chars = retried_chars;
                r.restart_out = final_out;
                r.restart_in = in;
            }
        }
        CHECK(r.restart_chars == full.size());
        CHECK(r.continue_chars == full.size() - r.partial);  // nothing is streamed twice
        rows.push_back(r);
    }
    if (const char* p = std::getenv("COAGENT_RESUME_TABLE"); p && std::string(p) == "1") {
        std::size_t chars_saved = 0;
        std::int64_t out_saved = 0, in_added = 0;
        std::printf(
            "| cut after chunk | partial chars | streamed again: restart | continue | "
            "output tokens of the retry: restart | continue | extra input tokens |\n");
        std::printf("|---|---|---|---|---|---|---|\n");
        for (const auto& r : rows) {
            std::printf("| %d/%zu | %zu | %zu | %zu | %lld | %lld | %lld |\n", r.cut, chunks.size(),
                        r.partial, r.restart_chars, r.continue_chars,
                        static_cast<long long>(r.restart_out),
                        static_cast<long long>(r.continue_out),
                        static_cast<long long>(r.continue_in - r.restart_in));
            chars_saved += r.restart_chars - r.continue_chars;
            out_saved += r.restart_out - r.continue_out;
            in_added += r.continue_in - r.restart_in;
        }
        std::printf(
            "| total (%zu chars a reply) | | | %zu chars not regenerated | | %lld output "
            "tokens not regenerated | %lld input tokens added |\n",
            full.size(), chars_saved, static_cast<long long>(out_saved),
            static_cast<long long>(in_added));
    }
}

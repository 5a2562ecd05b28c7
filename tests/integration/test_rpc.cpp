// RPC mode (issue 3): the sans-io protocol (framing, UTF-8, command parsing, envelope), then
// `coagent --mode rpc` as a real child process over pipes (every command, every bad input,
// retry over RPC, EOF and signals), then coagent::rpc_client against the real binary and
// against scripted misbehaving children.

#include "rpc/rpc_harness.hpp"
#include "support/expected_events.hpp"

#include <coagent/modes/rpc_client.hpp>
#include <coagent/modes/rpc_output_queue.hpp>
#include <coagent/modes/rpc_protocol.hpp>
#include <coagent/runtime/json_input.hpp>

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <csignal>
#include <set>
#include <sstream>

using namespace coagent;
using namespace coagent::test;
using strings = std::vector<std::string>;
using item = rpc::line_reader::item;

namespace {

const char* two_errors_then_ok =
    R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":2},{"text":"Hello there"}])";
const char* slow_reply =
    R"([{"text":"slow reply","delayMs":60000},{"text":"second"},{"text":"third"}])";

strings lines_of(rpc::line_reader& r, std::initializer_list<std::string_view> chunks) {
    std::vector<item> items;
    for (auto c : chunks) r.feed(c, items);
    strings out;
    for (auto& i : items)
        out.push_back(i.type == item::kind::line ? i.text
                                                 : "<too_long:" + std::to_string(i.size) + ">");
    return out;
}

rpc::command parsed(std::string_view line) {
    auto r = rpc::parse_command(line);
    if (auto* e = std::get_if<rpc::command_error>(&r)) FAIL("unexpected error: " << e->error);
    return std::get<rpc::command>(r);
}

rpc::command_error parse_error(std::string_view line) {
    auto r = rpc::parse_command(line);
    REQUIRE(std::holds_alternative<rpc::command_error>(r));
    return std::get<rpc::command_error>(r);
}

std::set<std::string> keys(const json::object& o) {
    std::set<std::string> k;
    for (const auto& kv : o) k.insert(std::string(kv.key()));
    return k;
}

std::vector<std::string> fa(std::initializer_list<std::string> extra, const char* script) {
    std::vector<std::string> a{"--provider", "faux", "--no-session", "--faux-script", script};
    a.insert(a.end(), extra);
    return a;
}

json::object err_of(const json::object& response) {
    CHECK(response.at("success") == false);
    return response;
}

}  // namespace

// =========================================================================================
// sans-io: line_reader, UTF-8, parse_command, responses
// =========================================================================================

TEST_CASE("line_reader: LF-only framing, one trailing CR dropped, U+2028/U+2029 are data",
          "[rpc][protocol]") {
    rpc::line_reader r;
    CHECK(lines_of(r, {"a\nb", "c\r\n", "\r\r\n", "\n"}) == strings{"a", "bc", "\r", ""});
    CHECK(lines_of(r, {"x\xE2\x80\xA8y\xE2\x80", "\xA9z\n"}) ==
          strings{"x\xE2\x80\xA8y\xE2\x80\xA9z"});
    CHECK(lines_of(r, {"cr\rinside\n"}) == strings{"cr\rinside"});
    CHECK(lines_of(r, {"last"}).empty());
    auto last = r.finish();
    REQUIRE(last);
    CHECK(last->text == "last");
    CHECK_FALSE(r.finish());
}

TEST_CASE("line_reader: a line over the limit is skipped without being buffered",
          "[rpc][protocol]") {
    rpc::line_reader r(10);
    CHECK(lines_of(r, {"0123456789\n"}) == strings{"0123456789"});  // exactly the limit
    CHECK(lines_of(r, {"0123456789A\nok\n"}) == strings{"<too_long:11>", "ok"});
    std::vector<item> items;
    r.feed("01234567", items);
    r.feed("89abcdef", items);
    CHECK(r.buffered() == 0);  // dropped as soon as it passed the limit
    for (int i = 0; i < 1000; ++i) r.feed("xxxxxxxxxxxxxxxxxxxx", items);
    CHECK(r.buffered() == 0);
    CHECK(items.empty());
    r.feed("yy\nnext\n", items);
    REQUIRE(items.size() == 2);
    CHECK(items[0].type == item::kind::too_long);
    CHECK(items[0].size == 16 + 20000 + 2);
    CHECK(items[1].text == "next");
    rpc::line_reader r2(4);
    std::vector<item> i2;
    r2.feed("abcdefgh", i2);
    auto tail = r2.finish();
    REQUIRE(tail);
    CHECK(tail->type == item::kind::too_long);
    CHECK(tail->size == 8);
    CHECK(rpc::line_reader().max_line_bytes() == 16u * 1024 * 1024);
}

TEST_CASE("find_invalid_utf8", "[rpc][protocol]") {
    CHECK_FALSE(rpc::find_invalid_utf8("plain ascii"));
    CHECK_FALSE(rpc::find_invalid_utf8("\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xE2\x80\xA8"));
    CHECK_FALSE(rpc::find_invalid_utf8("\xF4\x8F\xBF\xBF"));  // U+10FFFF
    CHECK(rpc::find_invalid_utf8("ab\xFF") == 2u);
    CHECK(rpc::find_invalid_utf8("\xC0\x80") == 0u);          // overlong NUL
    CHECK(rpc::find_invalid_utf8("\xE0\x80\x80") == 0u);      // overlong
    CHECK(rpc::find_invalid_utf8("a\xED\xA0\x80") == 1u);     // surrogate U+D800
    CHECK(rpc::find_invalid_utf8("\xF4\x90\x80\x80") == 0u);  // above U+10FFFF
    CHECK(rpc::find_invalid_utf8("abc\xE2\x82") == 3u);       // truncated
    CHECK(rpc::find_invalid_utf8("\xE2\x28\xA1") == 0u);      // bad continuation
    CHECK(rpc::find_invalid_utf8("\x80") == 0u);              // lone continuation
}

TEST_CASE("to_json: the exact request of every command, parsed back to the same command",
          "[rpc][protocol]") {
    using k = rpc::command_kind;
    auto cmd = [](k kind) {
        rpc::command c;
        c.kind = kind;
        return c;
    };
    std::vector<std::pair<rpc::command, std::string>> rows;
    auto add = [&](rpc::command c, std::string text) { rows.emplace_back(std::move(c), text); };
    {
        auto c = cmd(k::prompt);
        c.message = "hi";
        add(c, R"({"type":"prompt","message":"hi"})");
        c.behavior = streaming_behavior::steer;
        add(c, R"({"type":"prompt","message":"hi","streamingBehavior":"steer"})");
        c.behavior = streaming_behavior::follow_up;
        c.id = json::value("req_1");
        add(c, R"({"type":"prompt","message":"hi","streamingBehavior":"followUp","id":"req_1"})");
    }
    {
        auto c = cmd(k::steer);
        c.message = "s";
        add(c, R"({"type":"steer","message":"s"})");
        c.kind = k::follow_up;
        add(c, R"({"type":"follow_up","message":"s"})");
    }
    {
        auto c = cmd(k::set_auto_retry);
        add(c, R"({"type":"set_auto_retry","enabled":false})");
        c.kind = k::set_auto_compaction;
        c.enabled = true;
        add(c, R"({"type":"set_auto_compaction","enabled":true})");
    }
    {
        auto c = cmd(k::compact);
        add(c, R"({"type":"compact"})");
        c.custom_instructions = "keep names";
        add(c, R"({"type":"compact","customInstructions":"keep names"})");
    }
    {
        auto c = cmd(k::new_session);
        add(c, R"({"type":"new_session"})");
        c.parent_session = "/s/a.jsonl";
        c.id = json::value(7);
        add(c, R"({"type":"new_session","parentSession":"/s/a.jsonl","id":7})");
    }
    {
        auto c = cmd(k::set_model);
        c.provider = "faux";
        c.model_id = "m";
        add(c, R"({"type":"set_model","provider":"faux","modelId":"m"})");
    }
    {
        auto c = cmd(k::set_session_name);
        c.name = " n ";
        add(c, R"({"type":"set_session_name","name":" n "})");
    }
    {
        auto c = cmd(k::set_thinking_level);
        c.level = thinking_level::minimal;
        add(c, R"({"type":"set_thinking_level","level":"minimal"})");
    }
    {
        auto c = cmd(k::prompt);
        c.message = "look";
        c.images.push_back(image_block{"QUJD", "image/png"});
        add(c,
            R"({"type":"prompt","message":"look","images":[{"type":"image","data":"QUJD","mimeType":"image/png"}]})");
    }
    for (k plain : {k::abort, k::abort_retry, k::retry_now, k::get_state, k::get_messages,
                    k::get_last_assistant_text, k::get_available_models, k::get_session_stats,
                    k::cycle_thinking_level})
        add(cmd(plain), R"({"type":")" + std::string(rpc::to_string(plain)) + R"("})");
    for (const auto& [c, text] : rows) {
        INFO(text);
        const std::string line = rpc::to_line(rpc::to_json(c));
        CHECK(line == text + "\n");
        const auto back = parsed(line.substr(0, line.size() - 1));
        CHECK(back.kind == c.kind);
        CHECK(back.id == c.id);
        CHECK(back.message == c.message);
        CHECK(back.behavior == c.behavior);
        CHECK(back.enabled == c.enabled);
        CHECK(back.custom_instructions == c.custom_instructions);
        CHECK(back.parent_session == c.parent_session);
        CHECK(back.provider == c.provider);
        CHECK(back.model_id == c.model_id);
        CHECK(back.name == c.name);
        CHECK(back.level == c.level);
        CHECK(back.images.size() == c.images.size());
    }
}

TEST_CASE("parse_command: every command and its fields", "[rpc][protocol]") {
    auto p = parsed(R"({"id":"p1","type":"prompt","message":"hi","streamingBehavior":"followUp"})");
    CHECK(p.kind == rpc::command_kind::prompt);
    CHECK(p.id == json::value("p1"));
    CHECK(p.message == "hi");
    CHECK(p.behavior == streaming_behavior::follow_up);
    CHECK(parsed(R"({"type":"prompt","message":"x","streamingBehavior":"steer"})").behavior ==
          streaming_behavior::steer);
    CHECK(parsed(R"({"type":"prompt","message":"x","images":[]})").behavior ==
          streaming_behavior::none);
    // the reference's ImageContent, on prompt, steer and follow_up
    for (auto t : {"prompt", "steer", "follow_up"}) {
        auto c = parsed(
            std::string(R"({"type":")") + t +
            R"(","message":"x","images":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"data":"QUJD","mimeType":"image/jpeg"}]})");
        REQUIRE(c.images.size() == 2);
        CHECK(c.images[0].data == "iVBORw0KGgo=");
        CHECK(c.images[0].mime_type == "image/png");
        CHECK(c.images[1].mime_type == "image/jpeg");
        CHECK(
            json::serialize(rpc::to_json(c).at("images")) ==
            R"([{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},{"type":"image","data":"QUJD","mimeType":"image/jpeg"}])");
    }
    CHECK_FALSE(parsed(R"({"type":"prompt","message":""})").id);
    CHECK(parsed(R"({"id":7,"type":"abort"})").id == json::value(7));
    CHECK(parsed(R"({"type":"steer","message":"s"})").message == "s");
    CHECK(parsed(R"({"type":"follow_up","message":"f"})").kind == rpc::command_kind::follow_up);
    CHECK(parsed(R"({"type":"set_auto_retry","enabled":false})").enabled == false);
    CHECK(parsed(R"({"type":"set_auto_compaction","enabled":true})").enabled == true);
    CHECK(parsed(R"({"type":"compact","customInstructions":"short"})").custom_instructions ==
          "short");
    auto m = parsed(R"({"type":"set_model","provider":"faux","modelId":"faux"})");
    CHECK((m.provider == "faux" && m.model_id == "faux"));
    CHECK(parsed(R"({"type":"set_session_name","name":" n "})").name == " n ");
    CHECK(parsed(R"({"type":"set_thinking_level","level":"xhigh"})").level ==
          thinking_level::xhigh);
    CHECK(parsed(R"({"type":"new_session","parentSession":"/x.jsonl"})").parent_session ==
          "/x.jsonl");
    for (auto t : {"abort", "abort_retry", "retry_now", "get_state", "get_messages",
                   "get_last_assistant_text", "get_available_models", "get_session_stats",
                   "new_session", "compact"}) {
        auto c = parsed(std::string(R"({"type":")") + t + R"(","extra":1})");
        CHECK(rpc::to_string(c.kind) == t);
    }
}

TEST_CASE("parse_command: bad input gives errors that name the problem, id echoed when readable",
          "[rpc][protocol]") {
    auto e = parse_error("this is not json");
    CHECK(e.command == "parse");
    CHECK_FALSE(e.id);
    CHECK(e.error.starts_with("Failed to parse command: "));

    e = parse_error("[1,2,3]");
    CHECK(e.command == "parse");
    CHECK(e.error == "Failed to parse command: expected a JSON object, found array");
    CHECK(parse_error("42").error ==
          "Failed to parse command: expected a JSON object, found number");

    e = parse_error(R"({"id":"n1"})");
    CHECK(e.id == json::value("n1"));
    CHECK(e.command == "parse");
    CHECK(e.error == R"(Missing field "type" (a string naming the command))");

    e = parse_error(R"({"id":"t1","type":3})");
    CHECK(e.id == json::value("t1"));
    CHECK(e.error == R"(Field "type" must be a string, found number 3)");

    e = parse_error(R"({"id":"u1","type":"no_such_command"})");
    CHECK(e.id == json::value("u1"));
    CHECK(e.command == "no_such_command");
    CHECK(e.error == "Unknown command: no_such_command");

    e = parse_error(R"({"id":"e1","type":"prompt"})");
    CHECK(e.id == json::value("e1"));
    CHECK(e.command == "prompt");
    CHECK(e.error == R"(Missing field "message" (a string))");
    CHECK(parse_error(R"({"type":"prompt","message":5})").error ==
          R"(Field "message" must be a string, found number 5)");
    CHECK(parse_error(R"({"type":"set_auto_retry","enabled":"yes"})").error ==
          R"(Field "enabled" must be a boolean, found string "yes")");
    CHECK(parse_error(R"({"type":"set_auto_retry"})").error ==
          R"(Missing field "enabled" (a boolean))");
    CHECK(parse_error(R"({"type":"prompt","message":"x","streamingBehavior":"later"})").error ==
          R"(Field "streamingBehavior" must be "steer" or "followUp", found "later")");
    CHECK(parse_error(R"({"type":"set_model","provider":"faux"})").error ==
          R"(Missing field "modelId" (a string))");
    CHECK(parse_error(R"({"type":"prompt","message":"x","images":{}})").error ==
          R"(Field "images" must be an array, found object {})");
    CHECK(parse_error(R"({"type":"prompt","message":"x","images":["x"]})").error ==
          R"(Field "images[0]" must be an object {type:"image",data,mimeType}, found string "x")");
    CHECK(parse_error(R"({"type":"prompt","message":"x","images":[{"type":"image"}]})").error ==
          R"(Missing field "images[0].data" (a string))");
    CHECK(parse_error(R"({"type":"steer","message":"x","images":[{"type":"text","data":"QUJD"}]})")
              .error == R"(Field "images[0].type" must be "image", found string "text")");
    CHECK(
        parse_error(R"({"type":"follow_up","message":"x","images":[{"data":"QUJD","mimeType":5}]})")
            .error == R"(Field "images[0].mimeType" must be a string, found number 5)");
    CHECK(
        parse_error(
            R"({"type":"prompt","message":"x","images":[{"data":"QUJD","mimeType":"image/png"},{"data":"Q JD","mimeType":"image/png"}]})")
            .error == R"(Field "images[1]": data is not base64 (byte 1))");

    e = parse_error("{\"id\":\"b1\",\"type\":\"prompt\",\"message\":\"\xFF\"}");
    CHECK(e.id == json::value("b1"));  // salvaged
    CHECK(e.command == "parse");
    CHECK(e.error == "Failed to parse command: invalid UTF-8 at byte 38");

    // nesting far beyond the parser's depth limit: an error, no stack overflow
    std::string deep(100000, '[');
    CHECK(parse_error(deep).command == "parse");
    std::string long_value =
        R"({"type":"set_auto_retry","enabled":")" + std::string(500, 'x') + "\"}";
    CHECK(parse_error(long_value).error.size() < 200);  // shown values are cut
}

TEST_CASE(
    "fixed finding 1: a number beyond a double in a command is refused, never echoed as Infinity",
    "[rpc][protocol][limits]") {
    auto e = parse_error(R"({"id":1e400,"type":"get_state"})");
    CHECK_FALSE(e.id);
    CHECK(e.command == "parse");
    CHECK(
        e.error ==
        "Failed to parse command: number out of range at \"id\" (a JSON number must fit a double: "
        "at most about 1.8e308)");
    const std::string line = rpc::to_line(rpc::error_response(e));
    CHECK(line.find("Infinity") == std::string::npos);
    CHECK(json::parse(std::string_view(line).substr(0, line.size() - 1)).is_object());
    CHECK(parse_error(R"({"type":"prompt","message":"x","extra":[-1e999]})").error ==
          "Failed to parse command: number out of range at \"extra[0]\" (a JSON number must fit a "
          "double: at most "
          "about 1.8e308)");
    // with invalid UTF-8 too: the id is not salvaged
    e = parse_error("{\"id\":1e400,\"type\":\"prompt\",\"message\":\"\xFF\"}");
    CHECK_FALSE(e.id);
    // a large but finite id is echoed as read
    auto ok = rpc::parse_command(R"({"id":1e300,"type":"get_state"})");
    REQUIRE(std::holds_alternative<rpc::command>(ok));
    CHECK(std::get<rpc::command>(ok).id == json::value(1e300));
}

TEST_CASE("fixed: values shown in errors are cut on a UTF-8 code-point boundary",
          "[rpc][protocol]") {
    // 76 ASCII bytes then 'é' (2 bytes) at 77-78: a cut at byte 77 would split it
    const std::string value = std::string(75, 'a') + "\xC3\xA9" + std::string(20, 'b');
    const auto e = parse_error(R"({"type":"set_auto_retry","enabled":")" + value + "\"}");
    CHECK(e.error ==
          "Field \"enabled\" must be a boolean, found string \"" + std::string(75, 'a') + "...");
    CHECK_FALSE(rpc::find_invalid_utf8(e.error));
    CHECK(cut_utf8("abc", 80) == "abc");
    CHECK(cut_utf8(std::string(76, 'x') + "\xE2\x82\xAC" + "yyyy", 80) ==
          std::string(76, 'x') + "...");
    CHECK(cut_utf8(std::string(77, 'x') + "\xE2\x82\xAC" + "yyyy", 80) ==
          std::string(77, 'x') + "...");
}

TEST_CASE("responses: envelope fields and order", "[rpc][protocol]") {
    CHECK(rpc::to_line(rpc::success_response(json::value("a"), "get_state")) ==
          "{\"id\":\"a\",\"type\":\"response\",\"command\":\"get_state\",\"success\":true}\n");
    CHECK(rpc::to_line(rpc::success_response(std::nullopt, "new_session",
                                             json::value(json::object{{"cancelled", false}}))) ==
          "{\"type\":\"response\",\"command\":\"new_session\",\"success\":true,\"data\":{"
          "\"cancelled\":false}}\n");
    CHECK(rpc::to_line(
              rpc::error_response(json::value(3), "compact", "compact is not supported yet")) ==
          "{\"id\":3,\"type\":\"response\",\"command\":\"compact\",\"success\":false,\"error\":"
          "\"compact is not supported yet\"}\n");
    CHECK(
        rpc::too_long_error(20, 10).error ==
        "Failed to parse command: line of 20 bytes exceeds the limit of 10 bytes; it was skipped");
}

// =========================================================================================
// coagent --mode rpc as a child process
// =========================================================================================

namespace {

// A partial assistant message as the decoders build it, and the queue fed with its updates.
struct streamed_reply {
    std::shared_ptr<message> m = std::make_shared<message>();
    message_ptr msg = m;
    streamed_reply() { m->role = message_role::assistant; }
    void open_text() { m->content.emplace_back(text_block{}); }
    event delta(std::size_t block, std::string_view d) {
        std::get<text_block>(m->content.at(block)).text.append(d);
        return message_update_event{msg, std::string(d)};
    }
};

std::vector<json::object> taken_lines(rpc::output_queue& q) {
    std::string out;
    q.take(out);
    q.written();
    std::vector<json::object> v;
    for (std::string_view rest = out; !rest.empty();) {
        const auto nl = rest.find('\n');
        REQUIRE(nl != std::string_view::npos);
        v.push_back(json::parse(rest.substr(0, nl)).as_object());
        rest.remove_prefix(nl + 1);
    }
    return v;
}

std::string delta_of(const json::object& o) {
    return std::string(o.at("assistantMessageEvent").at("delta").as_string());
}
std::string text_of_line(const json::object& o, std::size_t block) {
    return std::string(o.at("message").at("content").at(block).at("text").as_string());
}

}  // namespace

TEST_CASE("issue 16 item 3: output queue below its bound writes every event as it came",
          "[rpc][protocol][limits]") {
    CHECK(rpc::output_queue::default_merge_above == 8u * 1024 * 1024);
    CHECK(rpc::output_queue::default_pause_above == 64u * 1024 * 1024);
    rpc::output_queue q;
    streamed_reply r;
    r.open_text();
    q.push_event(message_start_event{r.msg});
    for (const char* d : {"ab", "cd", "ef"}) q.push_event(r.delta(0, d));
    const auto lines = taken_lines(q);
    REQUIRE(lines.size() == 4);
    CHECK(delta_of(lines[1]) == "ab");
    CHECK(text_of_line(lines[1], 0) == "ab");  // the partial as it was then
    CHECK(text_of_line(lines[2], 0) == "abcd");
    CHECK(text_of_line(lines[3], 0) == "abcdef");
    CHECK(q.merged() == 0);
    CHECK(q.bytes() == 0);
}

TEST_CASE(
    "issue 16 item 3: above its bound, consecutive updates of one block are merged, never "
    "across blocks, other events or responses",
    "[rpc][protocol][limits]") {
    rpc::output_queue q({/*merge_above=*/0, /*pause_above=*/1u << 30});
    streamed_reply r;
    r.open_text();
    q.push_line("{\"type\":\"ready\"}\n");  // the queue is above 0 bytes from here on
    q.push_event(message_start_event{r.msg});
    for (const char* d : {"a", "b", "c"}) q.push_event(r.delta(0, d));
    q.push_line("{\"type\":\"response\",\"command\":\"get_state\",\"success\":true}\n");
    for (const char* d : {"d", "e"}) q.push_event(r.delta(0, d));
    r.open_text();  // a second text block: its updates start a new line
    for (const char* d : {"x", "y"}) q.push_event(r.delta(1, d));
    q.push_event(r.delta(0, "f"));  // back to block 0 (interleaved blocks)
    q.push_event(r.delta(1, "z"));
    q.push_event(message_end_event{r.msg});
    const auto lines = taken_lines(q);
    REQUIRE(lines.size() == 9);
    CHECK(lines[0].at("type") == "ready");
    CHECK(lines[1].at("type") == "message_start");
    CHECK(lines[2].at("type") == "message_update");
    CHECK(delta_of(lines[2]) == "abc");
    CHECK(lines[3].at("type") == "response");  // never merged across, never dropped
    CHECK(delta_of(lines[4]) == "de");
    CHECK(delta_of(lines[5]) == "xy");
    CHECK(delta_of(lines[6]) == "f");
    CHECK(delta_of(lines[7]) == "z");
    CHECK(lines[8].at("type") == "message_end");
    // a merged update's message is the latest partial: serialised when the next line came,
    // here the update of block 0 with "f"
    CHECK(text_of_line(lines[4], 0) == "abcde");
    CHECK(text_of_line(lines[5], 0) == "abcdef");
    CHECK(text_of_line(lines[5], 1) == "xy");
    CHECK(q.merged() == 4);  // b, c, e, y
    // concatenating every delta of a block gives its text
    std::string block0, block1;
    for (const std::size_t i : {2, 4, 6}) block0 += delta_of(lines[i]);
    for (const std::size_t i : {5, 7}) block1 += delta_of(lines[i]);
    CHECK(block0 == "abcdef");
    CHECK(block1 == "xyz");

    // two blocks that end alike: a delta is placed by which block grew, not by its text
    rpc::output_queue q2({0, 1u << 30});
    streamed_reply r2;
    r2.open_text();
    r2.open_text();
    q2.push_event(message_start_event{r2.msg});
    q2.push_event(r2.delta(1, "a"));
    q2.push_line("{\"type\":\"response\"}\n");
    q2.push_event(r2.delta(0, "a"));  // block 1 ends with "a" too
    q2.push_event(r2.delta(1, "a"));
    q2.push_event(r2.delta(1, "b"));
    const auto lines2 = taken_lines(q2);
    REQUIRE(lines2.size() == 5);
    CHECK(delta_of(lines2[3]) == "a");   // block 0 alone
    CHECK(delta_of(lines2[4]) == "ab");  // block 1's two, merged
    CHECK(text_of_line(lines2[4], 0) == "a");
    CHECK(text_of_line(lines2[4], 1) == "aab");
}

TEST_CASE(
    "issue 16 item 3: a slow reader: a long reply in 4-byte deltas stays bounded, "
    "linear in the reply",
    "[rpc][protocol][limits]") {
    // 32 KiB in 4-byte deltas (8192 updates) with nothing written meanwhile; unmerged they
    // would queue about 8192 * 16 KiB = 136 MB. With a 64 KiB merge bound the queue holds the
    // lines up to the bound and then one update growing with the reply.
    rpc::output_queue q({/*merge_above=*/64 * 1024, /*pause_above=*/1024 * 1024});
    streamed_reply r;
    r.open_text();
    q.push_event(message_start_event{r.msg});
    std::size_t peak = 0;
    for (int i = 0; i < 8192; ++i) {
        q.push_event(r.delta(0, "abcd"));
        peak = std::max(peak, q.bytes());
    }
    CHECK(peak < 64 * 1024 + 4 * 32 * 1024 + 4096);
    CHECK_FALSE(q.over_pause());
    q.push_event(message_end_event{r.msg});
    const auto lines = taken_lines(q);
    std::string all;
    for (const auto& l : lines)
        if (l.at("type") == "message_update") all += delta_of(l);
    CHECK(all.size() == 4 * 8192);
    CHECK(all == std::get<text_block>(r.msg->content[0]).text);
    CHECK(lines.size() < 200);
    CHECK(q.merged() + lines.size() == 8192 + 2);
    // over the pause bound until written
    rpc::output_queue small({0, 10});
    small.push_line("0123456789\n");
    CHECK(small.over_pause());
    std::string out;
    small.take(out);
    CHECK(small.over_pause());  // taken, not yet written
    small.written();
    CHECK_FALSE(small.over_pause());
}

TEST_CASE("rpc mode: ready first, get_state fields, prompt then its events up to agent_settled",
          "[rpc][process]") {
    rpc_env env;
    rpc_process p(env, {"--session-dir", (env.dir.path / "s").string()});
    CHECK(p.next() == obj(R"({"type":"ready"})"));

    auto st = p.call("s0", "get_state");
    CHECK(st.at("success") == true);
    CHECK(st.at("command") == "get_state");
    const auto& d = st.at("data").as_object();
    CHECK(keys(d) == std::set<std::string>{"model", "thinkingLevel", "isStreaming", "isCompacting",
                                           "isRetrying", "retryAttempt", "autoRetryEnabled",
                                           "autoCompactionEnabled", "sessionId", "sessionFile",
                                           "messageCount", "pendingMessageCount", "steeringMode",
                                           "followUpMode", "limitsStore", "limitsConnected"});
    CHECK(d.at("model").at("provider") == "faux");
    CHECK(d.at("model").at("id") == "faux");
    CHECK(d.at("model").at("contextWindow") == 128000);
    CHECK(d.at("isStreaming") == false);
    CHECK(d.at("isRetrying") == false);
    CHECK(d.at("retryAttempt") == 0);
    CHECK(d.at("autoRetryEnabled") == true);
    CHECK(d.at("autoCompactionEnabled") == true);
    CHECK(d.at("messageCount") == 0);
    CHECK(d.at("pendingMessageCount") == 0);
    CHECK(d.at("steeringMode") == "all");
    CHECK(d.at("followUpMode") == "one-at-a-time");
    CHECK(d.at("limitsStore") == "local");  // limits.store's default
    CHECK(d.at("limitsConnected") == true);
    const std::string session_file(d.at("sessionFile").as_string());
    CHECK(session_file.starts_with((env.dir.path / "s").string()));

    CHECK(p.call("l0", "get_last_assistant_text").at("data") == obj(R"({"text":null})"));

    const auto start = p.position();
    json::object prompt;
    prompt["id"] = "p1";
    prompt["type"] = "prompt";
    prompt["message"] = "Say hello";
    p.send(prompt);
    CHECK(p.next() ==
          obj(R"({"id":"p1","type":"response","command":"prompt","success":true})"));  // before any
                                                                                       // event
    p.next_of("agent_settled");
    CHECK(brief(p.since(start)) == strings{"agent_start", "turn_start", "message_start:user",
                                           "message_end:user", "message_start:assistant",
                                           "message_end:assistant:stop", "turn_end",
                                           "agent_end{final}", "agent_settled"});

    auto msgs = p.call("m1", "get_messages").at("data").at("messages").as_array();
    REQUIRE(msgs.size() == 2);
    CHECK(msgs[0].at("role") == "user");
    CHECK(msgs[0].at("content").at(0).at("text") == "Say hello");
    CHECK(msgs[1].at("role") == "assistant");
    CHECK(msgs[1].at("stopReason") == "stop");
    CHECK(p.call("l1", "get_last_assistant_text").at("data") ==
          obj(R"({"text":"Hello from the faux provider."})"));
    CHECK(p.call("s1", "get_state").at("data").at("messageCount") == 2);

    auto stats = p.call("t1", "get_session_stats").at("data").as_object();
    CHECK(keys(stats) == std::set<std::string>{"sessionFile", "sessionId", "userMessages",
                                               "assistantMessages", "toolCalls", "toolResults",
                                               "totalMessages", "tokens", "cost", "retries",
                                               "retriesByLimit", "wastedTokens", "wastedCost",
                                               "backoffMs"});
    CHECK(stats.at("retries") == 0);
    CHECK(stats.at("retriesByLimit") == json::object());
    CHECK(stats.at("backoffMs") == 0);
    CHECK(stats.at("userMessages") == 1);
    CHECK(stats.at("assistantMessages") == 1);
    CHECK(stats.at("toolCalls") == 0);
    CHECK(stats.at("toolResults") == 0);
    CHECK(stats.at("totalMessages") == 2);
    CHECK(keys(stats.at("tokens").as_object()) ==
          std::set<std::string>{"input", "output", "cacheRead", "cacheWrite", "total"});
    CHECK(stats.at("sessionId") == d.at("sessionId"));

    p.close_stdin();
    CHECK(p.at_eof());
    CHECK(p.wait_exit() == 0);
    // the session file has the header, the user message and the reply
    const std::string file = read_file(session_file);
    CHECK(file.find("Say hello") != std::string::npos);
    CHECK(file.find("Hello from the faux provider.") != std::string::npos);
}

TEST_CASE("rpc mode: every bad input is answered and the process goes on", "[rpc][process]") {
    rpc_env env;
    rpc_process p(env, {"--no-session"});
    p.next();  // ready

    p.send("this is not json");
    auto r = err_of(p.next());
    CHECK(r.at("command") == "parse");
    CHECK_FALSE(r.contains("id"));
    CHECK(std::string(r.at("error").as_string()).starts_with("Failed to parse command:"));

    p.send("[1,2,3]");
    CHECK(
        p.next() ==
        obj(R"({"type":"response","command":"parse","success":false,"error":"Failed to parse command: expected a JSON object, found array"})"));
    p.send(R"("just a string")");
    CHECK(err_of(p.next()).at("command") == "parse");
    p.send(R"({"id":"n1"})");
    CHECK(
        p.next() ==
        obj(R"j({"id":"n1","type":"response","command":"parse","success":false,"error":"Missing field \"type\" (a string naming the command)"})j"));
    p.send(R"({"id":"t1","type":["prompt"]})");
    CHECK(err_of(p.next()).at("id") == "t1");
    p.send(R"({"id":"u1","type":"no_such_command"})");
    CHECK(
        p.next() ==
        obj(R"({"id":"u1","type":"response","command":"no_such_command","success":false,"error":"Unknown command: no_such_command"})"));
    p.send(R"({"id":"e1","type":"prompt"})");
    CHECK(
        p.next() ==
        obj(R"j({"id":"e1","type":"response","command":"prompt","success":false,"error":"Missing field \"message\" (a string)"})j"));
    p.send(R"({"id":"e2","type":"set_auto_retry","enabled":"yes"})");
    CHECK(
        p.next() ==
        obj(R"({"id":"e2","type":"response","command":"set_auto_retry","success":false,"error":"Field \"enabled\" must be a boolean, found string \"yes\""})"));
    p.send(R"({"id":"e3","type":"prompt","message":"x","streamingBehavior":1})");
    CHECK(err_of(p.next()).at("id") == "e3");
    p.send("{\"id\":\"b1\",\"type\":\"prompt\",\"message\":\"\xC3\x28\"}");
    CHECK(
        p.next() ==
        obj(R"({"id":"b1","type":"response","command":"parse","success":false,"error":"Failed to parse command: invalid UTF-8 at byte 38"})"));
    p.send("\xFF\xFE");
    CHECK(err_of(p.next()).at("error") == "Failed to parse command: invalid UTF-8 at byte 0");
    p.send(R"({"id":7,"type":"get_state"})");  // numeric ids are echoed as they are
    CHECK(p.next().at("id") == 7);

    // nothing was run by any of them, and the process still answers
    auto st = p.call("s", "get_state");
    CHECK(st.at("success") == true);
    CHECK(st.at("data").at("messageCount") == 0);
    CHECK(env.settings() == obj(R"({"retry":{"baseDelayMs":100}})"));
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: an over-long line is skipped with an error, without buffering it",
          "[rpc][process]") {
    rpc_env env;
    rpc_process p(env, {"--no-session"});
    p.next();
    const std::size_t base = p.peak_rss();
    const std::size_t limit = rpc::default_max_line_bytes;
    std::string big =
        R"({"id":"big","type":"prompt","message":")" + std::string(4 * limit, 'x') + "\"}\n";
    const std::size_t size = big.size() - 1;
    p.send_raw(std::move(big));
    auto r = p.next();
    CHECK(
        r ==
        obj(R"({"type":"response","command":"parse","success":false,"error":"Failed to parse command: line of )" +
            std::to_string(size) + " bytes exceeds the limit of " + std::to_string(limit) +
            R"( bytes; it was skipped"})"));
    // 64 MiB went through; at most one limit's worth (plus slack) was ever held
    CHECK(p.peak_rss() < base + 3 * limit);
    CHECK(p.call("after", "get_state").at("success") == true);
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: CRLF, U+2028/U+2029 inside strings, blank lines, a last line without LF",
          "[rpc][process]") {
    rpc_env env;
    rpc_process p(env, {"--no-session"});
    p.next();
    p.send_raw("{\"id\":\"c1\",\"type\":\"get_state\"}\r\n");
    CHECK(p.next().at("id") == "c1");
    p.send_raw("\n   \n\t\n");  // blank lines: no response
    const std::string text =
        "a\xE2\x80\xA8"
        "b\xE2\x80\xA9"
        "c";
    p.send("{\"id\":\"u\",\"type\":\"prompt\",\"message\":\"" + text + "\"}");
    CHECK(p.next().at("id") == "u");  // the next line is the response: the blank lines got none
    auto user = p.next_of("message_end");
    CHECK(user.at("message").at("content").at(0).at("text").as_string() == text);
    p.next_of("agent_settled");
    p.send_raw(R"({"id":"last","type":"get_last_assistant_text"})");  // no LF, then EOF
    p.close_stdin();
    CHECK(
        p.next() ==
        obj(R"({"id":"last","type":"response","command":"get_last_assistant_text","success":true,"data":{"text":"Hello from the faux provider."}})"));
    CHECK(p.at_eof());
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: busy session: refusal, followUp and steer queued, abort at once, new_session",
          "[rpc][process]") {
    rpc_env env;
    rpc_process p(env, fa({}, slow_reply));
    p.next();
    CHECK(p.call("p1", "prompt", {{"message", "first"}}).at("success") == true);
    p.next_of("message_start");  // user
    auto busy = p.call("p2", "prompt", {{"message", "second"}});
    CHECK(
        busy ==
        obj(R"({"id":"p2","type":"response","command":"prompt","success":false,"error":"Agent is busy (a request is streaming). Send the message with streamingBehavior \"steer\" (joins the context before the next request) or \"followUp\" (runs after the current prompt), or wait for agent_settled."})"));
    CHECK(p.call("ns", "new_session").at("success") == false);
    CHECK(p.call("k", "compact").at("error") ==
          "Agent is busy: compact when the session is idle (after agent_settled).");
    CHECK(p.call("p3", "prompt", {{"message", "later"}, {"streamingBehavior", "followUp"}})
              .at("success") == true);
    CHECK(p.call("f1", "follow_up", {{"message", "later too"}}).at("success") == true);
    CHECK(p.call("s1", "steer", {{"message", "steer me"}}).at("success") == true);
    auto st = p.call("st", "get_state").at("data").as_object();
    CHECK(st.at("isStreaming") == true);
    CHECK(st.at("pendingMessageCount") == 3);
    const auto from = p.position();
    CHECK(p.call("a1", "abort").at("success") == true);  // answered while the prompt runs
    p.next_of("agent_settled");
    CHECK(brief(p.since(from)) == strings{"message_start:assistant",
                                          "message_end:assistant:aborted", "turn_end",
                                          "agent_end{final}", "agent_settled"});
    st = p.call("st2", "get_state").at("data").as_object();
    CHECK(st.at("isStreaming") == false);
    CHECK(st.at("pendingMessageCount") == 0);  // abort dropped the queued messages

    const auto old_id = st.at("sessionId");
    p.call("n1", "set_session_name", {{"name", "named"}});
    auto ns = p.call("ns2", "new_session");
    CHECK(
        ns ==
        obj(R"({"id":"ns2","type":"response","command":"new_session","success":true,"data":{"cancelled":false}})"));
    st = p.call("st3", "get_state").at("data").as_object();
    CHECK(st.at("sessionId") != old_id);
    CHECK(st.at("messageCount") == 0);
    CHECK_FALSE(st.contains("sessionName"));
    // the new session works (the faux script goes on with its next step)
    p.call("p4", "prompt", {{"message", "again"}});
    p.next_of("agent_settled");
    CHECK(p.call("l", "get_last_assistant_text").at("data").at("text") == "second");
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: a followUp sent during compact runs after it, settles, EOF then exits",
          "[rpc][process][issue-15]") {
    rpc_env env(R"({"retry":{"baseDelayMs":100},"compaction":{"keepRecentTokens":0}})");
    rpc_process p(env,
                  fa({}, R"([{"text":"first"},{"text":"SUM","delayMs":300},{"text":"after"}])"));
    p.next();
    p.call("p1", "prompt", {{"message", "one"}});
    p.next_of("agent_settled");
    p.send(R"({"id":"k","type":"compact"})");
    p.next_of("compaction_start");
    CHECK(p.call("p2", "prompt", {{"message", "queued"}, {"streamingBehavior", "followUp"}})
              .at("success") == true);
    CHECK(p.call("st", "get_state").at("data").at("pendingMessageCount") == 1);
    const auto from = p.position();
    p.next_of("agent_settled");
    CHECK(brief(p.since(from)) == strings{"compaction_end", "agent_start", "turn_start",
                                          "message_start:user", "message_end:user",
                                          "message_start:assistant", "message_end:assistant:stop",
                                          "turn_end", "agent_end{final}", "agent_settled"});
    auto st = p.call("st2", "get_state").at("data").as_object();
    CHECK(st.at("pendingMessageCount") == 0);
    CHECK(st.at("isStreaming") == false);
    CHECK(p.call("l", "get_last_assistant_text").at("data").at("text") == "after");
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: stdin EOF during compact with a followUp queued: dropped, settled, exit 0",
          "[rpc][process][issue-15]") {
    rpc_env env(R"({"retry":{"baseDelayMs":100},"compaction":{"keepRecentTokens":0}})");
    rpc_process p(env,
                  fa({}, R"([{"text":"first"},{"text":"SUM","delayMs":60000},{"text":"after"}])"));
    p.next();
    p.call("p1", "prompt", {{"message", "one"}});
    p.next_of("agent_settled");
    p.send(R"({"id":"k","type":"compact"})");
    p.next_of("compaction_start");
    CHECK(p.call("p2", "prompt", {{"message", "queued"}, {"streamingBehavior", "followUp"}})
              .at("success") == true);
    const auto from = p.position();
    const auto t0 = std::chrono::steady_clock::now();
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 20s);  // did not wait out the 60 s summary
    while (!p.at_eof()) p.next();
    std::vector<json::object> rest = p.since(from);
    CHECK(brief(rest) == strings{"compaction_end", "agent_settled"});
}

TEST_CASE("rpc mode: settings, model and naming commands", "[rpc][process]") {
    rpc_env env(R"({"retry":{"baseDelayMs":100,"maxRetries":2},"quietStartup":true})");
    rpc_process p(env, {"--no-session"});
    p.next();
    write_file(
        env.dir.path / "models.json",
        R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:9/v1","api":"openai-completions",)"
        R"("apiKey":"any","models":[{"id":"m1","contextWindow":32000,"maxTokens":4096}]}}})");
    CHECK(p.call("c1", "set_auto_compaction", {{"enabled", false}}) ==
          obj(R"({"id":"c1","type":"response","command":"set_auto_compaction","success":true})"));
    CHECK(p.call("s", "get_state").at("data").at("autoCompactionEnabled") == false);
    CHECK(
        env.settings() ==
        obj(R"({"retry":{"baseDelayMs":100,"maxRetries":2},"quietStartup":true,"compaction":{"enabled":false}})"));

    auto k = p.call("k", "compact");  // an empty session: nothing to summarise
    CHECK(k.at("success") == false);
    CHECK(k.at("error") ==
          "Nothing to compact: the conversation is already within compaction.keepRecentTokens "
          "(20000 tokens)");
    CHECK(p.call("k2", "compact", {{"customInstructions", 3}}).at("error") ==
          R"(Field "customInstructions" must be a string, found number 3)");

    auto model = p.call("m", "set_model", {{"provider", "faux"}, {"modelId", "faux"}});
    CHECK(model.at("success") == true);
    CHECK(model.at("data").at("id") == "faux");
    CHECK(
        p.call("m2", "set_model", {{"provider", "nope"}, {"modelId", "nope"}}) ==
        obj(R"({"id":"m2","type":"response","command":"set_model","success":false,"error":"Model not found: nope/nope"})"));
    CHECK(p.call("m4", "set_model", {{"provider", "local"}, {"modelId", "m9"}}).at("error") ==
          "Model not found: local/m9");
    CHECK(p.call("m3", "set_model", {{"provider", "faux"}}).at("error") ==
          R"(Missing field "modelId" (a string))");
    // a model of models.json (written after start-up: the catalog reads it on first use)
    auto local = p.call("m5", "set_model", {{"provider", "local"}, {"modelId", "m1"}});
    REQUIRE(local.at("success") == true);
    CHECK(local.at("data").at("provider") == "local");
    CHECK(local.at("data").at("id") == "m1");
    CHECK(local.at("data").at("contextWindow") == 32000);
    CHECK(p.call("s1", "get_state").at("data").at("model").at("id") == "m1");
    CHECK(p.call("ns", "new_session").at("success") == true);  // keeps the chosen model
    CHECK(p.call("s3", "get_state").at("data").at("model").at("id") == "m1");
    auto models = p.call("am", "get_available_models").at("data").at("models").as_array();
    REQUIRE(models.size() >= 2);  // + openai / anthropic when their keys are in the environment
    CHECK(models[0].at("provider") == "faux");
    CHECK(std::any_of(models.begin(), models.end(), [](const json::value& m) {
        return m.at("provider") == "local" && m.at("id") == "m1";
    }));
    CHECK(p.call("m6", "set_model", {{"provider", "faux"}, {"modelId", "faux"}}).at("success") ==
          true);

    CHECK(
        p.call("n0", "set_session_name", {{"name", "  \t "}}) ==
        obj(R"({"id":"n0","type":"response","command":"set_session_name","success":false,"error":"Session name cannot be empty"})"));
    CHECK(p.call("n1", "set_session_name", {{"name", " My session "}}).at("success") == true);
    auto st = p.call("s2", "get_state").at("data").as_object();
    CHECK(st.at("sessionName") == "My session");
    CHECK_FALSE(st.contains("sessionFile"));  // --no-session

    // a settings file that cannot be rewritten: the error says so, the file is left alone
    write_file(env.settings_file(), "{not json");
    auto r = p.call("r1", "set_auto_retry", {{"enabled", false}});
    CHECK(r.at("success") == false);
    CHECK(std::string(r.at("error").as_string())
              .starts_with("retry.enabled is now false for this session, but saving it to the "
                           "global settings failed: "));
    CHECK(read_file(env.settings_file()) == "{not json");
    CHECK(p.call("s3", "get_state").at("data").at("autoRetryEnabled") == false);
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("issue 24: set_thinking_level, cycle_thinking_level and get_state's thinkingLevel",
          "[rpc][process][content]") {
    rpc_env env(R"({"thinkingLevel":"medium"})");
    rpc_process p(env, {"--no-session"});
    p.next();
    write_file(
        env.dir.path / "models.json",
        R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:9/v1","api":"anthropic-messages",)"
        R"("apiKey":"any","models":[{"id":"r1","reasoning":true},{"id":"plain"}]}}})");
    // faux does not reason: the setting is kept, the level in use is off
    CHECK(p.call("s0", "get_state").at("data").at("thinkingLevel") == "off");
    CHECK(
        p.call("c0", "cycle_thinking_level") ==
        obj(R"({"id":"c0","type":"response","command":"cycle_thinking_level","success":true,"data":null})"));
    CHECK(
        p.call("t0", "set_thinking_level", {{"level", "high"}}) ==
        obj(R"({"id":"t0","type":"response","command":"set_thinking_level","success":true,"data":{"level":"off","note":"Model faux/faux does not reason (models.json \"reasoning\": false): thinkingLevel \"high\" is kept and ignored"}})"));
    // a reasoning model uses the level that was set
    REQUIRE(p.call("m", "set_model", {{"provider", "local"}, {"modelId", "r1"}}).at("success") ==
            true);
    CHECK(p.call("s1", "get_state").at("data").at("thinkingLevel") == "high");
    CHECK(
        p.call("t1", "set_thinking_level", {{"level", "low"}}) ==
        obj(R"({"id":"t1","type":"response","command":"set_thinking_level","success":true,"data":{"level":"low"}})"));
    strings cycled;
    for (int i = 0; i < 6; ++i)
        cycled.emplace_back(p.call("c" + std::to_string(i + 1), "cycle_thinking_level")
                                .at("data")
                                .at("level")
                                .as_string());
    CHECK(cycled == strings{"medium", "high", "xhigh", "off", "minimal", "low"});
    CHECK(p.call("s2", "get_state").at("data").at("thinkingLevel") == "low");
    CHECK(p.call("t2", "set_thinking_level", {{"level", "max"}}).at("error") ==
          R"(Field "level" must be one of off, minimal, low, medium, high, xhigh, found "max")");
    CHECK(p.call("t3", "set_thinking_level").at("error") == R"(Missing field "level" (a string))");
    REQUIRE(
        p.call("m2", "set_model", {{"provider", "local"}, {"modelId", "plain"}}).at("success") ==
        true);
    CHECK(p.call("s3", "get_state").at("data").at("thinkingLevel") == "off");
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: get_available_models gives the reference's model shape (issue 15)",
          "[rpc][process][issue-15]") {
    rpc_env env;
    write_file(
        env.dir.path / "models.json",
        R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:9/v1","api":"openai-completions",)"
        R"("apiKey":"any","models":[{"id":"m1","name":"Model One","contextWindow":32000,)"
        R"("maxTokens":4096,"reasoning":true,"input":["text","image"],)"
        R"("cost":{"input":3,"output":15,"cacheRead":0.3,"cacheWrite":3.75}},{"id":"m2"}]}}})");
    rpc_process p(env, {"--no-session"});
    p.next();
    auto all = p.call("am", "get_available_models").at("data").at("models").as_array();
    REQUIRE(all.size() >= 3);  // + openai / anthropic when their keys are in the environment
    json::array models{all[0]};
    for (const auto& x : all)
        if (x.at("provider") == "local") models.push_back(x);
    REQUIRE(models.size() == 3);
    CHECK(
        models[0] ==
        obj(R"({"id":"faux","name":"faux","api":"faux","provider":"faux","baseUrl":"","reasoning":false,"input":["text"],"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0},"contextWindow":128000,"maxTokens":8192})"));
    CHECK(
        models[1] ==
        obj(R"({"id":"m1","name":"Model One","api":"openai-completions","provider":"local","baseUrl":"http://127.0.0.1:9/v1","reasoning":true,"input":["text","image"],"cost":{"input":3,"output":15,"cacheRead":0.3,"cacheWrite":3.75},"contextWindow":32000,"maxTokens":4096})"));
    // without name, reasoning, input and cost: the reference's defaults (name = id)
    CHECK(
        models[2] ==
        obj(R"({"id":"m2","name":"m2","api":"openai-completions","provider":"local","baseUrl":"http://127.0.0.1:9/v1","reasoning":false,"input":["text"],"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0},"contextWindow":128000,"maxTokens":16384})"));
    // set_model and get_state answer with the same shape
    auto m = p.call("m", "set_model", {{"provider", "local"}, {"modelId", "m1"}});
    CHECK(m.at("data") == models[1]);
    CHECK(p.call("s", "get_state").at("data").at("model") == models[1]);
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE(
    "rpc mode: compact summarises the context and answers with the result after compaction_end",
    "[rpc][process]") {
    rpc_env env(R"({"compaction":{"keepRecentTokens":0}})");
    rpc_process p(env, fa({}, R"([{"text":"one"},{"text":"two"},{"text":"SUMMARY"}])"));
    p.next();
    for (const char* m : {"first", "second"}) {
        p.call(m, "prompt", {{"message", m}});
        p.next_of("agent_settled");
    }
    const auto from = p.position();
    auto r = p.call("k", "compact", {{"customInstructions", "keep it short"}});
    CHECK(r.at("success") == true);
    const auto& data = r.at("data").as_object();
    CHECK(keys(data) == std::set<std::string>{"summary", "firstKeptEntryId", "tokensBefore"});
    CHECK(data.at("summary") == "SUMMARY");
    CHECK(data.at("firstKeptEntryId").is_null());  // keepRecentTokens 0: everything summarised
    CHECK(data.at("tokensBefore").as_int64() > 0);
    auto lines = p.since(from);  // the events come before the response
    REQUIRE(lines.size() == 3);
    CHECK(lines[0] == obj(R"({"type":"compaction_start","reason":"manual"})"));
    json::object end =
        obj(R"({"type":"compaction_end","reason":"manual","aborted":false,"willRetry":false})");
    end["result"] = data;
    CHECK(lines[1] == end);
    CHECK(lines[2].at("type") == "response");
    auto msgs = p.call("m", "get_messages").at("data").at("messages").as_array();
    REQUIRE(msgs.size() == 1);
    CHECK(msgs[0].at("content").at(0).at("text") ==
          "The conversation so far, summarized:\nSUMMARY");
    CHECK(p.call("s", "get_state").at("data").at("isCompacting") == false);
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: two errors then success, exact retry events, get_state during the backoff",
          "[rpc][process][retry]") {
    rpc_env env(R"({"retry":{"baseDelayMs":500}})");
    rpc_process p(env, fa({}, two_errors_then_ok));
    p.next();
    const auto start = p.position();
    p.call("p", "prompt", {{"message", "hi"}});
    auto first = p.next_of("auto_retry_start");
    CHECK(
        first ==
        obj(R"({"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":500,"errorMessage":"503 Service Unavailable: upstream overloaded","limit":"capacity","discarded":{"textChars":0,"thinkingChars":0,"toolCalls":0}})"));
    auto st = p.call("s", "get_state").at("data").as_object();  // inside the 500 ms backoff
    CHECK(st.at("isRetrying") == true);
    CHECK(st.at("retryAttempt") == 1);
    CHECK(st.at("isStreaming") == false);
    CHECK(st.at("autoRetryEnabled") == true);
    CHECK(
        p.next_of("auto_retry_start") ==
        obj(R"({"type":"auto_retry_start","attempt":2,"maxAttempts":3,"delayMs":1000,"errorMessage":"503 Service Unavailable: upstream overloaded","limit":"capacity","discarded":{"textChars":0,"thinkingChars":0,"toolCalls":0}})"));
    CHECK(p.next_of("auto_retry_end") ==
          obj(R"({"type":"auto_retry_end","success":true,"attempt":2})"));
    p.next_of("agent_settled");
    CHECK(brief(p.since(start)) == coagent::test::two_retries_then_success_events);
    st = p.call("s2", "get_state").at("data").as_object();
    CHECK(st.at("isRetrying") == false);
    CHECK(st.at("retryAttempt") == 0);
    CHECK(st.at("messageCount") == 2);  // the errors left the runtime context
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: a chain run to exhaustion: the exact failed auto_retry_end line (§9.8)",
          "[rpc][process][retry]") {
    rpc_env env(R"({"retry":{"baseDelayMs":1,"maxRetries":2}})");
    rpc_process p(
        env,
        fa({},
           R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":3}])"));
    p.next();
    const auto start = p.position();
    p.call("p", "prompt", {{"message", "hi"}});
    CHECK(
        p.next_of("auto_retry_end") ==
        obj(R"({"type":"auto_retry_end","success":false,"attempt":2,"finalError":"503 Service Unavailable: upstream overloaded"})"));
    p.next_of("agent_settled");
    auto b = brief(p.since(start));
    CHECK(std::count(b.begin(), b.end(), "auto_retry_end{fail,2}") == 1);
    CHECK(std::count(b.begin(), b.end(), "agent_end{retry}") == 2);
    CHECK(strings(b.end() - 3, b.end()) ==
          strings{"agent_end{final}", "auto_retry_end{fail,2}", "agent_settled"});
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: get_session_stats counts retries and waste, --trace-file writes the spans",
          "[rpc][process][retry][telemetry]") {
    rpc_env env(R"({"retry":{"baseDelayMs":1,"maxRetries":2}})");
    const std::string trace = (env.dir.path / "trace.jsonl").string();
    rpc_process p(
        env,
        fa({"--trace-file", trace},
           R"([{"error":"503 Service Unavailable: upstream overloaded","status":503,"times":3,"usage":{"input":5,"output":1}}])"));
    p.next();
    p.call("p", "prompt", {{"message", "hi"}});
    p.next_of("agent_settled");
    auto stats = p.call("t1", "get_session_stats").at("data").as_object();
    CHECK(stats.at("assistantMessages") == 3);
    CHECK(stats.at("retries") == 2);
    CHECK(stats.at("retriesByLimit") == obj(R"({"capacity":2})"));
    CHECK(stats.at("wastedTokens") ==
          obj(R"({"input":15,"output":3,"cacheRead":0,"cacheWrite":0,"total":18})"));
    CHECK(stats.at("tokens").at("input") == 15);  // the reference's sum: every attempt
    CHECK(stats.at("wastedCost") == 0.0);
    CHECK(stats.at("backoffMs").to_number<std::int64_t>() >= 3);  // 1 ms + 2 ms, real clock
    p.close_stdin();
    CHECK(p.wait_exit() == 0);

    // three attempts (resend_count 0, 1, 2) under one chat under one prompt, one trace
    std::istringstream in(read_file(trace));
    std::vector<json::object> spans;
    for (std::string line; std::getline(in, line);) spans.push_back(json::parse(line).as_object());
    REQUIRE(spans.size() == 5);
    strings names;
    for (const auto& sp : spans) names.emplace_back(sp.at("name").as_string());
    CHECK(names == strings{"attempt", "attempt", "attempt", "chat faux", "prompt"});
    const auto& chat = spans[3];
    const auto& prompt = spans[4];
    for (int i = 0; i < 3; ++i) {
        CHECK(spans[i].at("parent_span_id") == chat.at("span_id"));
        CHECK(spans[i].at("attributes").at("http.request.resend_count") == i);
        CHECK(spans[i].at("attributes").at("error.type") == "capacity");
        CHECK(spans[i].at("status") == "error");
        CHECK(spans[i].at("trace_id") == prompt.at("trace_id"));
    }
    CHECK(chat.at("parent_span_id") == prompt.at("span_id"));
    CHECK(chat.at("attributes").at("coagent.retry.attempt") == 2);
    CHECK(chat.at("attributes").at("error.type") == "capacity");
    CHECK(prompt.at("parent_span_id") == "");
    CHECK(prompt.at("attributes").at("coagent.prompt.outcome") == "failed");
    CHECK(prompt.at("trace_id").as_string().size() == 32);
    CHECK(prompt.at("span_id").as_string().size() == 16);
}

TEST_CASE("rpc mode: retry_now ends the backoff at once, refused when nothing waits",
          "[rpc][process][retry][retry-now]") {
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    rpc_process p(env, fa({}, two_errors_then_ok));
    p.next();
    CHECK(
        p.call("r0", "retry_now") ==
        obj(R"({"id":"r0","type":"response","command":"retry_now","success":false,"error":"Nothing to retry now: no backoff is running"})"));
    const auto start = p.position();
    p.call("p", "prompt", {{"message", "hi"}});
    p.next_of("auto_retry_start");
    CHECK(p.call("r1", "retry_now") ==
          obj(R"({"id":"r1","type":"response","command":"retry_now","success":true})"));
    p.next_of("auto_retry_start");  // attempt 2, after the retried request failed at once
    CHECK(p.call("r2", "retry_now").at("success") == true);
    p.next_of("agent_settled");  // well before the 20 s + 40 s of the two backoffs
    CHECK(brief(p.since(start)) == coagent::test::two_retries_then_success_events);
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: abort_retry in the backoff ends the chain with Retry cancelled",
          "[rpc][process][retry]") {
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    rpc_process p(env, fa({}, two_errors_then_ok));
    p.next();
    p.call("p", "prompt", {{"message", "hi"}});
    p.next_of("auto_retry_start");
    const auto from = p.position();
    CHECK(p.call("ar", "abort_retry") ==
          obj(R"({"id":"ar","type":"response","command":"abort_retry","success":true})"));
    CHECK(
        p.next_of("auto_retry_end") ==
        obj(R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})"));
    p.next_of("agent_settled");
    CHECK(brief(p.since(from)) == strings{"auto_retry_end{fail,1}", "agent_settled"});
    auto st = p.call("s", "get_state").at("data").as_object();
    CHECK(st.at("isRetrying") == false);
    CHECK(st.at("retryAttempt") == 0);
    CHECK(p.call("ar2", "abort_retry").at("success") == true);  // idle: no effect, still answered
    p.close_stdin();
    CHECK(p.at_eof());
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: a plain prompt during the backoff is accepted, joins, and retries now",
          "[rpc][process][retry][issue-26]") {
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    rpc_process p(env,
                  fa({}, R"([{"error":"503 Service Unavailable","status":503},{"text":"Both"}])"));
    p.next();
    p.call("p", "prompt", {{"message", "hi"}});
    p.next_of("auto_retry_start");
    const auto from = p.position();
    CHECK(p.call("p2", "prompt", {{"message", "one more thing"}}) ==
          obj(R"({"id":"p2","type":"response","command":"prompt","success":true})"));
    p.next_of("agent_settled");  // long before the 20 s wait would have ended
    CHECK(brief(p.since(from)) == strings{"message_start:user", "message_end:user", "agent_start",
                                          "turn_start", "message_start:assistant",
                                          "message_end:assistant:stop", "auto_retry_end{ok,1}",
                                          "turn_end", "agent_end{final}", "agent_settled"});
    auto msgs = p.call("m", "get_messages").at("data").at("messages").as_array();
    REQUIRE(msgs.size() == 3);
    CHECK(msgs[1].at("role") == "user");
    CHECK(p.call("s", "get_state").at("data").at("isRetrying") == false);
    p.close_stdin();
    CHECK(p.wait_exit() == 0);
}

TEST_CASE("rpc mode: set_auto_retry false: no retry, persisted, survives a restart",
          "[rpc][process][retry]") {
    rpc_env env(R"({"retry":{"baseDelayMs":100},"custom":{"kept":1}})");
    {
        rpc_process p(env, fa({}, two_errors_then_ok));
        p.next();
        CHECK(p.call("r", "set_auto_retry", {{"enabled", false}}) ==
              obj(R"({"id":"r","type":"response","command":"set_auto_retry","success":true})"));
        CHECK(env.settings() ==
              obj(R"({"retry":{"baseDelayMs":100,"enabled":false},"custom":{"kept":1}})"));
        CHECK(p.call("s", "get_state").at("data").at("autoRetryEnabled") == false);
        const auto start = p.position();
        p.call("p", "prompt", {{"message", "hi"}});
        p.next_of("agent_settled");
        auto b = brief(p.since(start));
        CHECK(strings(b.end() - 4, b.end()) == strings{"message_end:assistant:error", "turn_end",
                                                       "agent_end{final}", "agent_settled"});
        CHECK(std::count(b.begin(), b.end(), "auto_retry_start{1}") == 0);
        p.close_stdin();
        CHECK(p.wait_exit() == 0);
    }
    {
        rpc_process p(env, {"--no-session"});
        p.next();
        CHECK(p.call("s", "get_state").at("data").at("autoRetryEnabled") == false);
        p.call("r", "set_auto_retry", {{"enabled", true}});
        CHECK(env.settings().at("retry").at("enabled") == true);
        p.close_stdin();
        CHECK(p.wait_exit() == 0);
    }
}

TEST_CASE("rpc mode: stdin EOF during the backoff: auto_retry_end emitted, session flushed, exit 0",
          "[rpc][process][retry]") {
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    rpc_process p(
        env, {"--session-dir", (env.dir.path / "s").string(), "--faux-script", two_errors_then_ok});
    p.next();
    const std::string file(p.call("s", "get_state").at("data").at("sessionFile").as_string());
    p.call("p", "prompt", {{"message", "hi"}});
    p.next_of("auto_retry_start");
    const auto from = p.position();
    const auto t0 = std::chrono::steady_clock::now();
    p.close_stdin();
    p.next_of("agent_settled");
    CHECK(brief(p.since(from)) == strings{"auto_retry_end{fail,1}", "agent_settled"});
    CHECK(
        p.since(from)[0] ==
        obj(R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})"));
    CHECK(p.at_eof());
    CHECK(p.wait_exit() == 0);
    CHECK(std::chrono::steady_clock::now() - t0 < 15s);  // did not wait out the 20 s backoff
    const std::string content = read_file(file);
    CHECK(content.find("503 Service Unavailable") !=
          std::string::npos);  // the errored reply was written
}

TEST_CASE("rpc mode: SIGTERM / SIGINT during the backoff: the same shutdown, exit 143 / 130",
          "[rpc][process][retry]") {
    for (auto [sig, code] : {std::pair{SIGTERM, 143}, std::pair{SIGINT, 130}}) {
        INFO("signal " << sig);
        rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
        rpc_process p(env, fa({}, two_errors_then_ok));
        p.next();
        p.call("p", "prompt", {{"message", "hi"}});
        p.next_of("auto_retry_start");
        p.signal(sig);
        CHECK(
            p.next_of("auto_retry_end") ==
            obj(R"({"type":"auto_retry_end","success":false,"attempt":1,"finalError":"Retry cancelled"})"));
        CHECK(p.next().at("type") == "agent_settled");
        CHECK(p.at_eof());
        CHECK(p.wait_exit() == code);
    }
}

TEST_CASE("rpc mode: a configuration error exits 2 before ready, with the reason on stderr",
          "[rpc][process]") {
    rpc_env env(R"({"retry":{"maxRetries":"three"}})");
    rpc_process p(env, {"--no-session"});
    CHECK(p.at_eof());
    CHECK(p.wait_exit() == 2);
    CHECK(p.stderr_text().find("retry.maxRetries") != std::string::npos);
}

// =========================================================================================
// coagent::rpc_client
// =========================================================================================

namespace {

std::string what_of(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    }
    return "?";
}

template <class F>
rpc_error expect_rpc_error(F&& f) {
    try {
        f();
    } catch (const rpc_error& e) {
        return e;
    }
    FAIL("no rpc_error was thrown");
    throw std::logic_error("unreachable");
}

fs::path write_script(const temp_dir& d, const std::string& name, const std::string& body) {
    const fs::path p = d.path / name;
    write_file(p, "#!/bin/sh\n" + body);
    fs::permissions(p, fs::perms::owner_all);
    return p;
}

}  // namespace

TEST_CASE(
    "rpc_client: commands return data or throw the server's error, wait_for_settled after a "
    "2-retry chain",
    "[rpc][client]") {
    rpc_env env;
    asio::io_context io;
    rpc_client c(io);
    run_co(io, c.start(coagent_bin(), fa({}, two_errors_then_ok), env.vars()));
    CHECK(c.running());
    CHECK(c.pid() > 0);

    std::vector<json::object> events;
    auto sub = c.on_event([&](const json::object& e) { events.push_back(e); });

    auto st = run_co(io, c.get_state());
    CHECK(st.at("isRetrying") == false);
    CHECK(run_co(io, c.get_last_assistant_text()) == std::nullopt);

    run_co(io, c.prompt("hi"));
    run_co(io, c.wait_for_settled());
    REQUIRE_FALSE(events.empty());
    CHECK(events.back().at("type") == "agent_settled");  // settled, not the first agent_end
    auto b = brief(events);
    CHECK(std::count(b.begin(), b.end(), "agent_end{retry}") == 2);
    CHECK(std::find(b.begin(), b.end(), "auto_retry_start{1}") != b.end());
    CHECK(std::find(b.begin(), b.end(), "auto_retry_start{2}") != b.end());
    CHECK(std::find(b.begin(), b.end(), "auto_retry_end{ok,2}") != b.end());
    CHECK(run_co(io, c.get_last_assistant_text()) == std::optional<std::string>("Hello there"));
    run_co(io, c.wait_for_settled());  // already settled: at once

    auto e = expect_rpc_error([&] { run_co(io, c.set_model("nope", "nope")); });
    CHECK(e.why() == rpc_error::reason::command_failed);
    CHECK(std::string(e.what()) == "Model not found: nope/nope");
    CHECK(e.command() == "set_model");
    CHECK(run_co(io, c.set_model("faux", "faux")).at("id") == "faux");
    CHECK(run_co(io, c.get_available_models()).size() == 1);
    CHECK(run_co(io, c.get_messages()).size() == 2);
    CHECK(run_co(io, c.get_session_stats()).at("assistantMessages") ==
          3);  // both errors are in the history
    run_co(io, c.set_session_name("named"));
    CHECK(run_co(io, c.get_state()).at("sessionName") == "named");
    run_co(io, c.set_auto_compaction(false));
    run_co(io, c.set_auto_retry(false));
    CHECK(env.settings().at("retry").at("enabled") == false);
    CHECK(std::string(expect_rpc_error([&] { run_co(io, c.compact()); }).what())
              .starts_with("Nothing to compact"));
    run_co(io, c.abort_retry());
    run_co(io, c.abort());
    CHECK(run_co(io, c.new_session()) == false);
    CHECK(run_co(io, c.get_state()).at("messageCount") == 0);
    auto raw = run_co(io, c.request(json::object{{"type", "get_state"}}));
    CHECK(raw.at("messageCount") == 0);
    CHECK(expect_rpc_error([&] {
              run_co(io, c.request(json::object{{"type", "bogus"}}));
          }).what() == std::string("Unknown command: bogus"));

    sub.reset();
    CHECK(run_co(io, c.stop()) == 0);
    CHECK(c.exit_status() == 0);
    CHECK_FALSE(c.running());
    CHECK(expect_rpc_error([&] { run_co(io, c.get_state()); }).why() ==
          rpc_error::reason::not_running);
}

TEST_CASE("rpc_client: queued follow_up and steer settle with the running prompt",
          "[rpc][client]") {
    rpc_env env;
    asio::io_context io;
    rpc_client c(io);
    run_co(io, c.start(coagent_bin(), fa({}, R"([{"text":"one","delayMs":1500},{"text":"two"}])"),
                       env.vars()));
    int settled = 0;
    std::vector<std::string> users;
    auto sub = c.on_event([&](const json::object& e) {
        if (e.at("type") == "agent_settled") ++settled;
        if (e.at("type") == "message_end" && e.at("message").at("role") == "user")
            users.emplace_back(e.at("message").at("content").at(0).at("text").as_string());
    });
    run_co(io, c.prompt("first"));
    auto busy = expect_rpc_error([&] { run_co(io, c.prompt("refused")); });
    CHECK(std::string(busy.what()).starts_with("Agent is busy"));
    run_co(io, c.follow_up("after"));
    run_co(io, c.wait_for_settled());
    CHECK(settled == 1);
    CHECK(users == strings{"first", "after"});
    CHECK(run_co(io, c.get_last_assistant_text()) == std::optional<std::string>("two"));
    CHECK(run_co(io, c.stop()) == 0);
}

TEST_CASE("rpc_client: child killed mid-prompt: every pending call fails with a clear error",
          "[rpc][client]") {
    rpc_env env;
    asio::io_context io;
    rpc_client c(io);
    run_co(io, c.start(coagent_bin(), fa({}, slow_reply), env.vars()));
    run_co(io, c.prompt("hi"));
    // stop the child so the next request stays unanswered, then kill it
    const int pid = c.pid();
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    siginfo_t si{};
    REQUIRE(::waitid(P_PID, static_cast<id_t>(pid), &si, WSTOPPED | WNOWAIT) == 0);
    std::optional<std::string> state_error, settle_error;
    std::optional<rpc_error::reason> state_reason;
    asio::co_spawn(io, c.get_state(), [&](std::exception_ptr e, json::object) {
        state_error = e ? what_of(e) : "no error";
        try {
            if (e) std::rethrow_exception(e);
        } catch (const rpc_error& x) {
            state_reason = x.why();
        } catch (...) {
        }
    });
    asio::co_spawn(io, c.wait_for_settled(),
                   [&](std::exception_ptr e) { settle_error = e ? what_of(e) : "no error"; });
    io.restart();
    io.poll();  // both are now waiting
    CHECK_FALSE(state_error);
    CHECK_FALSE(settle_error);
    c.kill();
    REQUIRE(run_until(io, [&] { return state_error && settle_error; }));
    CHECK(state_reason == rpc_error::reason::process_exited);
    CHECK(state_error->starts_with("coagent was killed by signal 9"));
    CHECK(settle_error->starts_with("coagent was killed by signal 9"));
    CHECK(c.exit_status() == 128 + SIGKILL);
    auto later = expect_rpc_error([&] { run_co(io, c.get_state()); });
    CHECK(later.why() == rpc_error::reason::process_exited);
    CHECK(run_co(io, c.stop()) == 128 + SIGKILL);
}

TEST_CASE(
    "rpc_client: stop() during a backoff: the retry is cancelled, its end event arrives, exit 0",
    "[rpc][client]") {
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    asio::io_context io;
    rpc_client c(io);
    run_co(io, c.start(coagent_bin(), fa({}, two_errors_then_ok), env.vars()));
    std::vector<json::object> events;
    auto sub = c.on_event([&](const json::object& e) { events.push_back(e); });
    run_co(io, c.prompt("hi"));
    REQUIRE(run_until(
        io, [&] { return !events.empty() && events.back().at("type") == "auto_retry_start"; }));
    CHECK(run_co(io, c.stop()) == 0);
    auto b = brief(events);
    CHECK(strings(b.end() - 3, b.end()) ==
          strings{"auto_retry_start{1}", "auto_retry_end{fail,1}", "agent_settled"});
}

TEST_CASE("rpc_client: abort_retry() in a backoff cancels the chain, no further request is sent",
          "[rpc][client][spec-5]") {
    // a 20 s backoff: only abort_retry() can end this chain before the test's timeouts
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    asio::io_context io;
    rpc_client c(io);
    run_co(io, c.start(coagent_bin(), fa({}, two_errors_then_ok), env.vars()));
    std::vector<json::object> events;
    auto sub = c.on_event([&](const json::object& e) { events.push_back(e); });
    run_co(io, c.prompt("hi"));
    REQUIRE(run_until(
        io, [&] { return !events.empty() && events.back().at("type") == "auto_retry_start"; }));
    CHECK(run_co(io, c.get_state()).at("isRetrying") == true);
    run_co(io, c.abort_retry());
    run_co(io, c.wait_for_settled());
    auto b = brief(events);
    CHECK(strings(b.end() - 3, b.end()) ==
          strings{"auto_retry_start{1}", "auto_retry_end{fail,1}", "agent_settled"});
    CHECK(events[events.size() - 2].at("finalError") == "Retry cancelled");
    auto st = run_co(io, c.get_state());
    CHECK(st.at("isRetrying") == false);
    CHECK(st.at("retryAttempt") == 0);
    // one request only: the history holds the user message and the one error
    CHECK(run_co(io, c.get_session_stats()).at("assistantMessages") == 1);
    CHECK(run_co(io, c.stop()) == 0);
}

TEST_CASE("rpc_client: retry_now() ends a backoff, with none it throws the server's error",
          "[rpc][client][retry-now]") {
    rpc_env env(R"({"retry":{"baseDelayMs":20000}})");
    asio::io_context io;
    rpc_client c(io);
    run_co(io, c.start(coagent_bin(), fa({}, two_errors_then_ok), env.vars()));
    auto e = expect_rpc_error([&] { run_co(io, c.retry_now()); });
    CHECK(e.why() == rpc_error::reason::command_failed);
    CHECK(std::string(e.what()) == "Nothing to retry now: no backoff is running");
    std::vector<json::object> events;
    auto sub = c.on_event([&](const json::object& ev) { events.push_back(ev); });
    run_co(io, c.prompt("hi"));
    for (int n = 1; n <= 2; ++n) {
        REQUIRE(run_until(io, [&] {
            return std::count_if(events.begin(), events.end(), [](const json::object& ev) {
                       return ev.at("type") == "auto_retry_start";
                   }) == n;
        }));
        run_co(io, c.retry_now());
    }
    run_co(io, c.wait_for_settled());
    CHECK(brief(events) == coagent::test::two_retries_then_success_events);
    CHECK(run_co(io, c.stop()) == 0);
}

TEST_CASE("rpc_client: garbage, early exit, spawn failure and timeouts are clear errors",
          "[rpc][client]") {
    temp_dir d;
    asio::io_context io;
    SECTION("a line that is not JSON fails the pending call and ends the session") {
        auto fake = write_script(d, "garbage",
                                 "echo '{\"type\":\"ready\"}'\nread line\necho 'this is not "
                                 "json'\nexec cat >/dev/null\n");
        rpc_client c(io);
        run_co(io, c.start(fake));
        auto e = expect_rpc_error([&] { run_co(io, c.get_state()); });
        CHECK(e.why() == rpc_error::reason::protocol);
        CHECK(std::string(e.what()) ==
              "coagent wrote a line that is not a JSON object: this is not json");
        CHECK_FALSE(c.running());
        CHECK(run_co(io, c.stop()) == 128 + SIGKILL);  // the client killed it
    }
    SECTION("a configuration error: the exit code and stderr are in the error") {
        rpc_env env(R"({"retry":{"maxRetries":"three"}})");
        rpc_client c(io);
        auto e = expect_rpc_error([&] {
            run_co(io, c.start(coagent_bin(), {"--provider", "faux", "--no-session"}, env.vars()));
        });
        CHECK(e.why() == rpc_error::reason::process_exited);
        CHECK(e.command() == "start");
        const std::string w = e.what();
        CHECK(w.starts_with("coagent exited with code 2; stderr: "));
        CHECK(w.find("retry.maxRetries") != std::string::npos);
        CHECK(c.get_stderr().find("retry.maxRetries") != std::string::npos);
        CHECK(c.exit_status() == 2);
    }
    SECTION("an executable that does not exist") {
        rpc_client c(io);
        auto e = expect_rpc_error([&] { run_co(io, c.start(d.path / "no-such-coagent")); });
        CHECK(e.why() == rpc_error::reason::spawn_failed);
        CHECK(std::string(e.what()).starts_with("cannot start "));
    }
    SECTION("no response within the request timeout") {
        auto fake = write_script(
            d, "silent", "echo '{\"type\":\"ready\"}'\necho 'starting' >&2\nexec cat >/dev/null\n");
        rpc_client_options o;
        o.request_timeout = 200ms;
        rpc_client c(io, o);
        run_co(io, c.start(fake));
        auto e = expect_rpc_error([&] { run_co(io, c.get_state()); });
        CHECK(e.why() == rpc_error::reason::timeout);
        CHECK(std::string(e.what()) == "get_state: no response from coagent within 200 ms");
        CHECK(c.running());  // a timeout does not end the session
        CHECK(c.get_stderr() == "starting\n");
        CHECK(run_co(io, c.stop()) == 0);  // cat ends at EOF
    }
    SECTION("no ready line within the start timeout") {
        auto fake = write_script(d, "mute", "exec cat >/dev/null\n");
        rpc_client_options o;
        o.start_timeout = 200ms;
        rpc_client c(io, o);
        auto e = expect_rpc_error([&] { run_co(io, c.start(fake)); });
        CHECK(e.why() == rpc_error::reason::timeout);
        CHECK(std::string(e.what()).starts_with(
            "coagent did not write {\"type\":\"ready\"} within 200 ms"));
        CHECK(run_co(io, c.stop()) == 128 + SIGKILL);
    }
}

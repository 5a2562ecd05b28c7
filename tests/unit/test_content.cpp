// Content blocks beyond text and tool calls (issue 24): images in user and toolResult messages,
// thinking in assistant messages — their JSON in the reference's shapes (events, session files,
// history), what a failed attempt's thinking counts for, and compaction's estimate.

#include "support/session_harness.hpp"

#include <coagent/classify/classify.hpp>
#include <coagent/session/compaction.hpp>
#include <coagent/session/history.hpp>
#include <coagent/session/run_policy.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace coagent;
using namespace coagent::test;
namespace fs = std::filesystem;

namespace {

// the reference agent's own lines (pi-coding-agent 0.73.1's message shapes)
constexpr std::string_view reference_user =
    R"({"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}],"timestamp":1})";
constexpr std::string_view reference_assistant =
    R"({"role":"assistant","content":[{"type":"thinking","thinking":"Let me look.","thinkingSignature":"c2lnLzEr+A=="},)"
    R"({"type":"thinking","thinking":"[Reasoning redacted]","thinkingSignature":"EnCrYpTeD","redacted":true},)"
    R"({"type":"thinking","thinking":"no signature"},{"type":"text","text":"A logo."}],)"
    R"("api":"anthropic-messages","provider":"anthropic","model":"claude",)"
    R"("usage":{"input":1,"output":2,"cacheRead":0,"cacheWrite":0,"totalTokens":3,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}},)"
    R"("stopReason":"stop","timestamp":2})";
constexpr std::string_view reference_tool_result =
    R"({"role":"toolResult","content":[{"type":"text","text":"shot"},{"type":"image","data":"R0lGODlh","mimeType":"image/gif"}],)"
    R"("toolCallId":"t1","toolName":"screenshot","isError":false,"timestamp":3})";

std::string written(const message& m) {
    std::string out;
    append_json(out, m);
    return out;
}

struct temp_dir {
    fs::path path;
    temp_dir() {
        path = fs::temp_directory_path() / ("coagent-content-" + random_hex_id(12));
        fs::create_directories(path);
        fs::permissions(path, fs::perms::owner_all);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

}  // namespace

TEST_CASE("issue 24: image and thinking blocks read and write in the reference's shapes",
          "[content]") {
    for (std::string_view line : {reference_user, reference_assistant, reference_tool_result}) {
        const message m = message_from_json(json::parse(line));
        CHECK(written(m) == line);  // byte for byte: both agents read each other's files
    }
    const message u = message_from_json(json::parse(reference_user));
    REQUIRE(u.content.size() == 2);
    const auto* im = std::get_if<image_block>(&u.content[1]);
    REQUIRE(im);
    CHECK(im->data == "iVBORw0KGgo=");
    CHECK(im->mime_type == "image/png");
    CHECK(image_count(u) == 1);
    CHECK(text_of(u) == "what is this?");

    const message a = message_from_json(json::parse(reference_assistant));
    REQUIRE(a.content.size() == 4);
    const auto& signed_block = std::get<thinking_block>(a.content[0]);
    CHECK(signed_block.signature == "c2lnLzEr+A==");
    CHECK_FALSE(signed_block.redacted);
    CHECK(std::get<thinking_block>(a.content[1]).redacted);
    CHECK_FALSE(std::get<thinking_block>(a.content[2]).signature);
    CHECK(text_of(a) == "A logo.");  // thinking is not the reply's text

    // a block without its required fields names the field
    CHECK_THROWS_WITH(message_from_json(json::parse(
                          R"({"role":"user","content":[{"type":"image","data":"x"}]})")),
                      "message field \"mimeType\": expected a string");
    CHECK_THROWS_WITH(
        message_from_json(json::parse(
            R"({"role":"assistant","stopReason":"stop","content":[{"type":"thinking","thinking":"t","thinkingSignature":5}]})")),
        "message field \"thinkingSignature\": expected a string");

    // a prompt with images: the text first, then the images (the reference's order)
    const message p = make_user_message("look", {image_block{"QUJD", "image/webp"}});
    CHECK(written(p).starts_with(
        R"({"role":"user","content":[{"type":"text","text":"look"},{"type":"image","data":"QUJD","mimeType":"image/webp"}],)"));
}

TEST_CASE("usage JSON: zero as the reference writes it, integers exact, costs as numbers",
          "[content]") {
    const auto json_of = [](const token_usage& u) {
        std::string out;
        append_json(out, u);
        return out;
    };
    CHECK(json_of(token_usage{}) ==
          R"({"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,)"
          R"("cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}})");
    token_usage u;
    u.input = 9223372036854775807;
    u.output = -5;
    u.cache_write = 1000000;
    CHECK(
        json_of(u) ==
        R"({"input":9223372036854775807,"output":-5,"cacheRead":0,"cacheWrite":1000000,)"
        R"("totalTokens":0,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}})");
    token_usage c;  // a cost alone is not zero usage
    c.cost.total = 0.5;
    CHECK(json_of(c) ==
          R"({"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,)"
          R"("cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":5E-1}})");
    // and it reads back as it was
    const auto back = json::parse(json_of(c)).as_object();
    CHECK(back.at("cost").as_object().at("total").to_number<double>() == 0.5);
}

TEST_CASE("issue 24: image_error names what is wrong, base64_encode is RFC 4648", "[content]") {
    CHECK_FALSE(image_error(image_block{"iVBORw0KGgo=", "image/png"}));
    CHECK_FALSE(image_error(image_block{"QUJD", "image/jpeg"}));
    CHECK(image_error(image_block{"QUJD", "text/plain"}) ==
          "mimeType \"text/plain\" is not an image type (image/png, image/jpeg, image/gif, "
          "image/webp)");
    CHECK(image_error(image_block{"QUJD", "image/"}).has_value());
    CHECK(image_error(image_block{"", "image/png"}) ==
          "data is empty (base64 of the image expected)");
    CHECK(image_error(image_block{"QU JD", "image/png"}) == "data is not base64 (byte 2)");
    CHECK(image_error(image_block{"QU=D", "image/png"}) == "data is not base64 (byte 2)");
    CHECK(image_error(image_block{"QU===", "image/png"}) == "data is not base64 (byte 2)");
    CHECK(base64_encode("") == "");
    CHECK(base64_encode("f") == "Zg==");
    CHECK(base64_encode("fo") == "Zm8=");
    CHECK(base64_encode("foo") == "Zm9v");
    CHECK(base64_encode("foob") == "Zm9vYg==");
    CHECK(base64_encode(std::string("\xff\xfe\x00", 3)) == "//4A");
}

TEST_CASE("issue 24: a failed attempt's thinking counts in discarded.thinkingChars",
          "[content][retry]") {
    message failed;
    failed.role = message_role::assistant;
    failed.stop = stop_reason::error;
    failed.content.emplace_back(thinking_block{"h\xc3\xa9llo", std::string("s"), false});  // 5
    failed.content.emplace_back(thinking_block{"[Reasoning redacted]", "X", true});  // not shown
    failed.content.emplace_back(text_block{"ab"});
    const discarded_output d = discarded_of(&failed);
    CHECK(d.thinking_chars == 5);
    CHECK(d.text_chars == 2);
    CHECK(d.tool_calls == 0);
}

TEST_CASE("issue 24: a thinking delta is a message_update with a thinking_delta", "[content]") {
    auto m = std::make_shared<message>();
    m->role = message_role::assistant;
    m->content.emplace_back(thinking_block{"hm", std::string(), false});
    const event e = message_update_event{m, "hm", delta_kind::thinking};
    const json::object o = to_json(e);
    CHECK(json::serialize(o.at("assistantMessageEvent")) ==
          R"({"type":"thinking_delta","delta":"hm"})");
    CHECK(json::serialize(o.at("message").at("content")) ==
          R"([{"type":"thinking","thinking":"hm","thinkingSignature":""}])");
}

TEST_CASE("issue 24: compaction's estimate counts an image as 1200 tokens, and thinking",
          "[content][compaction]") {
    CHECK(image_estimate_chars == 4800);
    const message p = make_user_message("abcd", {image_block{std::string(100000, 'A'), "image/png"},
                                                 image_block{"QUJD", "image/png"}});
    CHECK(estimate_tokens(p) == 1 + 2 * 1200);  // whatever the image's size
    message a;
    a.role = message_role::assistant;
    a.content.emplace_back(thinking_block{std::string(40, 't'), std::string(1000, 's'), false});
    a.content.emplace_back(text_block{"abcd"});
    CHECK(estimate_tokens(a) == 11);  // the signature is not counted
}

TEST_CASE("issue 24: a prompt with images reaches the context, its events and the session file",
          "[content][history]") {
    temp_dir dir;
    fs::path file;
    {
        harness h(R"([{"text":"A logo."}])", settings{},
                  [&](session_options& o) { o.session_dir = dir.path; });
        std::vector<image_block> images{image_block{"iVBORw0KGgo=", "image/png"}};
        asio::co_spawn(h.io, h.session->prompt("what is this?", std::move(images)),
                       [&](std::exception_ptr e, prompt_result r) {
                           if (e) h.failure = e;
                           h.result = std::move(r);
                       });
        h.run_ready();
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::succeeded);
        const auto starts = h.of("message_start");
        REQUIRE(!starts.empty());
        CHECK(
            json::serialize(starts[0].at("message").at("content")) ==
            R"([{"type":"text","text":"what is this?"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}])");
        const auto reqs = h.requests();
        REQUIRE(reqs.size() == 1);
        CHECK(reqs[0].messages.at(0).images == 1);
        file = *h.session->history().file();
    }
    // the file holds the image as the reference writes it
    std::ifstream in(file);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    CHECK(all.find(R"({"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"})") !=
          std::string::npos);
    // and a resumed session sends it again
    harness h(R"([{"text":"again"}])", settings{},
              [&](session_options& o) { o.resume_file = file; });
    h.prompt("and now?");
    REQUIRE(h.done());
    const auto reqs = h.requests();
    REQUIRE(reqs.size() == 1);
    REQUIRE(reqs[0].messages.size() == 3);
    CHECK(reqs[0].messages[0].images == 1);
}

TEST_CASE("issue 24: a session file the reference wrote, with images and thinking, loads",
          "[content][history]") {
    temp_dir dir;
    const fs::path file = dir.path / "reference.jsonl";
    {
        std::ofstream out(file);
        out << R"({"type":"session","version":3,"id":"01a2292e-0000","timestamp":"2026-11-30T00:00:00.000Z","cwd":"/tmp"})"
            << "\n"
            << R"({"type":"thinking_level_change","id":"26bb122f","parentId":null,"timestamp":"2026-11-30T00:00:00.000Z","thinkingLevel":"high"})"
            << "\n"
            << R"({"type":"message","id":"d151b2dc","parentId":"26bb122f","timestamp":"2026-11-30T00:00:00.000Z","message":)"
            << reference_user << "}\n"
            << R"({"type":"message","id":"b233e6ac","parentId":"d151b2dc","timestamp":"2026-11-30T00:00:00.000Z","message":)"
            << reference_assistant << "}\n";
    }
    harness h(R"([{"text":"ok"}])", settings{}, [&](session_options& o) { o.resume_file = file; });
    REQUIRE(h.session->messages().size() == 2);
    CHECK(written(*h.session->messages()[0]) == reference_user);
    CHECK(written(*h.session->messages()[1]) == reference_assistant);
}

// ---- §11.33: a request too large with images -------------------------------------------------

namespace {

constexpr std::string_view too_large_step =
    R"({"error":"413 request_too_large: Request exceeds the maximum size","status":413})";

void prompt_with_images(harness& h, std::string text, std::vector<image_block> images) {
    asio::co_spawn(h.io, h.session->prompt(std::move(text), std::move(images)),
                   [&h](std::exception_ptr e, prompt_result r) {
                       if (e) h.failure = e;
                       h.result = std::move(r);
                   });
    h.run_ready();
}

std::vector<image_block> three_images() {
    return {image_block{"QUFB", "image/png"}, image_block{"QkJC", "image/png"},
            image_block{"Q0ND", "image/jpeg"}};
}

}  // namespace

TEST_CASE(
    "issue 24 §11.33: a 413 with images omits all but the newest and tries once more, "
    "also with compaction off",
    "[content][retry]") {
    for (const bool compaction : {true, false}) {
        INFO("compaction.enabled " << compaction);
        temp_dir dir;
        settings cfg;
        cfg.compaction.enabled = compaction;
        harness h("[" + std::string(too_large_step) + R"(,{"text":"three pictures"}])", cfg,
                  [&](session_options& o) { o.session_dir = dir.path; });
        prompt_with_images(h, "compare these", three_images());
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::succeeded);
        CHECK(brief(h.events) == std::vector<std::string>{
                                     "agent_start", "turn_start", "message_start:user",
                                     "message_end:user", "message_start:assistant",
                                     "message_end:assistant:error", "turn_end", "agent_end{final}",
                                     "images_omitted", "agent_start", "turn_start",
                                     "message_start:assistant", "message_end:assistant:stop",
                                     "turn_end", "agent_end{final}", "agent_settled"});
        CHECK(
            h.of("images_omitted").at(0) ==
            obj(R"({"type":"images_omitted","omitted":2,"errorMessage":"413 request_too_large: Request exceeds the maximum size"})"));
        // no retry chain, no compaction: the omission is its own step
        CHECK(h.of("auto_retry_start").empty());
        CHECK(h.of("compaction_start").empty());
        const auto reqs = h.requests();
        REQUIRE(reqs.size() == 2);
        CHECK(reqs[0].messages.at(0).images == 3);
        REQUIRE(reqs[1].messages.size() == 1);  // the failed reply is not sent
        CHECK(reqs[1].messages[0].images == 1);
        CHECK(reqs[1].messages[0].text == std::string("compare these") +
                                              std::string(omitted_image_text) +
                                              std::string(omitted_image_text));
        // the context: the newest image kept, the older ones replaced in order
        CHECK(json::serialize(to_json(*h.session->messages().at(0)).at("content")) ==
              R"([{"type":"text","text":"compare these"},)"
              R"({"type":"text","text":"[image omitted: the request was too large]"},)"
              R"({"type":"text","text":"[image omitted: the request was too large]"},)"
              R"({"type":"image","data":"Q0ND","mimeType":"image/jpeg"}])");
        // the session file keeps the originals
        std::ifstream in(*h.session->history().file());
        std::string all((std::istreambuf_iterator<char>(in)), {});
        CHECK(all.find(R"({"type":"image","data":"QUFB","mimeType":"image/png"})") !=
              std::string::npos);
        CHECK(all.find("[image omitted") == std::string::npos);
    }
}

TEST_CASE("issue 24 §11.33: once per prompt, images in older messages, and not for one image",
          "[content][retry]") {
    SECTION("a second 413 in the same prompt goes to the compaction path (off: the error)") {
        settings cfg;
        cfg.compaction.enabled = false;
        harness h("[" + std::string(too_large_step) + "," + std::string(too_large_step) +
                      R"(,{"text":"unused"}])",
                  cfg);
        prompt_with_images(h, "compare", three_images());
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::failed);
        CHECK(h.of("images_omitted").size() == 1);
        CHECK(h.requests().size() == 2);
        // the next prompt may omit again (the two images left: the older of them)
        h.result.reset();
        h.events.clear();
        h.prompt("again");
        REQUIRE(h.done());
        CHECK(h.of("images_omitted").empty());  // one image left in the context: nothing to do
        CHECK(h.requests().size() == 3);
    }
    SECTION("one image: nothing to omit, the overflow path as before") {
        harness h("[" + std::string(too_large_step) + R"(,{"text":"summary"},{"text":"ok"}])");
        prompt_with_images(h, "look", {image_block{"QUFB", "image/png"}});
        REQUIRE(h.done());
        CHECK(h.of("images_omitted").empty());
        CHECK(h.of("compaction_start").size() == 1);
    }
    SECTION("the images of earlier messages count; a 413 without images is the overflow path") {
        harness h(R"([{"text":"first"},)" + std::string(too_large_step) + R"(,{"text":"ok"}])");
        prompt_with_images(h, "one", {image_block{"QUFB", "image/png"}});
        REQUIRE(h.done());
        h.result.reset();
        prompt_with_images(h, "two", {image_block{"QkJC", "image/png"}});
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::succeeded);
        CHECK(h.of("images_omitted").at(0).at("omitted") == 1);
        const auto reqs = h.requests();
        REQUIRE(reqs.size() == 3);
        CHECK(reqs[2].messages.at(0).images == 0);  // the older prompt's image
        CHECK(reqs[2].messages.at(2).images == 1);  // the newest stays
    }
    SECTION("a 400 overflow with images is not this rule") {
        harness h(
            R"([{"error":"400 prompt is too long: 213462 tokens > 200000 maximum","status":400},{"text":"summary"},{"text":"ok"}])");
        prompt_with_images(h, "look", three_images());
        REQUIRE(h.done());
        CHECK(h.of("images_omitted").empty());
        CHECK(h.of("compaction_start").size() == 1);
    }
}

namespace {
struct type_recorder final : event_sink {
    std::vector<std::string> seen;
    void operator()(event e) override { seen.emplace_back(event_type(e)); }
};
}  // namespace

TEST_CASE("issue 24 §11.33: the run policy omits images once per prompt, then compacts",
          "[content][retry][run-policy]") {
    auto failed = std::make_shared<message>();
    failed->role = message_role::assistant;
    failed->stop = stop_reason::error;
    failed->error_message = "413 request_too_large: Request exceeds the maximum size";
    failed->error_status = 413;
    const model_info model{"p", "m", "anthropic-messages", 200000, 8192};
    const auto run_ended = [&](std::int64_t images) {
        run_end in;
        in.added = {failed};
        in.last = failed;
        in.cls = classify(*failed, model, 0);
        in.images = images;
        return in;
    };
    CHECK(is_request_too_large(*failed));
    settings s;
    run_policy p;
    type_recorder out;
    REQUIRE(p.begin_prompt().what == run_action::kind::run);
    CHECK(p.on_run_end(run_ended(3), s, out).what == run_action::kind::omit_images);
    CHECK(out.seen == std::vector<std::string>{"agent_end", "images_omitted"});
    // the same prompt: images again (a steer or a tool result brought some), no second omission
    run_action a = p.on_run_end(run_ended(2), s, out);
    CHECK(a.what == run_action::kind::compact);
    CHECK(a.reason == compaction_reason::overflow);
    // the next prompt may omit again
    CHECK(p.on_compaction_done(false, false).what == run_action::kind::settle);
    REQUIRE(p.begin_prompt().what == run_action::kind::run);
    CHECK(p.on_run_end(run_ended(2), s, out).what == run_action::kind::omit_images);
    // what counts as too large
    message m = *failed;
    m.error_status = 400;
    CHECK(is_request_too_large(m));  // the text says request_too_large
    m.error_message = "400 prompt is too long";
    CHECK_FALSE(is_request_too_large(m));
    m.error_type = "request_too_large";
    CHECK(is_request_too_large(m));
    m.error_type.clear();
    m.error_status = 413;
    CHECK(is_request_too_large(m));
    m.stop = stop_reason::aborted;
    CHECK_FALSE(is_request_too_large(m));
}

TEST_CASE("issue 24: a thinking level change is a thinking_level_change entry, restored on resume",
          "[content][history]") {
    temp_dir dir;
    fs::path file;
    {
        harness h(R"([{"text":"ok"}])", settings{},
                  [&](session_options& o) { o.session_dir = dir.path; });
        h.session->set_thinking_level(thinking_level::high);
        h.session->set_thinking_level(thinking_level::high);  // no change: no entry
        h.prompt("hi");
        REQUIRE(h.done());
        file = *h.session->history().file();
    }
    std::ifstream in(file);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    CHECK(all.find(R"("type":"thinking_level_change")") != std::string::npos);
    CHECK(all.find(R"("thinkingLevel":"high")") != std::string::npos);
    CHECK(all.find(R"("type":"thinking_level_change")") ==
          all.rfind(R"("type":"thinking_level_change")"));
    harness h(R"([{"text":"ok"}])", settings{}, [&](session_options& o) { o.resume_file = file; });
    CHECK(h.session->configured_thinking_level() == thinking_level::high);
}

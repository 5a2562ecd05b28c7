// Compaction (issue 6): overflow recovery with the model summariser, threshold and manual
// compaction, abort, retry during the summary request, and resume from the session file.

#include "support/session_harness.hpp"

#include <coagent/session/compaction.hpp>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace coagent;
using namespace coagent::test;
using strings = std::vector<std::string>;
namespace fs = std::filesystem;

namespace {

settings keep(std::int64_t tokens) {
    settings s;
    s.compaction.keep_recent_tokens = tokens;
    return s;
}

strings texts(const faux_request& r) {
    strings out;
    for (const auto& m : r.messages) out.push_back(m.role + ":" + m.text);
    return out;
}

const char* overflow_script =
    R"([{"text":"first answer"},{"error":"400 prompt is too long: 213462 tokens > 200000 maximum","status":400},{"text":"SUM"},{"text":"second answer"}])";

struct temp_dir {
    fs::path path = fs::temp_directory_path() / ("coagent-compaction-" + random_hex_id(12));
    temp_dir() {
        fs::create_directories(path);
        fs::permissions(path, fs::perms::owner_all);  // private: no readable-directory warning
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

}  // namespace

TEST_CASE(
    "plan_compaction keeps recent messages, cuts at a user message, carries a previous summary",
    "[compaction][plan]") {
    auto user = [](std::string t) {
        return std::make_shared<message>(make_user_message(std::move(t)));
    };
    auto reply = [](std::string t) {
        auto m = std::make_shared<message>();
        m->role = message_role::assistant;
        m->content.push_back(text_block{std::move(t)});
        return message_ptr(m);
    };
    std::vector<message_ptr> ctx{user("aaaaaaaa"), reply("bbbbbbbb"), user("cccc"), reply("dddd")};
    auto p = plan_compaction(ctx, 1);  // only "dddd" fits, but a reply cannot start the kept part
    REQUIRE(p);
    CHECK(p->first_kept == 4);
    CHECK(p->to_summarize.size() == 4);
    p = plan_compaction(ctx, 3);  // "cccc" + "dddd" = 2 tokens fit
    REQUIRE(p);
    CHECK(p->first_kept == 2);
    CHECK(p->to_summarize.size() == 2);
    CHECK(p->tokens_before == 6);
    CHECK_FALSE(plan_compaction(ctx, 1000));  // all fits: nothing to summarise

    std::vector<message_ptr> again{user(summary_message_text("OLD")), user("eeee"), reply("ffff"),
                                   user("gggg")};
    p = plan_compaction(again, 1);
    REQUIRE(p);
    CHECK(p->previous_summary == "OLD");
    CHECK(p->first_kept == 3);
    CHECK(p->to_summarize.size() == 2);  // the old summary is not summarised as a message
    auto req =
        model_summarizer::build_request(compaction_request{"manual", *p, "keep names", {}, {}});
    REQUIRE(req.messages.size() == 1);
    const auto body = text_of(*req.messages[0]);
    CHECK(body.find("OLD") != std::string::npos);
    CHECK(body.find("[user] eeee") != std::string::npos);
    CHECK(body.find("[assistant] ffff") != std::string::npos);
    CHECK(body.find("keep names") != std::string::npos);
}

TEST_CASE("threshold test uses usage against window minus reserve", "[compaction][plan]") {
    message r;
    r.role = message_role::assistant;
    r.usage.total_tokens = 111616;
    model_info m{"p", "m", "a", 128000, 0};
    compaction_settings s;
    CHECK_FALSE(over_threshold(r, m, s));  // 128000 - 16384 = 111616: not above
    r.usage.total_tokens = 111617;
    CHECK(over_threshold(r, m, s));
    m.context_window = 0;
    CHECK_FALSE(over_threshold(r, m, s));  // unknown window
}

TEST_CASE("overflow -> summary request -> compacted context -> the turn continues once",
          "[compaction][overflow]") {
    harness h(overflow_script, keep(3));
    h.prompt("first question");
    REQUIRE(h.done());
    h.events.clear();
    h.result.reset();
    h.prompt("second");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(brief(h.events) ==
          strings{"agent_start", "turn_start", "message_start:user", "message_end:user",
                  "message_start:assistant", "message_end:assistant:error", "turn_end",
                  "agent_end{final}", "compaction_start", "compaction_end", "agent_start",
                  "turn_start", "message_start:assistant", "message_end:assistant:stop", "turn_end",
                  "agent_end{final}", "agent_settled"});
    CHECK(h.of("compaction_start")[0] == obj(R"({"type":"compaction_start","reason":"overflow"})"));
    auto end = h.of("compaction_end")[0];
    CHECK(end.at("willRetry") == true);
    CHECK(end.at("aborted") == false);
    CHECK(end.at("result").at("summary") == "SUM");
    CHECK(end.at("result").at("firstKeptEntryId").is_string());
    CHECK(h.of("auto_retry_start").empty());

    auto reqs = h.requests();
    REQUIRE(reqs.size() == 4);
    // the summary request carries the dropped part, not the errored reply
    REQUIRE(reqs[2].messages.size() == 1);
    CHECK(reqs[2].messages[0].text.find("[user] first question") != std::string::npos);
    CHECK(reqs[2].messages[0].text.find("[assistant] first answer") != std::string::npos);
    CHECK(reqs[2].messages[0].text.find("prompt is too long") == std::string::npos);
    // the continued request starts with the summary, then the kept messages
    CHECK(texts(reqs[3]) ==
          strings{"user:The conversation so far, summarized:\nSUM", "user:second"});
    // the compaction entry is in the history
    bool found = false;
    for (const auto& e : h.session->history().entries())
        if (e.type == "compaction") {
            found = true;
            CHECK(e.raw.at("summary") == "SUM");
            CHECK(e.raw.at("tokensBefore").as_int64() > 0);
        }
    CHECK(found);
}

TEST_CASE("a second overflow in the same prompt ends it with the recovery failure",
          "[compaction][overflow]") {
    harness h(
        R"([{"error":"400 prompt is too long","status":400},{"text":"SUM"},{"error":"400 prompt is too long","status":400}])",
        keep(0));
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::failed);
    auto ends = h.of("compaction_end");
    REQUIRE(ends.size() == 2);
    CHECK(ends[0].at("willRetry") == true);
    CHECK(
        ends[1] ==
        obj(R"({"type":"compaction_end","reason":"overflow","aborted":false,"willRetry":false,"errorMessage":"Context overflow recovery failed after one compact-and-retry attempt. Try reducing the context (start a new session) or switching to a model with a larger context window."})"));
    CHECK(h.of("compaction_start").size() == 1);
    CHECK(h.requests().size() == 3);
}

TEST_CASE("threshold compaction after a successful turn, without continuing",
          "[compaction][threshold]") {
    harness h(R"([{"text":"big reply","usage":{"input":120000,"output":10}},{"text":"SUM"}])",
              keep(0));
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    auto b = brief(h.events);
    CHECK(strings(b.end() - 4, b.end()) ==
          strings{"agent_end{final}", "compaction_start", "compaction_end", "agent_settled"});
    CHECK(h.of("compaction_start")[0].at("reason") == "threshold");
    CHECK(h.of("compaction_end")[0].at("willRetry") == false);
    CHECK(h.requests().size() == 2);
    REQUIRE(h.session->messages().size() == 1);
    CHECK(text_of(*h.session->messages()[0]) == "The conversation so far, summarized:\nSUM");
}

TEST_CASE("compaction.enabled false: no threshold compaction, overflow ends with its error",
          "[compaction]") {
    settings s = keep(0);
    s.compaction.enabled = false;
    harness h(
        R"([{"text":"big reply","usage":{"input":120000,"output":10}},{"error":"400 prompt is too long","status":400}])",
        s);
    h.prompt("hi");
    REQUIRE(h.done());
    h.prompt("again");
    CHECK(h.of("compaction_start").empty());
    CHECK(h.of("compaction_end").empty());
    CHECK(h.result->outcome == prompt_result::status::failed);
}

TEST_CASE("silent overflow (usage above the window) compacts without continuing",
          "[compaction][overflow]") {
    harness h(R"([{"text":"answer","usage":{"input":130000,"output":10}},{"text":"SUM"}])",
              keep(0));
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(h.of("compaction_start")[0].at("reason") == "overflow");
    CHECK(h.of("compaction_end")[0].at("willRetry") == false);
    CHECK(h.requests().size() == 2);
    CHECK(h.result->outcome == prompt_result::status::succeeded);
}

TEST_CASE("abort during compaction stops it cleanly: aborted, context unchanged, nothing persisted",
          "[compaction][abort]") {
    harness h(R"([{"error":"400 prompt is too long","status":400},{"text":"SUM","delayMs":5000}])",
              keep(0));
    h.prompt("hi");
    CHECK(h.session->is_compacting());
    const auto before = h.session->messages();
    h.advance(std::chrono::milliseconds(10));
    h.session->abort();
    h.run_ready();
    REQUIRE(h.done());
    CHECK_FALSE(h.session->is_compacting());
    CHECK(h.result->outcome == prompt_result::status::aborted);
    auto end = h.of("compaction_end");
    REQUIRE(end.size() == 1);
    CHECK(end[0].at("aborted") == true);
    CHECK(end[0].at("willRetry") == false);
    CHECK(h.session->messages() == before);
    for (const auto& e : h.session->history().entries()) CHECK(e.type != "compaction");
}

TEST_CASE("a retryable error during the summary request follows the retry policy",
          "[compaction][retry]") {
    harness h(
        R"([{"error":"400 prompt is too long","status":400},{"error":"503 overloaded","status":503},{"text":"SUM"},{"text":"done"}])",
        keep(0));
    h.prompt("hi");
    CHECK(h.of("auto_retry_start").size() == 1);
    CHECK(h.of("auto_retry_start")[0].at("delayMs") == 2000);
    CHECK_FALSE(h.done());
    h.advance(std::chrono::milliseconds(2000));
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    auto b = brief(h.events);
    CHECK(strings(b.begin() + 8, b.begin() + 12) ==
          strings{"compaction_start", "auto_retry_start{1}", "auto_retry_end{ok,1}",
                  "compaction_end"});
    CHECK(h.requests().size() == 4);
}

TEST_CASE("abort_retry during the summary request's backoff fails the compaction, not an abort",
          "[compaction][retry]") {
    harness h(
        R"([{"error":"400 prompt is too long","status":400},{"error":"503 overloaded","status":503},{"text":"SUM"}])",
        keep(0));
    h.prompt("hi");
    REQUIRE(h.session->is_compacting());
    REQUIRE(h.of("auto_retry_start").size() == 1);
    h.session->abort_retry();
    h.run_ready();
    REQUIRE(h.done());
    CHECK(h.of("auto_retry_end").at(0).at("finalError") == "Retry cancelled");
    auto end = h.of("compaction_end");
    REQUIRE(end.size() == 1);
    CHECK(end[0].at("aborted") == false);
    CHECK(end[0].at("errorMessage") == "Compaction failed: Retry cancelled");
    CHECK(h.result->outcome == prompt_result::status::failed);
    CHECK(h.result->error == "400 prompt is too long");
    CHECK(h.requests().size() == 2);
}

TEST_CASE("manual compaction: only while idle, with custom instructions", "[compaction][manual]") {
    harness h(R"([{"text":"first answer"},{"text":"SUM"}])", keep(0));
    h.prompt("first question");
    REQUIRE(h.done());
    std::optional<compact_result> r;
    asio::co_spawn(h.io, h.session->compact("mention the answer"),
                   [&](std::exception_ptr e, compact_result x) {
                       if (e) std::rethrow_exception(e);
                       r = x;
                   });
    h.run_ready();
    REQUIRE(r);
    CHECK(r->ok);
    CHECK(h.of("compaction_start").back().at("reason") == "manual");
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 2);
    CHECK(reqs[1].messages[0].text.find("mention the answer") != std::string::npos);
    REQUIRE(h.session->messages().size() == 1);
}

namespace {
std::optional<compact_result>& start_compact(harness& h, std::optional<compact_result>& r) {
    asio::co_spawn(h.io, h.session->compact(), [&r](std::exception_ptr e, compact_result x) {
        if (e) std::rethrow_exception(e);
        r = x;
    });
    h.run_ready();
    return r;
}
}  // namespace

TEST_CASE("manual compaction: a followUp and a steer queued during it run after it, then settle",
          "[compaction][manual][issue-15]") {
    harness h(
        R"([{"text":"first answer"},{"text":"SUM","delayMs":100},{"text":"after the compaction"}])",
        keep(0));
    h.prompt("first question");
    REQUIRE(h.done());
    std::optional<compact_result> r;
    start_compact(h, r);
    REQUIRE(h.session->is_compacting());
    std::optional<prompt_result> follow, steered;
    h.prompt_into("queued follow-up", streaming_behavior::follow_up, follow);
    h.prompt_into("queued steer", streaming_behavior::steer, steered);
    CHECK(h.session->pending_message_count() == 2);
    const auto before = h.events.size();
    h.advance(std::chrono::milliseconds(100));
    REQUIRE(r);
    CHECK(r->ok);
    REQUIRE(follow);
    REQUIRE(steered);
    CHECK(follow->outcome == prompt_result::status::succeeded);
    CHECK(steered->outcome == prompt_result::status::succeeded);
    REQUIRE(follow->last_assistant);
    CHECK(text_of(*follow->last_assistant) == "after the compaction");
    CHECK(h.session->pending_message_count() == 0);
    CHECK_FALSE(h.session->is_busy());
    // exactly as after a prompt: the queued messages run in one run, then agent_settled
    const auto b = brief(std::vector<json::object>(h.events.begin() + before, h.events.end()));
    CHECK(b == strings{"compaction_end", "agent_start", "turn_start", "message_start:user",
                       "message_end:user", "message_start:user", "message_end:user",
                       "message_start:assistant", "message_end:assistant:stop", "turn_end",
                       "agent_end{final}", "agent_settled"});
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 3);
    CHECK(texts(reqs[2]) == strings{"user:The conversation so far, summarized:\nSUM",
                                    "user:queued follow-up", "user:queued steer"});
}

TEST_CASE("manual compaction: abort() drops the prompts queued during it, and they settle",
          "[compaction][manual][issue-15]") {
    harness h(R"([{"text":"first answer"},{"text":"SUM","delayMs":100},{"text":"spare"}])",
              keep(0));
    h.prompt("first question");
    REQUIRE(h.done());
    std::optional<compact_result> r;
    start_compact(h, r);
    std::optional<prompt_result> follow;
    h.prompt_into("queued follow-up", streaming_behavior::follow_up, follow);
    const auto before = h.events.size();
    h.session->abort();
    h.run_ready();
    REQUIRE(r);
    CHECK_FALSE(r->ok);
    REQUIRE(follow);
    CHECK(follow->outcome == prompt_result::status::aborted);
    CHECK(follow->error == "Aborted before it ran");
    CHECK(h.session->pending_message_count() == 0);
    CHECK_FALSE(h.session->is_busy());
    const auto b = brief(std::vector<json::object>(h.events.begin() + before, h.events.end()));
    CHECK(b == strings{"compaction_end", "agent_settled"});
    CHECK(h.requests().size() == 2);
}

TEST_CASE("manual compaction with nothing queued emits no agent_settled",
          "[compaction][manual][issue-15]") {
    harness h(R"([{"text":"first answer"},{"text":"SUM"}])", keep(0));
    h.prompt("first question");
    std::optional<compact_result> r;
    const auto before = h.events.size();
    start_compact(h, r);
    REQUIRE(r);
    const auto b = brief(std::vector<json::object>(h.events.begin() + before, h.events.end()));
    CHECK(b == strings{"compaction_start", "compaction_end"});
}

TEST_CASE("resume after a restart reproduces the same context, errored entries stay in the file",
          "[compaction][resume]") {
    temp_dir dir;
    fs::path file;
    strings context_before;
    {
        harness h(overflow_script, keep(3), [&](session_options& o) { o.session_dir = dir.path; });
        h.prompt("first question");
        h.prompt("second");
        REQUIRE(h.done());
        file = *h.session->history().file();
        for (const auto& m : h.session->messages())
            if (!is_failed_assistant(*m))
                context_before.push_back(std::string(to_string(m->role)) + ":" + text_of(*m));
    }
    {
        std::ifstream in(file);
        std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        CHECK(all.find(R"("stopReason":"error")") != std::string::npos);
        CHECK(all.find(R"("type":"compaction")") != std::string::npos);
    }
    harness h(R"([{"text":"third answer"}])", settings{},
              [&](session_options& o) { o.resume_file = file; });
    h.prompt("third");
    REQUIRE(h.done());
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 1);
    strings expected = context_before;
    expected.push_back("user:third");
    CHECK(texts(reqs[0]) == expected);
    CHECK(expected.front() == "user:The conversation so far, summarized:\nSUM");
}

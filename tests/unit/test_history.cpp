// Session history (JSONL): entries with id/parentId, errors kept, torn last line tolerated.

#include "support/session_harness.hpp"

#include <coagent/session/config_file.hpp>
#include <coagent/session/history.hpp>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

#include <array>
#include <fstream>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace coagent;
using namespace coagent::test;
namespace fs = std::filesystem;
using strings = std::vector<std::string>;

namespace {

struct temp_dir {
    fs::path path;
    temp_dir() {
        path = fs::temp_directory_path() / ("coagent-test-" + random_hex_id(12));
        fs::create_directories(path);
        fs::permissions(path, fs::perms::owner_all);  // private: no readable-directory warning
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::vector<std::string> read_lines(const fs::path& p) {
    std::ifstream in(p);
    std::vector<std::string> out;
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

}  // namespace

TEST_CASE("a retried prompt writes header + every message, errors included, as a parent chain",
          "[history]") {
    temp_dir dir;
    harness h(R"([{"error":"503 Service Unavailable","status":503,"times":2},{"text":"Hello"}])",
              settings{}, [&](session_options& o) {
                  o.session_dir = dir.path;
                  o.cwd = "/somewhere";
              });
    // the chain's retry_end entry is in the file before its auto_retry_end is published
    std::vector<std::string> at_end;
    auto peek = h.session->subscribe([&](const event& e) {
        if (std::holds_alternative<auto_retry_end_event>(e))
            at_end.push_back(read_lines(*h.session->history().file()).back());
    });
    h.prompt("hi");
    h.advance(std::chrono::milliseconds(6000));
    REQUIRE(h.done());
    peek.reset();
    REQUIRE(h.session->history().file());
    auto lines = read_lines(*h.session->history().file());
    REQUIRE(lines.size() == 6);
    REQUIRE(at_end.size() == 1);
    CHECK(at_end[0] == lines[5]);
    {
        auto end = json::parse(lines.back()).as_object();
        CHECK(end.at("type") == "retry_end");
        CHECK(end.at("parentId").as_string() == json::parse(lines[4]).at("id").as_string());
        end.erase("id");
        end.erase("parentId");
        end.erase("timestamp");
        CHECK(end == obj(R"({"type":"retry_end","success":true,"attempt":2})"));
        lines.pop_back();
    }
    auto header = json::parse(lines[0]).as_object();
    CHECK(header.at("type") == "session");
    CHECK(header.at("version") == 3);
    CHECK(header.at("cwd") == "/somewhere");
    CHECK(header.at("id").as_string() == h.session->session_id());
    std::string parent;
    std::vector<std::string> stops;
    for (std::size_t i = 1; i < lines.size(); ++i) {
        auto e = json::parse(lines[i]).as_object();
        CHECK(e.at("type") == "message");
        CHECK(e.at("id").as_string().size() == 8);
        if (i == 1)
            CHECK(e.at("parentId").is_null());
        else
            CHECK(e.at("parentId").as_string() == parent);
        parent = e.at("id").as_string();
        const auto& m = e.at("message").as_object();
        if (m.at("role") == "assistant") stops.emplace_back(m.at("stopReason").as_string());
    }
    CHECK(stops == std::vector<std::string>{"error", "error", "stop"});

    // load it back: the whole history, errors included (after the session ended: a session
    // file has one writer at a time, issue 17 item 2)
    const fs::path file = *h.session->history().file();
    const std::string id = h.session->session_id();
    h.sub.reset();  // a subscription must not outlive its session
    h.session.reset();
    auto loaded = session_history::load(file);
    CHECK(loaded.warnings.empty());  // retry_end is a known entry type
    CHECK(loaded.history.messages().size() == 4);
    CHECK(loaded.history.context().size() == 4);  // it takes no part in the context
    CHECK(loaded.history.entries().back().type == "retry_end");
    CHECK(loaded.history.session_id() == id);
}

TEST_CASE("an exhausted chain leaves a retry_end entry with its finalError (issue 21)",
          "[history][issue-21]") {
    temp_dir dir;
    settings cfg;
    cfg.retry.max_retries = 1;
    harness h(R"([{"error":"503 Service Unavailable","status":503,"times":2}])", cfg,
              [&](session_options& o) { o.session_dir = dir.path; });
    h.prompt("hi");
    h.advance(std::chrono::milliseconds(2000));
    REQUIRE(h.done());
    auto lines = read_lines(*h.session->history().file());
    auto end = json::parse(lines.back()).as_object();
    end.erase("id");
    end.erase("parentId");
    end.erase("timestamp");
    CHECK(
        end ==
        obj(R"({"type":"retry_end","success":false,"attempt":1,"finalError":"503 Service Unavailable"})"));
}

TEST_CASE("a torn last line is skipped with a warning, and appends continue on a new line",
          "[history]") {
    temp_dir dir;
    fs::path file;
    {
        auto h = session_history::create_file(dir.path, "/cwd");
        auto m = std::make_shared<message>(make_user_message("one"));
        REQUIRE_FALSE(h.append_message(m));
        file = *h.file();
    }
    {
        std::ofstream out(file, std::ios::app);
        out << R"({"type":"message","id":"abcd1234","parentId":null,"message":{"role":"us)";
    }
    auto loaded = session_history::load(file);
    REQUIRE(loaded.warnings.size() == 1);
    CHECK(loaded.warnings[0].find("torn last line") != std::string::npos);
    CHECK(loaded.history.messages().size() == 1);
    auto m2 = std::make_shared<message>(make_user_message("two"));
    REQUIRE_FALSE(loaded.history.append_message(m2));
    // a session file has one writer at a time (issue 17 item 2): release it before a reload
    loaded.history = session_history();
    auto again = session_history::load(file);
    CHECK(again.history.messages().size() == 2);
}

namespace {
// a session file a crash left inside a tool call: the user's prompt and the assistant's toolUse
// reply (two calls), no result
fs::path crashed_in_tool(const fs::path& dir) {
    auto file = dir / "crashed.jsonl";
    std::ofstream out(file);
    out << R"({"type":"session","version":3,"id":"c1","timestamp":"t","cwd":"/"})"
        << "\n";
    message a;
    a.role = message_role::assistant;
    a.stop = stop_reason::tool_use;
    a.provider = a.api = a.model = "faux";
    a.content.emplace_back(tool_call_block{"call_1", "side_effect", json::object{{"n", 1}}});
    a.content.emplace_back(tool_call_block{"call_2", "lookup", json::object{{"q", "x"}}});
    json::object user{{"type", "message"},
                      {"id", "00000001"},
                      {"parentId", nullptr},
                      {"message", to_json(make_user_message("do it"))}};
    json::object reply{
        {"type", "message"}, {"id", "00000002"}, {"parentId", "00000001"}, {"message", to_json(a)}};
    out << json::serialize(user) << "\n" << json::serialize(reply) << "\n";
    return file;
}
}  // namespace

TEST_CASE(
    "resume after a crash inside a tool call: interrupted results before the next "
    "request, the tool not run again unless idempotent (issue 21)",
    "[history][tools][issue-21]") {
    temp_dir dir;
    const fs::path file = crashed_in_tool(dir.path);
    const std::string interrupted_1 =
        "Tool side_effect was interrupted before it finished; it was not run again.";
    int side_effects = 0, lookups = 0;
    const auto count = [](int& n, std::string text) {
        return [&n, text](json::object) -> boost::asio::awaitable<tool_output> {
            ++n;
            co_return tool_output{text, false};
        };
    };
    const bool lookup_idempotent = GENERATE(false, true);
    harness h(R"([{"text":"resumed"}])", settings{},
              [&](session_options& o) { o.resume_file = file; });
    h.session->register_tool({"side_effect", "", {}}, count(side_effects, "did it"));
    h.session->register_tool({"lookup", "", {}}, count(lookups, "found"),
                             tool_options{lookup_idempotent});
    h.prompt("and now?");
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(side_effects == 0);
    CHECK(lookups == (lookup_idempotent ? 1 : 0));
    // the provider never gets a dangling tool call: both have results, before the new prompt
    REQUIRE(h.requests().size() == 1);
    const auto sent = h.requests()[0].messages;
    REQUIRE(sent.size() == 5);
    CHECK(sent[0].role == "user");
    CHECK(sent[1].role == "assistant");
    CHECK(sent[2].role == "toolResult");
    CHECK(sent[2].text == interrupted_1);
    CHECK(sent[3].role == "toolResult");
    CHECK(sent[3].text ==
          (lookup_idempotent
               ? "found"
               : "Tool lookup was interrupted before it finished; it was not run again."));
    CHECK(sent[4].role == "user");
    CHECK(sent[4].text == "and now?");
    strings expected{"agent_start", "turn_start", "message_start:toolResult",
                     "message_end:toolResult"};
    if (lookup_idempotent) {
        expected.insert(expected.end(), {"tool_execution_start", "tool_execution_end"});
    }
    expected.insert(expected.end(),
                    {"message_start:toolResult", "message_end:toolResult", "message_start:user",
                     "message_end:user", "message_start:assistant", "message_end:assistant:stop",
                     "turn_end", "agent_end{final}", "agent_settled"});
    CHECK(brief(h.events) == expected);
    // the results are in the file: a second resume has nothing to repair
    const auto* first = h.session->messages()[2].get();
    CHECK(first->is_error);
    CHECK(first->tool_call_id == "call_1");
    h.sub.reset();
    h.session.reset();
    auto again = session_history::load(file);
    CHECK(plan_tool_call_repair(again.history.context(), nullptr).empty());
    CHECK(again.history.context().size() == 6);  // user, toolUse, 2 results, user, reply
}

TEST_CASE(
    "a manual compaction right after a crash inside a tool call sends no dangling tool "
    "call either (issue 21)",
    "[history][tools][issue-21]") {
    temp_dir dir;
    const fs::path file = crashed_in_tool(dir.path);
    settings cfg;
    cfg.compaction.keep_recent_tokens = 0;
    harness h(R"([{"text":"the summary"}])", cfg,
              [&](session_options& o) { o.resume_file = file; });
    std::optional<compact_result> done;
    boost::asio::co_spawn(h.io, h.session->compact(), [&](std::exception_ptr e, compact_result r) {
        if (e) std::rethrow_exception(e);
        done = std::move(r);
    });
    h.run_ready();
    REQUIRE(done);
    CHECK(done->ok);
    REQUIRE(h.requests().size() == 1);
    const auto summarised = h.requests()[0].messages;
    std::string roles;
    for (const auto& m : summarised) roles += m.role + " ";
    INFO(roles);
    bool results = false;
    for (const auto& m : summarised)
        if (m.text.find("Tool side_effect was interrupted") != std::string::npos) results = true;
    CHECK(results);
}

TEST_CASE("an unknown entry type loads with a warning, a non-session file is refused",
          "[history]") {
    temp_dir dir;
    auto file = dir.path / "s.jsonl";
    {
        std::ofstream out(file);
        out << R"({"type":"session","version":3,"id":"x1","timestamp":"t","cwd":"/"})"
               "\n"
            << R"({"type":"brand_new","id":"00000001","parentId":null})"
               "\n";
    }
    auto loaded = session_history::load(file);
    REQUIRE(loaded.warnings.size() == 1);
    CHECK(loaded.warnings[0].find("unknown entry type \"brand_new\"") != std::string::npos);
    CHECK(loaded.history.entries().size() == 1);

    auto bad = dir.path / "notes.txt";
    {
        std::ofstream out(bad);
        out << "hello\n";
    }
    CHECK_THROWS_WITH(session_history::load(bad), Catch::Contains("not a session file"));
    CHECK_THROWS_WITH(session_history::load(dir.path / "missing.jsonl"),
                      Catch::Contains("cannot open"));
}

TEST_CASE("resume: a loaded session's context is rebuilt, failed replies are never sent",
          "[history]") {
    temp_dir dir;
    fs::path file;
    {
        harness h(R"([{"error":"400 bad","status":400},{"text":"second answer"}])", settings{},
                  [&](session_options& o) { o.session_dir = dir.path; });
        h.prompt("first");
        REQUIRE(h.done());
        file = *h.session->history().file();
    }
    harness h(R"([{"text":"third"}])", settings{},
              [&](session_options& o) { o.resume_file = file; });
    CHECK(h.session->messages().size() == 2);  // user + the persisted error
    h.prompt("again");
    REQUIRE(h.done());
    auto reqs = h.requests();
    REQUIRE(reqs.size() == 1);
    REQUIRE(reqs[0].messages.size() == 2);
    CHECK(reqs[0].messages[0].text == "first");
    CHECK(reqs[0].messages[1].text == "again");
}

TEST_CASE("a session name is a session_info entry and survives a resume", "[history]") {
    temp_dir dir;
    fs::path file;
    {
        harness h(R"([{"text":"ok"}])", settings{},
                  [&](session_options& o) { o.session_dir = dir.path; });
        h.prompt("hi");
        REQUIRE_FALSE(h.session->set_session_name("my session"));
        CHECK(h.session->session_name() == "my session");
        file = *h.session->history().file();
    }
    CHECK(read_lines(file).back().find(R"("type":"session_info")") != std::string::npos);
    harness h(R"([])", settings{}, [&](session_options& o) { o.resume_file = file; });
    CHECK(h.session->session_name() == "my session");
}

namespace {

void write_text(const fs::path& p, const std::string& text) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
}

constexpr std::string_view header_line =
    R"({"type":"session","version":3,"id":"abc123","timestamp":"t","cwd":"/"})"
    "\n";

}  // namespace

TEST_CASE(
    "fixed finding 10: an empty session file (killed before its first entry) loads as an empty "
    "session",
    "[history][limits]") {
    temp_dir dir;
    fs::path file;
    std::string id;
    {
        auto h = session_history::create_file(dir.path, "/cwd");  // created, nothing written yet
        file = *h.file();
        id = h.session_id();
    }
    REQUIRE(fs::file_size(file) == 0);
    auto loaded = session_history::load(file);
    CHECK(loaded.warnings.empty());
    CHECK(loaded.history.entries().empty());
    CHECK(loaded.history.session_id() == id);  // from the file name
    REQUIRE_FALSE(
        loaded.history.append_message(std::make_shared<message>(make_user_message("first"))));
    const auto lines = read_lines(file);
    REQUIRE(lines.size() == 2);  // the header is written with the first entry
    CHECK(lines[0].find("\"id\":\"" + id + "\"") != std::string::npos);
    // a session file has one writer at a time (issue 17 item 2): release it before a reload
    loaded.history = session_history();
    auto again = session_history::load(file);
    CHECK(again.history.session_id() == id);
    CHECK(again.history.messages().size() == 1);

    // a blank file too; its header is the first line that is not blank
    const fs::path blank = dir.path / "blank.jsonl";
    write_text(blank, "\n \n");
    auto b = session_history::load(blank);
    CHECK(b.history.entries().empty());
    CHECK(b.history.session_id().size() == 32);  // no id in the name: a fresh one
    REQUIRE_FALSE(b.history.append_message(std::make_shared<message>(make_user_message("x"))));
    b.history = session_history();
    CHECK(session_history::load(blank).history.messages().size() == 1);
}

TEST_CASE("fixed: a session header with an empty id is refused, naming the file and the key",
          "[history]") {
    temp_dir dir;
    const fs::path file = dir.path / "s.jsonl";
    write_text(file, R"({"type":"session","version":3,"id":"","cwd":"/"})"
                     "\n");
    CHECK_THROWS_WITH(
        session_history::load(file),
        file.string() +
            ": not a session file (line 1: key \"id\": expected a non-empty string, found \"\")");
}

TEST_CASE("session file limits: an over-long line is skipped, an over-large file refused",
          "[history][limits]") {
    temp_dir dir;
    const fs::path file = dir.path / "s.jsonl";
    const std::string entry =
        R"({"type":"message","id":"00000001","parentId":null,"message":{"role":"user","content":")" +
        std::string(200, 'x') +
        R"("}})"
        "\n";
    write_text(file, std::string(header_line) + entry +
                         R"({"type":"label","id":"00000002","parentId":"00000001"})"
                         "\n");
    session_file_limits limits;
    limits.max_line_bytes = 100;
    auto loaded = session_history::load(file, limits);
    REQUIRE(loaded.warnings.size() == 1);
    CHECK(loaded.warnings[0] == file.string() + ":2: line of " + std::to_string(entry.size() - 1) +
                                    " bytes exceeds the limit of 100 bytes (0 MiB); skipped");
    CHECK(loaded.history.entries().size() == 1);
    loaded.history = session_history();  // one writer at a time (issue 17 item 2)
    CHECK(session_history::load(file).history.entries().size() ==
          2);  // default limits: 64 MiB a line

    CHECK(session_file_limits{}.max_line_bytes == 64u * 1024 * 1024);
}

TEST_CASE("issue 16 item 2: a session file has no size limit, it is read line by line",
          "[history][limits]") {
    // 300 MiB (more than the old 256 MiB file limit) without writing them: a sparse file whose
    // hole is one line of NUL bytes, longer than the line limit, then an entry. The long line is
    // skipped without being buffered, the entry after it is loaded.
    temp_dir dir;
    const fs::path file = dir.path / "big.jsonl";
    const std::string entry =
        R"({"type":"message","id":"00000001","parentId":null,"message":{"role":"user","content":"after the hole"}})"
        "\n";
    const std::size_t hole = std::size_t{300} * 1024 * 1024;
    write_text(file, std::string(header_line));
    {
        const int fd = ::open(file.c_str(), O_WRONLY);
        REQUIRE(fd >= 0);
        REQUIRE(::ftruncate(fd, static_cast<off_t>(std::string(header_line).size() + hole)) == 0);
        REQUIRE(::lseek(fd, 0, SEEK_END) > 0);
        const std::string rest = "\n" + entry;
        REQUIRE(::write(fd, rest.data(), rest.size()) == static_cast<ssize_t>(rest.size()));
        ::close(fd);
    }
    auto loaded = session_history::load(file);
    REQUIRE(loaded.warnings.size() == 1);
    CHECK(loaded.warnings[0] == file.string() + ":2: line of " + std::to_string(hole) +
                                    " bytes exceeds the limit of 67108864 bytes (64 MiB); skipped");
    REQUIRE(loaded.history.entries().size() == 1);
    CHECK(text_of(*loaded.history.entries()[0].msg) == "after the hole");
}

TEST_CASE(
    "issue 16 item 2: an entry longer than the line limit is written cut, with a marker, "
    "the file loads",
    "[history][limits]") {
    CHECK(not_stored_marker(12) == "\u2026[12 bytes not stored]");
    temp_dir dir;
    fs::path file;
    const std::string big(10000, 'x');
    {
        auto h = session_history::create_file(dir.path, "/w");
        h.set_max_line_bytes(4096);
        REQUIRE_FALSE(h.append_message(std::make_shared<message>(make_user_message("short"))));
        REQUIRE_FALSE(h.append_message(std::make_shared<message>(make_user_message(big))));
        // control characters serialise to 6 bytes each: the cut counts serialised bytes
        REQUIRE_FALSE(h.append_message(
            std::make_shared<message>(make_user_message(std::string(3000, '\x01')))));
        file = *h.file();
        CHECK(text_of(*h.entries()[1].msg) == big);  // in memory the whole text
    }
    std::ifstream in(file);
    std::size_t longest = 0;
    for (std::string line; std::getline(in, line);) longest = std::max(longest, line.size());
    CHECK(longest <= 4096);
    session_file_limits limits;
    limits.max_line_bytes = 4096;
    auto loaded = session_history::load(file, limits);
    CHECK(loaded.warnings.empty());
    REQUIRE(loaded.history.entries().size() == 3);
    CHECK(text_of(*loaded.history.entries()[0].msg) == "short");
    const std::string cut = text_of(*loaded.history.entries()[1].msg);
    const auto marker = cut.find("\u2026[");
    REQUIRE(marker != std::string::npos);
    CHECK(cut.substr(0, marker) == std::string(marker, 'x'));
    CHECK(cut.substr(marker) == not_stored_marker(big.size() - marker));
    const std::string cut2 = text_of(*loaded.history.entries()[2].msg);
    CHECK_THAT(cut2, Catch::EndsWith(" bytes not stored]"));
    // fit_message on its own: a tool call's arguments give way too
    message m;
    m.role = message_role::assistant;
    tool_call_block c;
    c.id = "c1";
    c.name = "write";
    c.arguments["content"] = std::string(5000, 'y');
    m.content.emplace_back(std::move(c));
    const message fitted = fit_message(m, 1000);
    std::string line;
    append_json(line, fitted);
    CHECK(line.size() <= 1000);
    const auto& args = std::get<tool_call_block>(fitted.content.at(0)).arguments;
    CHECK(args.at("\u2026").as_string().ends_with(" bytes not stored]"));
}

namespace {

// An endless stream of 'x' without a newline (a huge file that is one line), counting the
// bytes it gave out.
struct endless_line : std::streambuf {
    std::array<char, 4096> chunk;
    std::size_t given = 0;
    std::size_t cap;
    explicit endless_line(std::size_t c) : cap(c) { chunk.fill('x'); }
    int_type underflow() override {
        if (given >= cap) return traits_type::eof();
        given += chunk.size();
        setg(chunk.data(), chunk.data(), chunk.data() + chunk.size());
        return traits_type::to_int_type(chunk[0]);
    }
};

}  // namespace

TEST_CASE("issue 16 item 4: --continue's scan reads a bounded first line", "[history][limits]") {
    CHECK(session_header_max_bytes == 64u * 1024);
    std::istringstream ok(std::string(header_line) + "{\"type\":\"label\"}\n");
    CHECK(read_first_line(ok, session_header_max_bytes) ==
          std::string(header_line).substr(0, std::string(header_line).size() - 1));
    std::istringstream empty;
    CHECK_FALSE(read_first_line(empty, 100));
    std::istringstream last("no newline");
    CHECK(read_first_line(last, 100) == "no newline");
    std::istringstream at("0123456789\n");
    CHECK(read_first_line(at, 10) == "0123456789");
    std::istringstream over("0123456789\n");
    CHECK_FALSE(read_first_line(over, 9));
    // a 256 MiB line (the issue's 2 GB file without a newline): at most the bound is read
    endless_line huge(std::size_t{256} * 1024 * 1024);
    std::istream in(&huge);
    CHECK_FALSE(read_first_line(in, session_header_max_bytes));
    CHECK(huge.given <= session_header_max_bytes + 2 * 4096);
}

TEST_CASE("fixed findings 1 and 9: numbers beyond a double or int64 in a session file",
          "[history][limits]") {
    temp_dir dir;
    const fs::path file = dir.path / "s.jsonl";
    write_text(
        file,
        std::string(header_line) +
            R"({"type":"message","id":"00000001","parentId":null,"message":{"role":"user","content":"a","timestamp":1e300}})"
            "\n"
            R"({"type":"message","id":"00000002","parentId":"00000001","message":{"role":"assistant","content":[{"type":"toolCall","id":"c","name":"t","arguments":{"n":1e400}}],"stopReason":"toolUse"}})"
            "\n"
            R"({"type":"message","id":"00000003","parentId":"00000001","message":{"role":"assistant","content":"b","stopReason":"stop","usage":{"input":9223372036854775807,"output":-1e30,"totalTokens":18446744073709551615},"timestamp":-1e300}})"
            "\n");
    auto loaded = session_history::load(file);
    REQUIRE(loaded.warnings.size() ==
            1);  // the line with 1e400 (it would be written back as Infinity)
    CHECK(loaded.warnings[0] == file.string() +
                                    ":3: number out of range at \"message.content[0].arguments.n\" "
                                    "(a JSON number must fit a "
                                    "double: at most about 1.8e308); line skipped");
    const auto msgs = loaded.history.messages();
    REQUIRE(msgs.size() == 2);
    CHECK(msgs[0]->timestamp == INT64_MAX);  // saturated, not undefined behaviour
    CHECK(msgs[1]->usage.input == INT64_MAX);
    CHECK(msgs[1]->usage.output == INT64_MIN);
    CHECK(msgs[1]->usage.total_tokens == INT64_MAX);
    CHECK(msgs[1]->timestamp == INT64_MIN);
}

namespace {

unsigned mode_of(const fs::path& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

// Sets the process umask for one scope (tests in one binary run one at a time).
struct umask_scope {
    mode_t old;
    explicit umask_scope(mode_t m) : old(::umask(m)) {}
    ~umask_scope() { ::umask(old); }
};

}  // namespace

TEST_CASE(
    "issue 17 item 1: the directories coagent creates are 0700 and session files 0600, whatever "
    "the umask, existing directories are left alone",
    "[history][issue-17]") {
    for (const mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
        INFO("umask " << std::oct << mask);
        temp_dir dir;
        fs::permissions(dir.path, fs::perms(0755));
        const fs::path home = dir.path / "home";  // $COAGENT_DIR, created by coagent
        const fs::path sessions = home / "sessions";
        umask_scope scope(mask);
        auto h = session_history::create_file(sessions, "/somewhere");
        REQUIRE(h.file());
        CHECK(mode_of(*h.file()) == 0600);
        REQUIRE_FALSE(h.append_message(std::make_shared<message>(make_user_message("hi"))));
        CHECK(mode_of(*h.file()) == 0600);
        CHECK(mode_of(sessions) == 0700);
        CHECK(mode_of(home) == 0700);
        CHECK(mode_of(dir.path) == 0755);  // not created by coagent: not touched

        // settings.json and auth.json writes create $COAGENT_DIR the same way
        const fs::path other = dir.path / "other-home";
        config_file::write_atomically(other / "settings.json", "{}\n", "settings.json");
        CHECK(mode_of(other) == 0700);
        const fs::path third = dir.path / "third-home";
        { config_file::lock l(third / "auth.json"); }
        CHECK(mode_of(third) == 0700);
        CHECK(mode_of(third / "auth.json.lock") == 0600);
    }
}

TEST_CASE(
    "issue 17 item 1: an existing session directory that group or others can read is warned "
    "about once, and left as it is",
    "[history][issue-17]") {
    temp_dir dir;
    const fs::path sessions = dir.path / "sessions";
    fs::create_directories(sessions);
    fs::permissions(sessions, fs::perms(0755));
    std::ostringstream log;
    auto logger = std::make_shared<spdlog::logger>(
        "test", std::make_shared<spdlog::sinks::ostream_sink_st>(log));
    logger->set_pattern("%l: %v");
    const auto make = [&](const fs::path& d) {
        harness h("[]", settings{}, [&](session_options& o) {
            o.session_dir = d;
            o.cwd = "/somewhere";
            o.logger = logger;
        });
    };
    make(sessions);
    CHECK(log.str() == "warning: " + sessions.string() +
                           ": the session directory can be read by group or others (mode 0755); "
                           "`chmod 700 " +
                           sessions.string() + "` keeps conversations private\n");
    make(sessions);  // once per directory and process
    CHECK(log.str().find("warning", 1) == std::string::npos);
    CHECK(mode_of(sessions) == 0755);

    log.str("");
    const fs::path private_dir = dir.path / "private";
    fs::create_directories(private_dir);
    fs::permissions(private_dir, fs::perms(0700));
    make(private_dir);
    fs::permissions(private_dir, fs::perms(0710));  // searchable, not readable: no warning
    make(private_dir);
    CHECK(log.str().empty());
}

TEST_CASE(
    "issue 17 item 9: session and entry ids come from the OS random source: a forked child "
    "does not repeat its parent's ids",
    "[history][issue-17]") {
    (void)random_hex_id(32);  // any per-process generator state is set up before the fork
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const std::string id = random_hex_id(32) + random_hex_id(8);
        const auto n = ::write(fds[1], id.data(), id.size());
        ::_exit(n == static_cast<ssize_t>(id.size()) ? 0 : 1);
    }
    ::close(fds[1]);
    const std::string mine = random_hex_id(32) + random_hex_id(8);
    std::string theirs(40, '\0');
    std::size_t got = 0;
    while (got < theirs.size()) {
        const auto n = ::read(fds[0], theirs.data() + got, theirs.size() - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
    }
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    REQUIRE(got == 40);
    CHECK(mine.find_first_not_of("0123456789abcdef") == std::string::npos);
    CHECK(theirs.substr(0, 32) != mine.substr(0, 32));
    CHECK(theirs.substr(32) != mine.substr(32));
    // ids of every length come out whole: 1, 8, 16, 17 and 32 hex digits
    for (const std::size_t n : {1u, 8u, 16u, 17u, 32u}) CHECK(random_hex_id(n).size() == n);
}

TEST_CASE(
    "issue 17 item 2: a session file is locked for the life of its session, a second opener is "
    "refused naming the process that holds it",
    "[history][issue-17]") {
    temp_dir dir;
    const std::string in_use = ": in use by process " + std::to_string(::getpid());
    std::optional<fs::path> file;
    {
        auto h = session_history::create_file(dir.path, "/somewhere");
        file = h.file();
        REQUIRE(file);
        // before the first entry (an empty file) and after it
        CHECK_THROWS_WITH(session_history::load(*file), file->string() + in_use);
        REQUIRE_FALSE(h.append_message(std::make_shared<message>(make_user_message("hi"))));
        CHECK_THROWS_WITH(session_history::load(*file), file->string() + in_use);
        session_history moved = std::move(h);  // the lock moves with the history
        CHECK_THROWS_WITH(session_history::load(*file), file->string() + in_use);
    }
    // released with the session: a loaded session holds it the same way
    {
        auto loaded = session_history::load(*file);
        CHECK(loaded.history.messages().size() == 1);
        CHECK_THROWS_WITH(session_history::load(*file), file->string() + in_use);
        REQUIRE_FALSE(
            loaded.history.append_message(std::make_shared<message>(make_user_message("again"))));
    }
    auto again = session_history::load(*file);
    CHECK(again.history.messages().size() == 2);
    CHECK(read_lines(*file).size() == 3);
}

TEST_CASE("issue 17 item 2: the holder of a flock is read from /proc/locks",
          "[history][issue-17]") {
    const std::string locks =
        "1: POSIX  ADVISORY  WRITE 111 fd:01:4242 0 EOF\n"
        "2: FLOCK  ADVISORY  WRITE 222 00:2f:4242 0 EOF\n"
        "2: -> FLOCK  ADVISORY  WRITE 333 00:2f:4242 0 EOF\n"
        "3: FLOCK  ADVISORY  WRITE 444 fd:01:4242 0 EOF\n"
        "4: OFDLCK ADVISORY  READ  -1 fd:01:99 0 EOF\n";
    CHECK(flock_holder(locks, makedev(0xfd, 0x01), 4242) == 444);
    CHECK(flock_holder(locks, makedev(0x00, 0x2f), 4242) == 222);
    CHECK(flock_holder(locks, makedev(0xfd, 0x01), 99) == std::nullopt);
    CHECK(flock_holder("", makedev(0xfd, 0x01), 4242) == std::nullopt);
}

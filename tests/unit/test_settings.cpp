// settings_store: schema defaults, layering, validation messages, unknown keys, persist_global.

#include <coagent/providers/models_config.hpp>
#include <coagent/session/history.hpp>
#include <coagent/session/limit_store.hpp>
#include <coagent/session/settings_store.hpp>

#include <catch2/catch.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>
#include <atomic>
#include <coagent/providers/models_config.hpp>
#include <coagent/session/history.hpp>
#include <cstdlib>

#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <grp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
namespace json = boost::json;
using coagent::settings_error;
using coagent::settings_store;
using coagent::settings_warning;

namespace {

// A fresh directory per test, removed with everything in it.
struct temp_dir {
    fs::path path;
    temp_dir() {
        static std::atomic<unsigned> counter{0};
        path = fs::temp_directory_path() / ("coagent-settings-test-" + std::to_string(::getpid()) +
                                            "-" + std::to_string(counter.fetch_add(1)));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        // Undo any chmod 000 of a test so that everything can be removed.
        for (auto it = fs::recursive_directory_iterator(path, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
            fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
        fs::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;

    fs::path global() const { return path / "home" / "settings.json"; }
    fs::path project() const { return path / "project" / ".coagent" / "settings.json"; }
};

void write_file(const fs::path& p, const std::string& text) {
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out.good());
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<std::string> dir_entries(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// Runs f, which must throw settings_error, and returns the error.
settings_error expect_error(const std::function<void()>& f) {
    try {
        f();
    } catch (const settings_error& e) {
        return e;
    }
    FAIL("no settings_error thrown");
    throw std::logic_error("unreachable");
}

// Runs f in a forked child and returns what it returned. When the tests run as root (as CI
// does), the child first becomes the unprivileged user nobody (65534), so file permissions
// apply to it as to any user. A child that cannot drop its privileges reports that.
std::string in_unprivileged_child(const std::function<std::string()>& f) {
    int fds[2];
    REQUIRE(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        ::close(fds[0]);
        std::string out;
        if (::geteuid() == 0 &&
            (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
             ::setresuid(65534, 65534, 65534) != 0))
            out = "cannot become an unprivileged user";
        else
            out = f();
        (void)!::write(fds[1], out.data(), out.size());
        ::_exit(0);
    }
    ::close(fds[1]);
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
        out.append(buf, static_cast<std::size_t>(n));
    ::close(fds[0]);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    return out;
}

// Restores an environment variable when the test ends.
struct env_guard {
    std::string name;
    std::optional<std::string> old;
    explicit env_guard(std::string n) : name(std::move(n)) {
        if (const char* v = std::getenv(name.c_str())) old = v;
    }
    ~env_guard() {
        if (old)
            ::setenv(name.c_str(), old->c_str(), 1);
        else
            ::unsetenv(name.c_str());
    }
};

}  // namespace

TEST_CASE("telemetry.traceFile: a string, strictly", "[settings][telemetry]") {
    auto store = settings_store::defaults();
    CHECK(store.current().telemetry.trace_file.empty());
    CHECK(coagent::setting_value(store.current(), "telemetry.traceFile") == json::value(""));
}

TEST_CASE("schema defaults agree with settings.hpp", "[settings]") {
    struct expected_key {
        std::string key;
        std::string type;
        json::value value;
    };
    const std::vector<expected_key> keys = {
        {"retry.enabled", "boolean", true},
        {"retry.maxRetries", "integer", 3},
        {"retry.baseDelayMs", "integer", 2000},
        {"retry.honorRetryAfter", "boolean", false},
        {"retry.maxDelayMs", "integer", 0},
        {"retry.jitter", "string", "none"},
        {"retry.honorShouldRetry", "boolean", false},
        {"retry.fallbackChains", "object", json::object()},
        {"retry.fallbackRevertPolicy", "string", "cooldown-expiry"},
        {"retry.resumePartial", "boolean", false},
        {"retry.longWait", "string", "fail"},
        {"compaction.enabled", "boolean", true},
        {"compaction.reserveTokens", "integer", 16384},
        {"compaction.keepRecentTokens", "integer", 20000},
        {"provider.connectTimeoutMs", "integer", 10000},
        {"provider.streamIdleTimeoutMs", "integer", 120000},
        {"provider.attemptTimeoutMs", "integer", 600000},
        {"telemetry.traceFile", "string", ""},
        {"defaultProvider", "string", ""},
        {"defaultModel", "string", ""},
        {"thinkingLevel", "string", "off"},
        {"tui.markdown", "boolean", true},
        {"tui.expandThinking", "boolean", false},
        {"retry.budget.enabled", "boolean", false},
        {"retry.budget.maxTokens", "integer", 10},
        {"retry.budget.tokenRatio", "number", 0.1},
        {"limits.store", "string", "local"},
        {"limits.redisUrl", "string", "redis://127.0.0.1:6379/0"},
        {"limits.keyPrefix", "string", "coagent:"},
    };
    const auto schema = coagent::settings_schema();
    REQUIRE(schema.size() == keys.size());
    const coagent::settings plain{};
    const auto store = settings_store::defaults();
    for (std::size_t i = 0; i < keys.size(); ++i) {
        INFO(keys[i].key);
        CHECK(schema[i].key == keys[i].key);
        CHECK(schema[i].type == keys[i].type);
        CHECK(schema[i].default_value == keys[i].value);
        // The schema's default is the struct's default initializer.
        CHECK(coagent::setting_value(plain, keys[i].key) == keys[i].value);
        CHECK(coagent::setting_value(store.current(), keys[i].key) == keys[i].value);
        CHECK(store.get(keys[i].key) == keys[i].value);
    }
    CHECK(store.warnings().empty());
    CHECK(
        store.get("retry") ==
        json::parse(
            R"({"enabled":true,"maxRetries":3,"baseDelayMs":2000,"honorRetryAfter":false,"maxDelayMs":0,"jitter":"none","honorShouldRetry":false,"fallbackChains":{},"fallbackRevertPolicy":"cooldown-expiry","resumePartial":false,"longWait":"fail","budget":{"enabled":false,"maxTokens":10,"tokenRatio":0.1}})"));

    CHECK(store.get("limits") ==
          json::parse(
              R"({"store":"local","redisUrl":"redis://127.0.0.1:6379/0","keyPrefix":"coagent:"})"));
    CHECK_FALSE(plain.limits);  // a session's copy holds no limits_settings of its own
    CHECK_FALSE(store.get("nope").has_value());
    CHECK_FALSE(store.get("retry.nope").has_value());
    CHECK_FALSE(coagent::setting_value(plain, "retry").has_value());
    CHECK(schema[1].expected == "a non-negative integer");
    CHECK(schema[14].expected == "a positive integer");
    CHECK(schema[10].expected == R"(one of "fail", "fallback", "park" or "fallback,park")");
    CHECK(schema[5].expected == R"(one of "none", "full" or "equal")");
}

TEST_CASE("origin names the layer a value comes from, string settings are checked", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"defaultProvider":"openai","retry":{"maxRetries":5}})");
    write_file(dir.project(), R"({"retry":{"maxRetries":1}})");
    auto store = settings_store::load(dir.global(), dir.project());
    CHECK(store.current().selection.default_provider == "openai");
    CHECK(store.current().selection.default_model.empty());
    CHECK(store.origin("defaultProvider") == dir.global().string());
    CHECK(store.origin("retry.maxRetries") == dir.project().string());
    CHECK(store.origin("retry.baseDelayMs") == "default");
    store.set_override("retry.maxRetries", json::value(2));
    CHECK(store.origin("retry.maxRetries") == "<runtime>");

    write_file(dir.global(), R"({"defaultModel":["gpt-4o"]})");
    try {
        (void)settings_store::load(dir.global(), dir.project());
        FAIL("a defaultModel that is not a string was accepted");
    } catch (const settings_error& e) {
        CHECK(std::string(e.what()) ==
              dir.global().string() +
                  R"(: key "defaultModel": expected a string, found ["gpt-4o"])");
    }
}

TEST_CASE("missing files are empty layers", "[settings]") {
    temp_dir dir;
    const auto store = settings_store::load(dir.global(), dir.project());
    CHECK(store.current().retry.enabled);
    CHECK(store.current().retry.max_retries == 3);
    CHECK(store.current().provider.stream_idle_timeout_ms == 120000);
    CHECK(store.warnings().empty());
    CHECK(store.global_file() == dir.global());
    CHECK(store.project_file() == dir.project());
}

TEST_CASE("layering: defaults < global < project < runtime override", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"retry":{"enabled":false,"maxRetries":5,"baseDelayMs":100},
                                "compaction":{"reserveTokens":1000}})");
    write_file(dir.project(), R"({"retry":{"maxRetries":7},"provider":{"connectTimeoutMs":50}})");
    auto store = settings_store::load(dir.global(), dir.project());
    const auto& s = store.current();

    CHECK_FALSE(s.retry.enabled);                     // global
    CHECK(s.retry.max_retries == 7);                  // project over global
    CHECK(s.retry.base_delay_ms == 100);              // global
    CHECK(s.compaction.enabled);                      // default
    CHECK(s.compaction.reserve_tokens == 1000);       // global
    CHECK(s.compaction.keep_recent_tokens == 20000);  // default
    CHECK(s.provider.connect_timeout_ms == 50);       // project
    CHECK(
        store.get("retry") ==
        json::parse(
            R"({"enabled":false,"maxRetries":7,"baseDelayMs":100,"honorRetryAfter":false,"maxDelayMs":0,"jitter":"none","honorShouldRetry":false,"fallbackChains":{},"fallbackRevertPolicy":"cooldown-expiry","resumePartial":false,"longWait":"fail","budget":{"enabled":false,"maxTokens":10,"tokenRatio":0.1}})"));

    store.set_override("retry.maxRetries", 9);
    store.set_override("retry.enabled", true);
    CHECK(store.current().retry.max_retries == 9);  // override over project
    CHECK(store.current().retry.enabled);           // override over global
    CHECK(store.get("retry.maxRetries") == json::value(9));
    CHECK(&store.current() == &s);  // the same object, updated in place

    store.clear_override("retry.maxRetries");
    CHECK(store.current().retry.max_retries == 7);
    CHECK(store.current().retry.enabled);
    store.clear_override("retry.maxRetries");  // no override: no effect
    store.clear_override("no.such.key");
    CHECK(store.current().retry.max_retries == 7);
}

TEST_CASE("integers written as whole doubles are accepted", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"retry":{"maxRetries":4.0,"baseDelayMs":1e3}})");
    const auto store = settings_store::load(dir.global(), dir.project());
    CHECK(store.current().retry.max_retries == 4);
    CHECK(store.current().retry.base_delay_ms == 1000);
}

TEST_CASE("a project file that is the global file is read once", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"quietStartup":true,"retry":{"maxRetries":1}})");
    const auto store = settings_store::load(dir.global(), dir.global());
    CHECK(store.current().retry.max_retries == 1);
    REQUIRE(store.warnings().size() == 1);
    CHECK(store.warnings()[0] == settings_warning{dir.global().string(), "quietStartup"});
}

TEST_CASE("wrong values name the file, key, expected type and value found", "[settings]") {
    struct bad_case {
        std::string text;
        std::string key;
        std::string expected;
        std::string found;
    };
    const std::vector<bad_case> cases = {
        {R"({"retry":{"enabled":"yes"}})", "retry.enabled", "a boolean (true or false)",
         R"("yes")"},
        {R"({"retry":{"enabled":1}})", "retry.enabled", "a boolean (true or false)", "1"},
        {R"({"retry":{"enabled":{"x":[1,2.5]}}})", "retry.enabled", "a boolean (true or false)",
         R"({"x":[1,2.5]})"},
        {R"({"retry":{"maxRetries":-1}})", "retry.maxRetries", "a non-negative integer", "-1"},
        {R"({"retry":{"maxRetries":2.5}})", "retry.maxRetries", "a non-negative integer", "2.5"},
        {R"({"retry":{"maxRetries":"3"}})", "retry.maxRetries", "a non-negative integer", R"("3")"},
        {R"({"retry":{"maxRetries":"three"}})", "retry.maxRetries", "a non-negative integer",
         R"("three")"},
        {R"({"retry":{"maxRetries":true}})", "retry.maxRetries", "a non-negative integer", "true"},
        {R"({"retry":{"maxRetries":3000000000}})", "retry.maxRetries",
         "a non-negative integer no greater than 2147483647", "3000000000"},
        {R"({"retry":{"baseDelayMs":18446744073709551615}})", "retry.baseDelayMs",
         "a non-negative integer no greater than 9223372036854775807", "18446744073709551615"},
        {R"({"retry":{"baseDelayMs":1e19}})", "retry.baseDelayMs",
         "a non-negative integer no greater than 9223372036854775807", "1e+19"},
        {R"({"retry":{"baseDelayMs":-1e19}})", "retry.baseDelayMs", "a non-negative integer",
         "-1e+19"},
        {R"({"retry":{"baseDelayMs":null}})", "retry.baseDelayMs", "a non-negative integer",
         "null"},
        {R"({"compaction":{"enabled":"false"}})", "compaction.enabled", "a boolean (true or false)",
         R"("false")"},
        {R"({"compaction":{"reserveTokens":-5}})", "compaction.reserveTokens",
         "a non-negative integer", "-5"},
        {R"({"provider":{"connectTimeoutMs":0}})", "provider.connectTimeoutMs",
         "a positive integer", "0"},
        {R"({"provider":{"streamIdleTimeoutMs":[]}})", "provider.streamIdleTimeoutMs",
         "a positive integer", "[]"},
        {R"({"retry":{"longWait":"wait"}})", "retry.longWait",
         R"(one of "fail", "fallback", "park" or "fallback,park")", R"("wait")"},
        {R"({"retry":{"longWait":"park,fallback"}})", "retry.longWait",
         R"(one of "fail", "fallback", "park" or "fallback,park")", R"("park,fallback")"},
        {R"({"retry":{"longWait":true}})", "retry.longWait",
         R"(one of "fail", "fallback", "park" or "fallback,park")", "true"},
        {R"({"retry":5})", "retry", "an object", "5"},
        {R"({"compaction":[true]})", "compaction", "an object", "[true]"},
        {R"({"provider":null})", "provider", "an object", "null"},
        {R"([1,2])", "", "a JSON object at the top level", "[1,2]"},
        {R"("retry")", "", "a JSON object at the top level", R"("retry")"},
    };
    temp_dir dir;
    for (const bool in_project : {false, true}) {
        for (const auto& c : cases) {
            INFO((in_project ? "project: " : "global: ") + c.text);
            const fs::path file = in_project ? dir.project() : dir.global();
            fs::remove(dir.global());
            fs::remove(dir.project());
            write_file(file, c.text);
            const auto e =
                expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
            CHECK(e.file == file.string());
            CHECK(e.key == c.key);
            CHECK(e.expected == c.expected);
            CHECK(e.found == c.found);
            CHECK(e.line == 0);
            const std::string key_part = c.key.empty() ? "" : "key \"" + c.key + "\": ";
            CHECK(std::string(e.what()) == file.string() + ": " + key_part + "expected " +
                                               c.expected + ", found " + c.found);
        }
    }
}

TEST_CASE("the error message reads as documented", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"retry":{"maxRetries":"three"}})");
    const auto e = expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
    CHECK(std::string(e.what()) == dir.global().string() +
                                       R"(: key "retry.maxRetries": expected a non-negative )"
                                       R"(integer, found "three")");
}

TEST_CASE("a long value is cut in the message", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"retry":{"enabled":")" + std::string(200, 'x') + R"("}})");
    const auto e = expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
    CHECK(e.found.size() == 80);
    CHECK(e.found.starts_with("\"xxx"));
    CHECK(e.found.ends_with("..."));
}

TEST_CASE("invalid JSON names the file and the line:column of the error", "[settings]") {
    struct bad_json {
        std::string text;
        std::size_t line, column;
        std::string message;
    };
    const std::vector<bad_json> cases = {
        // the error points at the start of the bad literal "tru"
        {"{\n  \"retry\": {\"enabled\": tru }\n}\n", 2, 24, "syntax error"},
        {"{\"retry\": {\"enabled\": true,}}", 1, 28, "syntax error"},
        {"{\"retry\": {\n", 2, 1, "incomplete JSON"},
        {"{}\n{}", 2, 1, "extra data"},
        // columns count characters, not bytes: "é" is two bytes
        {"{\"é\": 1,\n \"ü\": 2 x}", 2, 9, "syntax error"},
        {"\xEF\xBB\xBF{\"a\" 1}", 1, 6, "syntax error"},  // after a byte order mark
    };
    temp_dir dir;
    for (const auto& c : cases) {
        INFO(c.text);
        write_file(dir.global(), c.text);
        const auto e =
            expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
        CHECK(e.file == dir.global().string());
        CHECK(e.line == c.line);
        CHECK(e.column == c.column);
        CHECK(e.expected == "valid JSON");
        CHECK(e.found == c.message);
        CHECK(std::string(e.what()) == dir.global().string() + ":" + std::to_string(c.line) + ":" +
                                           std::to_string(c.column) +
                                           ": invalid JSON: " + c.message);
    }
}

TEST_CASE("an empty file is an error", "[settings]") {
    temp_dir dir;
    for (const std::string text : {"", "  \n\t\r\n"}) {
        write_file(dir.project(), text);
        const auto e =
            expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
        CHECK(e.file == dir.project().string());
        CHECK(e.key.empty());
        CHECK(e.expected == "a JSON object");
        CHECK(std::string(e.what()) ==
              dir.project().string() + ": empty file, expected a JSON object");
    }
}

TEST_CASE("an unreadable file is an error naming the file and the reason", "[settings]") {
    temp_dir dir;
    SECTION("permission denied") {
        // root reads a chmod 000 file, and CI runs as root: the load then runs in a child that
        // has become an unprivileged user (nobody), so the check holds whoever runs the tests
        write_file(dir.global(), "{}");
        fs::permissions(dir.global(), fs::perms::none);
        for (fs::path d = dir.global().parent_path(); d != dir.path.parent_path();
             d = d.parent_path())
            fs::permissions(d,
                            fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
        const std::string what = in_unprivileged_child([&]() -> std::string {
            try {
                (void)settings_store::load(dir.global(), dir.project());
            } catch (const settings_error& e) {
                return e.file + "|" + e.what();
            }
            return "no settings_error thrown";
        });
        CHECK(what == dir.global().string() + "|" + dir.global().string() +
                          ": cannot open it: " + std::generic_category().message(EACCES));
    }
    SECTION("a directory where the file should be") {
        fs::create_directories(dir.project());
        const auto e =
            expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
        CHECK(e.file == dir.project().string());
        CHECK(std::string(e.what()) == dir.project().string() + ": cannot read it: " +
                                           std::generic_category().message(EISDIR));
    }
    SECTION("a file where a directory should be") {
        write_file(dir.path / "project" / ".coagent", "not a directory");
        const auto e =
            expect_error([&] { (void)settings_store::load(dir.global(), dir.project()); });
        CHECK(std::string(e.what()) == dir.project().string() + ": cannot open it: " +
                                           std::generic_category().message(ENOTDIR));
    }
}

TEST_CASE("unknown keys are kept and warned about once each", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({
        "quietStartup": true,
        "retry": {"enabled": false, "provider": {"maxRetries": 2, "timeoutMs": 5},
                  "fallbackPolicy": {"default": ["a/b"]}},
        "theme": {"name": "dark"},
        "retry.maxRetries": 9
    })");
    write_file(dir.project(), R"({"quietStartup": false, "theme": {"size": 3}})");
    const auto g = dir.global().string();
    const auto p = dir.project().string();
    auto store = settings_store::load(dir.global(), dir.project());

    const std::vector<settings_warning> expected = {
        {g, "quietStartup"}, {g, "retry.provider"},   {g, "retry.fallbackPolicy"},
        {g, "theme"},        {g, "retry.maxRetries"}, {p, "quietStartup"},
        {p, "theme"},
    };
    CHECK(store.warnings() == expected);
    CHECK(store.warnings()[0].message() == g + R"(: unknown key "quietStartup" (kept, not used))");
    // A known key written flat is not applied, and the warning says how to nest it.
    CHECK(store.current().retry.max_retries == 3);
    CHECK(store.warnings()[4].message() ==
          g + R"(: unknown key "retry.maxRetries" (kept, not used); settings files nest )"
              R"(groups: {"retry":{"maxRetries":...}})");

    // Kept: visible through get(), project over global, objects merged key by key.
    CHECK(store.get("quietStartup") == json::value(false));
    CHECK(store.get("retry.provider.maxRetries") == json::value(2));
    CHECK(store.get("retry.fallbackPolicy") == json::parse(R"({"default":["a/b"]})"));
    CHECK(store.get("theme") == json::parse(R"({"name":"dark","size":3})"));
    CHECK_FALSE(store.current().retry.enabled);

    // Changes do not repeat the warnings.
    store.set_override("retry.enabled", true);
    store.persist_global("retry.baseDelayMs", 10);
    CHECK(store.warnings() == expected);
}

TEST_CASE("runtime overrides are validated", "[settings]") {
    auto store = settings_store::defaults();
    store.set_override("retry.enabled", false);

    auto e = expect_error([&] { store.set_override("retry.enabled", "yes"); });
    CHECK(e.file == "<runtime>");
    CHECK(e.key == "retry.enabled");
    CHECK(std::string(e.what()) ==
          R"(<runtime>: key "retry.enabled": expected a boolean (true or false), found "yes")");

    e = expect_error([&] { store.set_override("retry.maxRetries", -2); });
    CHECK(std::string(e.what()) ==
          R"(<runtime>: key "retry.maxRetries": expected a non-negative integer, found -2)");

    for (const char* key : {"retry.enabld", "retry", "", "retry.", "quietStartup"}) {
        INFO(key);
        e = expect_error([&] { store.set_override(key, true); });
        CHECK(e.file == "<runtime>");
        CHECK(std::string(e.what()) == std::string(R"(<runtime>: unknown key ")") + key + "\"");
    }
    CHECK_FALSE(store.current().retry.enabled);  // unchanged by the failures
    CHECK(store.current().retry.max_retries == 3);
}

TEST_CASE("persist_global keeps every other key", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"quietStartup":true,"retry":{"enabled":true,"maxRetries":5,)"
                             R"("provider":{"maxRetries":2}},"compaction":{"enabled":false},)"
                             R"("ratio":2.5,"list":[1,"a",null,{}],"unicode":"é\n"})");
    write_file(dir.project(), R"({"retry":{"maxRetries":7}})");
    auto store = settings_store::load(dir.global(), dir.project());
    const auto warnings_before = store.warnings();

    store.persist_global("retry.enabled", false);

    CHECK_FALSE(store.current().retry.enabled);
    CHECK(store.current().retry.max_retries == 7);  // the project still outranks global
    CHECK_FALSE(store.current().compaction.enabled);
    CHECK(store.warnings() == warnings_before);

    const std::string text = read_text(dir.global());
    // Same keys, same order, only retry.enabled changed.
    CHECK(json::serialize(json::parse(text)) ==
          R"({"quietStartup":true,"retry":{"enabled":false,"maxRetries":5,)"
          R"("provider":{"maxRetries":2}},"compaction":{"enabled":false},)"
          R"("ratio":2.5E0,"list":[1,"a",null,{}],"unicode":"é\n"})");
    CHECK(text.find("\"ratio\": 2.5,") != std::string::npos);  // written as the user wrote it
    CHECK(
        text.starts_with("{\n  \"quietStartup\": true,\n  \"retry\": {\n    \"enabled\": false,"));
    CHECK(text.ends_with("}\n"));
    // Atomic: nothing but the settings file is left in the directory.
    CHECK(dir_entries(dir.global().parent_path()) == std::vector<std::string>{"settings.json"});

    // A fresh load sees the same.
    const auto again = settings_store::load(dir.global(), dir.project());
    CHECK_FALSE(again.current().retry.enabled);
    CHECK(again.get("retry.provider.maxRetries") == json::value(2));
}

TEST_CASE("persist_global re-reads the file before writing", "[settings]") {
    temp_dir dir;
    write_file(dir.global(), R"({"retry":{"maxRetries":5}})");
    auto store = settings_store::load(dir.global(), dir.project());
    // Another process edits the file after the load.
    write_file(dir.global(), R"({"retry":{"maxRetries":6},"editor":"vim"})");

    store.persist_global("retry.baseDelayMs", 500);

    CHECK(json::parse(read_text(dir.global())) ==
          json::parse(R"({"retry":{"maxRetries":6,"baseDelayMs":500},"editor":"vim"})"));
    CHECK(store.current().retry.max_retries == 6);
    CHECK(store.current().retry.base_delay_ms == 500);
    CHECK(store.get("editor") == json::value("vim"));
    REQUIRE(store.warnings().size() == 1);
    CHECK(store.warnings()[0].key == "editor");
}

TEST_CASE("persist_global creates the directory and the file when missing", "[settings]") {
    temp_dir dir;
    auto store = settings_store::load(dir.global(), dir.project());
    REQUIRE_FALSE(fs::exists(dir.global().parent_path()));

    store.persist_global("retry.maxRetries", 4);

    CHECK(json::parse(read_text(dir.global())) == json::parse(R"({"retry":{"maxRetries":4}})"));
    CHECK(store.current().retry.max_retries == 4);
    CHECK(dir_entries(dir.global().parent_path()) == std::vector<std::string>{"settings.json"});

    // An empty file holds nothing to keep: it is replaced.
    write_file(dir.global(), "\n");
    store.persist_global("retry.enabled", false);
    CHECK(json::parse(read_text(dir.global())) == json::parse(R"({"retry":{"enabled":false}})"));
}

TEST_CASE("persist_global keeps the file's mode and writes through a symlink", "[settings]") {
    temp_dir dir;
    const fs::path real = dir.path / "dotfiles" / "coagent-settings.json";
    write_file(real, R"({"retry":{"enabled":true}})");
    fs::permissions(real, fs::perms::owner_read | fs::perms::owner_write);
    fs::create_directories(dir.global().parent_path());
    fs::create_symlink(real, dir.global());

    auto store = settings_store::load(dir.global(), dir.project());
    store.persist_global("retry.enabled", false);

    CHECK(fs::is_symlink(dir.global()));
    CHECK(json::parse(read_text(real)) == json::parse(R"({"retry":{"enabled":false}})"));
    CHECK(fs::status(real).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
    CHECK(dir_entries(real.parent_path()) == std::vector<std::string>{"coagent-settings.json"});
}

TEST_CASE("persist_global refuses to overwrite a file it cannot use", "[settings]") {
    struct broken {
        std::string text;
        std::string message;  // what() after the file name
    };
    const std::vector<broken> cases = {
        {"{\"retry\": {\"enabled\": tru", ":1:26: invalid JSON: incomplete JSON (not overwritten)"},
        {"[1,2]", ": expected a JSON object at the top level, found [1,2] (not overwritten)"},
        {R"({"retry":5})", R"(: key "retry": expected an object, found 5 (not overwritten))"},
        {R"({"retry":{"maxRetries":"x"}})",
         R"(: key "retry.maxRetries": expected a non-negative integer, found "x" (not )"
         R"(overwritten))"},
    };
    temp_dir dir;
    for (const auto& c : cases) {
        INFO(c.text);
        fs::remove(dir.global());
        auto store = settings_store::load(dir.global(), dir.project());
        write_file(dir.global(), c.text);  // broken after the load

        const auto e = expect_error([&] { store.persist_global("retry.enabled", false); });
        CHECK(e.file == dir.global().string());
        CHECK(std::string(e.what()) == dir.global().string() + c.message);
        CHECK(read_text(dir.global()) == c.text);  // untouched
        CHECK(store.current().retry.enabled);      // unchanged
        CHECK(dir_entries(dir.global().parent_path()) == std::vector<std::string>{"settings.json"});
    }

    SECTION("persisting the bad key itself repairs the file") {
        fs::remove(dir.global());
        auto store = settings_store::load(dir.global(), dir.project());
        write_file(dir.global(), R"({"retry":{"maxRetries":"x"},"other":1})");
        store.persist_global("retry.maxRetries", 2);
        CHECK(json::parse(read_text(dir.global())) ==
              json::parse(R"({"retry":{"maxRetries":2},"other":1})"));
        CHECK(store.current().retry.max_retries == 2);
    }
}

TEST_CASE("persist_global validates the key and value first", "[settings]") {
    temp_dir dir;
    auto store = settings_store::load(dir.global(), dir.project());
    auto e = expect_error([&] { store.persist_global("retry.enabled", "no"); });
    CHECK(e.file == "<runtime>");
    CHECK(e.key == "retry.enabled");
    e = expect_error([&] { store.persist_global("retry.enabld", false); });
    CHECK(std::string(e.what()) == R"(<runtime>: unknown key "retry.enabld")");
    CHECK_FALSE(fs::exists(dir.global()));

    auto defaults_only = settings_store::defaults();
    e = expect_error([&] { defaults_only.persist_global("retry.enabled", false); });
    CHECK(e.file == "<runtime>");
}

TEST_CASE("a runtime override outranks a persisted value", "[settings]") {
    temp_dir dir;
    auto store = settings_store::load(dir.global(), dir.project());
    store.set_override("retry.enabled", true);
    store.persist_global("retry.enabled", false);
    CHECK(store.current().retry.enabled);
    store.clear_override("retry.enabled");
    CHECK_FALSE(store.current().retry.enabled);
}

TEST_CASE("settings paths", "[settings]") {
    env_guard dir_env("COAGENT_DIR");
    env_guard home_env("HOME");

    ::setenv("COAGENT_DIR", "/x/coagent", 1);
    ::setenv("HOME", "/home/u", 1);
    CHECK(coagent::coagent_dir() == fs::path("/x/coagent"));

    ::setenv("COAGENT_DIR", "", 1);
    CHECK(coagent::coagent_dir() == fs::path("/home/u/.coagent"));
    ::unsetenv("COAGENT_DIR");
    CHECK(coagent::coagent_dir() == fs::path("/home/u/.coagent"));

    ::unsetenv("HOME");
    const auto e = expect_error([] { (void)coagent::coagent_dir(); });
    CHECK(std::string(e.what()).find("COAGENT_DIR") != std::string::npos);
    CHECK(std::string(e.what()).find("HOME") != std::string::npos);

    CHECK(coagent::global_settings_path("/x/coagent") == fs::path("/x/coagent/settings.json"));
    CHECK(coagent::project_settings_path("/src/app") ==
          fs::path("/src/app/.coagent/settings.json"));
}

TEST_CASE("retry additions beyond the spec: off by default, validated, layered",
          "[settings][beyond-spec]") {
    temp_dir d;
    const coagent::settings plain{};
    CHECK_FALSE(plain.retry.honor_retry_after);
    CHECK(plain.retry.max_delay_ms == 0);
    CHECK(plain.retry.jitter == coagent::retry_jitter::none);
    CHECK_FALSE(plain.retry.honor_should_retry);

    write_file(
        d.global(),
        R"({"retry":{"honorRetryAfter":true,"maxDelayMs":500,"jitter":"equal","honorShouldRetry":true}})");
    auto store = settings_store::load(d.global(), d.project());
    CHECK(store.warnings().empty());
    CHECK(store.current().retry.honor_retry_after);
    CHECK(store.current().retry.max_delay_ms == 500);
    CHECK(store.current().retry.jitter == coagent::retry_jitter::equal);
    CHECK(store.current().retry.honor_should_retry);
    CHECK(coagent::setting_value(store.current(), "retry.jitter") == json::value("equal"));

    write_file(d.project(), R"({"retry":{"jitter":"full"}})");
    store = settings_store::load(d.global(), d.project());
    CHECK(store.current().retry.jitter == coagent::retry_jitter::full);
    store.set_override("retry.jitter", json::value("none"));
    CHECK(store.current().retry.jitter == coagent::retry_jitter::none);
    CHECK(store.get("retry.jitter") == json::value("none"));

    auto e = expect_error([&] { store.set_override("retry.jitter", json::value("random")); });
    CHECK(
        std::string(e.what()) ==
        R"(<runtime>: key "retry.jitter": expected one of "none", "full" or "equal", found "random")");
    write_file(d.project(), R"({"retry":{"maxDelayMs":-1}})");
    e = expect_error([&] { (void)settings_store::load(d.global(), d.project()); });
    CHECK(e.key == "retry.maxDelayMs");
    CHECK(e.expected == "a non-negative integer");
    write_file(d.project(), R"({"retry":{"jitter":1}})");
    e = expect_error([&] { (void)settings_store::load(d.global(), d.project()); });
    CHECK(e.key == "retry.jitter");
    CHECK(e.found == "1");

    // persisted like any other key
    write_file(d.project(), "{}");
    store = settings_store::load(d.global(), d.project());
    store.persist_global("retry.jitter", json::value("full"));
    CHECK(json::parse(read_text(d.global())).at("retry").at("jitter") == "full");
}

TEST_CASE("issue 24: thinkingLevel is one of the reference's levels, validated and layered",
          "[settings][content]") {
    temp_dir d;
    CHECK(coagent::settings{}.selection.thinking == coagent::thinking_level::off);
    write_file(d.global(), R"({"thinkingLevel":"high"})");
    write_file(d.project(), R"({"thinkingLevel":"minimal"})");
    auto store = settings_store::load(d.global(), d.project());
    CHECK(store.warnings().empty());
    CHECK(store.current().selection.thinking == coagent::thinking_level::minimal);
    write_file(d.project(), "{}");
    store = settings_store::load(d.global(), d.project());
    CHECK(store.current().selection.thinking == coagent::thinking_level::high);
    write_file(d.project(), R"({"thinkingLevel":"max"})");
    auto e = expect_error([&] { (void)settings_store::load(d.global(), d.project()); });
    CHECK(e.key == "thinkingLevel");
    CHECK(e.found == R"("max")");
    CHECK(std::string(e.what()).find(
              R"(expected one of "off", "minimal", "low", "medium", "high" or "xhigh")") !=
          std::string::npos);
}

TEST_CASE("docs: every page says the same about retry.maxDelayMs (issue 15)", "[settings][docs]") {
    // the program caps our backoff at it and ends the chain on an honoured server wait above it;
    // a page that says "a longer computed wait ends the chain" contradicts it
    for (const char* page : {"docs/guide.md", "docs/settings.md", "docs/providers.md",
                             "docs/architecture.md", "docs/retry-policy.md", "README.md"}) {
        std::ifstream in(std::string(COAGENT_SOURCE_DIR) + "/" + page);
        REQUIRE(in);
        std::string line;
        while (std::getline(in, line)) {
            if (line.find("maxDelayMs") == std::string::npos) continue;
            INFO(page << ": " << line);
            CHECK(line.find("computed wait ends") == std::string::npos);
            if (line.find("| `retry.maxDelayMs`") == 0) {  // a table row: both halves
                CHECK(line.find("capped") != std::string::npos);
                CHECK(line.find("ends the chain") != std::string::npos);
            }
        }
    }
}

TEST_CASE("an unknown settings key near a known one gets a \"did you mean\" (issue 15)",
          "[settings][issue-15]") {
    const auto msg = [](std::string key) {
        return settings_warning{"s.json", key, true}.message();
    };
    CHECK(
        msg("retry.maxRetrie") ==
        R"(s.json: unknown key "retry.maxRetrie" (kept, not used); did you mean "retry.maxRetries"?)");
    CHECK(
        msg("retry.maxRetires") ==  // a transposition: distance 2
        R"(s.json: unknown key "retry.maxRetires" (kept, not used); did you mean "retry.maxRetries"?)");
    CHECK(
        msg("retry.basedelayms") ==  // case differences count as edits (2 here)
        R"(s.json: unknown key "retry.basedelayms" (kept, not used); did you mean "retry.baseDelayMs"?)");
    CHECK(msg("retyr") ==  // a group name
          R"(s.json: unknown key "retyr" (kept, not used); did you mean "retry"?)");
    CHECK(
        msg("compaction.enabel") ==
        R"(s.json: unknown key "compaction.enabel" (kept, not used); did you mean "compaction.enabled"?)");
    // distance 3 or more: no guess
    CHECK(msg("retry.maxTries") == R"(s.json: unknown key "retry.maxTries" (kept, not used))");
    CHECK(msg("quietStartup") == R"(s.json: unknown key "quietStartup" (kept, not used))");
    // models.json / auth.json keys are not guessed from the settings schema
    CHECK(settings_warning{"models.json", "providers2"}.message() ==
          R"(models.json: unknown key "providers2" (kept, not used))");
    // through a settings file
    const auto dir =
        std::filesystem::temp_directory_path() / ("coagent-dym-" + coagent::random_hex_id(8));
    std::filesystem::create_directories(dir);
    { std::ofstream(dir / "settings.json") << R"({"retry":{"maxRetrie":5}})"; }
    auto store = settings_store::load(dir / "settings.json", dir / "none.json");
    REQUIRE(store.warnings().size() == 1);
    CHECK(
        store.warnings()[0].message() ==
        (dir / "settings.json").string() +
            R"(: unknown key "retry.maxRetrie" (kept, not used); did you mean "retry.maxRetries"?)");
    std::filesystem::remove_all(dir);
}

TEST_CASE("models.json reasoning / input / cost are checked and kept (issue 15)",
          "[settings][models][issue-15]") {
    const auto error_of = [](std::string model) {
        try {
            coagent::models_config::parse(
                R"({"providers":{"p":{"baseUrl":"http://h/v1","api":"openai-completions","models":[)" +
                    model + "]}}}",
                "models.json");
        } catch (const coagent::settings_error& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(
        error_of(R"({"id":"m","reasoning":"yes"})") ==
        R"(models.json: key "providers.p.models[0].reasoning": expected true or false, found "yes")");
    CHECK(
        error_of(R"({"id":"m","input":["text","video"]})")
            .find(
                R"(key "providers.p.models[0].input": expected an array of "text" and "image", found)") !=
        std::string::npos);
    CHECK(
        error_of(R"({"id":"m","cost":{"input":-1}})")
            .find(R"(key "providers.p.models[0].cost.input": expected a number >= 0, found -1)") !=
        std::string::npos);
    const auto c = coagent::models_config::parse(
        R"({"providers":{"p":{"baseUrl":"http://h/v1","api":"openai-completions","models":[{"id":"m","reasoning":true,"input":["image","text"],"cost":{"output":2.5}}]}}})",
        "models.json");
    const auto m = c.resolve("p", "m");
    CHECK(m.reasoning);
    CHECK(m.image_input);
    CHECK(m.cost.output == 2.5);
    CHECK(m.base_url == "http://h/v1");
}

TEST_CASE("retry.budget and limits: validated, layered, the password never quoted (issue 19)",
          "[settings][limits]") {
    temp_dir dir;
    write_file(dir.global(),
               R"({"retry":{"budget":{"enabled":true,"maxTokens":100,"tokenRatio":0.25}},
                   "limits":{"store":"redis","redisUrl":"redis://:s3cret@10.0.0.5:7000/2",
                             "keyPrefix":"fleet:"}})");
    write_file(dir.project(), R"({"limits":{"keyPrefix":"proj:"}})");
    {
        const auto store = settings_store::load(dir.global(), dir.project());
        const auto& s = store.current();
        CHECK(s.budget.enabled);
        CHECK(s.budget.max_tokens == 100);
        CHECK(s.budget.token_ratio_milli == 250);
        REQUIRE(s.limits);
        CHECK(s.limits->store == coagent::limit_store_kind::redis);
        CHECK(s.limits->redis_url == "redis://:s3cret@10.0.0.5:7000/2");
        CHECK(s.limits->key_prefix == "proj:");  // project over global
        CHECK(coagent::setting_value(s, "retry.budget.tokenRatio") == json::value(0.25));
    }
    ::setenv("COAGENT_REDIS_URL", "redis://127.0.0.1:6390/0", 1);
    {
        const auto store = settings_store::load(dir.global(), dir.project());
        CHECK(store.current().limits->redis_url == "redis://127.0.0.1:6390/0");  // env wins
    }
    ::setenv("COAGENT_REDIS_URL", "redis://:pw@nohost", 1);
    try {
        (void)settings_store::load(dir.global(), dir.project());
        FAIL("a malformed COAGENT_REDIS_URL was accepted");
    } catch (const settings_error& e) {
        CHECK(e.file == "$COAGENT_REDIS_URL");
        CHECK(e.key == "limits.redisUrl");
        CHECK(std::string(e.what()) ==
              "$COAGENT_REDIS_URL: key \"limits.redisUrl\": expected a Redis URL "
              "redis://[:password@]host:port/db (no port), found \"redis://***@nohost\"");
    }
    ::unsetenv("COAGENT_REDIS_URL");

    const auto error_of = [&](const std::string& text) {
        write_file(dir.global(), text);
        try {
            (void)settings_store::load(dir.global(), dir.project());
        } catch (const settings_error& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    const std::string g = dir.global().string();
    CHECK(error_of(R"({"retry":{"budget":{"maxTokens":0}}})") ==
          g + ": key \"retry.budget.maxTokens\": expected an integer from 1 to 1000, found 0");
    CHECK(error_of(R"({"retry":{"budget":{"maxTokens":1001}}})") ==
          g + ": key \"retry.budget.maxTokens\": expected an integer from 1 to 1000, found 1001");
    CHECK(error_of(R"({"retry":{"budget":{"tokenRatio":0}}})") ==
          g + ": key \"retry.budget.tokenRatio\": expected a number greater than 0 and at most "
              "1000 (three decimal places), found 0");
    CHECK(error_of(R"({"retry":{"budget":{"tokenRatio":"0.1"}}})") ==
          g + ": key \"retry.budget.tokenRatio\": expected a number greater than 0 and at most "
              "1000 (three decimal places), found \"0.1\"");
    CHECK(error_of(R"({"retry":{"budget":{"tokenRatio":0.0001}}})").find("tokenRatio") !=
          std::string::npos);  // rounds to 0 thousandths
    CHECK(error_of(R"({"retry":{"budget":true}})") ==
          g + ": key \"retry.budget\": expected an object, found true");
    CHECK(
        error_of(R"({"limits":{"store":"memcached"}})") ==
        g + ": key \"limits.store\": expected one of \"local\" or \"redis\", found \"memcached\"");
    CHECK(error_of(R"({"limits":{"redisUrl":"http://u:pw@h:1/0"}})") ==
          g + ": key \"limits.redisUrl\": expected a Redis URL redis://[:password@]host:port/db "
              "(the scheme must be redis), found \"http://***@h:1/0\"");
    CHECK(error_of(R"({"limits":{"redisUrl":"redis://h:1/x"}})")
              .find("(the database must be a "
                    "number") != std::string::npos);
    CHECK(error_of(R"({"limits":{"redisUrl":7}})") ==
          g + ": key \"limits.redisUrl\": expected a Redis URL redis://[:password@]host:port/db, "
              "found 7");
    CHECK(error_of(R"({"limits":{"keyPrefix":"a{b}"}})") ==
          g + ": key \"limits.keyPrefix\": expected a non-empty string without '{' or '}' (the "
              "keys' hash tags use them), found \"a{b}\"");
    CHECK(error_of(R"({"limits":{"keyPrefix":""}})").find("non-empty") != std::string::npos);

    std::string why;
    const auto e = coagent::parse_redis_url("redis://user:pw@[::1]:6380/3", why);
    REQUIRE(e);
    CHECK(e->host == "::1");
    CHECK(e->port == 6380);
    CHECK(e->db == 3);
    CHECK(e->user == "user");
    CHECK(e->password == "pw");
    const auto d = coagent::parse_redis_url("redis://127.0.0.1:6379", why);
    REQUIRE(d);
    CHECK(d->db == 0);
    CHECK_FALSE(d->password);
}

TEST_CASE("retry.longWait: \"fail\" by default, each name read, layered (issue 20)",
          "[settings][long_wait]") {
    temp_dir d;
    CHECK(coagent::settings{}.retry.long_wait == coagent::long_wait_policy::fail);
    const std::vector<std::pair<std::string, coagent::long_wait_policy>> names = {
        {"fail", coagent::long_wait_policy::fail},
        {"fallback", coagent::long_wait_policy::fallback},
        {"park", coagent::long_wait_policy::park},
        {"fallback,park", coagent::long_wait_policy::fallback_park},
    };
    for (const auto& [name, policy] : names) {
        INFO(name);
        write_file(d.global(), R"({"retry":{"maxDelayMs":60000,"longWait":")" + name + "\"}}");
        auto store = settings_store::load(d.global(), d.project());
        CHECK(store.warnings().empty());
        CHECK(store.current().retry.long_wait == policy);
        CHECK(coagent::setting_value(store.current(), "retry.longWait") == json::value(name));
    }
    write_file(d.project(), R"({"retry":{"longWait":"fail"}})");
    CHECK(settings_store::load(d.global(), d.project()).current().retry.long_wait ==
          coagent::long_wait_policy::fail);  // the project file over the global one
}

// Broken configuration files, table-driven (issue 7): settings.json, models.json and auth.json
// with wrong types, invalid JSON, an empty file, an unreadable file. Each row is checked twice:
//  - in the library (settings_store::load, models_config::load, file_auth_storage): one
//    settings_error naming the file, the key, what was expected and what was found;
//  - through the coagent executable (COAGENT_DIR pointing at the broken file): exit code 2 and
//    exactly one line on stderr, "coagent: <that error>", nothing on stdout.
// Nothing is ever overwritten: the broken file is byte-identical afterwards and no other file
// appears next to it, also when coagent would have written it (persist_global for
// settings.json, a usage-limit block for auth.json). Unknown keys warn (settings.json) and are
// kept when coagent rewrites a file.

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/providers/http_protocol.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/models_config.hpp>
#include <coagent/runtime/json_input.hpp>
#include <coagent/session/config_file.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <catch2/catch.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace coagent;
namespace fs = std::filesystem;

namespace {

struct temp_dir {
    fs::path path;
    temp_dir() {
        static std::atomic<unsigned> counter{0};
        path = fs::temp_directory_path() / ("coagent-bad-config-" + std::to_string(::getpid()) +
                                            "-" + std::to_string(counter.fetch_add(1)));
        fs::remove_all(path);
        fs::create_directories(path);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
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

/// Every file under `dir`, relative, sorted (to see that nothing was added or replaced); the
/// "<file>.lock" files auth.json's writers lock are not content and left out.
std::vector<std::string> listing(const fs::path& dir) {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir))
        if (e.path().extension() != ".lock") out.push_back(fs::relative(e.path(), dir).string());
    std::sort(out.begin(), out.end());
    return out;
}

enum class file_kind { settings, models, auth };

std::string_view file_name(file_kind k) {
    switch (k) {
        case file_kind::settings:
            return "settings.json";
        case file_kind::models:
            return "models.json";
        case file_kind::auth:
            return "auth.json";
    }
    return "";
}

/// What `content` means: a file's text, or `directory` for a file that cannot be read.
inline const std::string directory = "<a directory>";

struct bad_case {
    file_kind kind;
    std::string what;      // the row's name
    std::string content;   // the file's text, or `directory`
    std::string key;       // expected settings_error::key ("" = the whole file)
    std::string expected;  // expected settings_error::expected
    std::string found;     // a part of settings_error::found
};

// A file one byte over the limit of config files (config_file::max_bytes, 4 MiB), valid JSON.
std::string too_large_file() {
    std::string s = R"({"x":")";
    s.append(config_file::max_bytes + 1 - s.size() - 2, 'a');
    s += "\"}";
    return s;
}

constexpr const char* non_finite_expected = "a number within the double range (about ±1.8e308)";
constexpr const char* too_large_expected = "a file of at most 4194304 bytes (4 MiB)";

const std::vector<bad_case>& cases() {
    static const std::vector<bad_case> c = {
        // settings.json
        {file_kind::settings, "wrong type: boolean", R"({"retry":{"enabled":"yes"}})",
         "retry.enabled", "a boolean (true or false)", R"("yes")"},
        {file_kind::settings, "wrong type: integer", R"({"retry":{"maxRetries":"three"}})",
         "retry.maxRetries", "a non-negative integer", R"("three")"},
        {file_kind::settings, "wrong type: group", R"({"compaction":7})", "compaction", "an object",
         "7"},
        {file_kind::settings, "wrong type: choice", R"({"retry":{"jitter":"lots"}})",
         "retry.jitter", "", R"("lots")"},
        {file_kind::settings, "wrong type: top level", R"([{"retry":{}}])", "",
         "a JSON object at the top level", "[{"},
        {file_kind::settings, "invalid JSON", "{\n  \"retry\": {\"enabled\": tru}\n}", "",
         "valid JSON", ""},
        {file_kind::settings, "invalid JSON: truncated", R"({"retry":{"enabled":true)", "",
         "valid JSON", ""},
        {file_kind::settings, "empty file", "", "", "a JSON object", "empty"},
        {file_kind::settings, "blank file", " \n\t\n", "", "a JSON object", "empty"},
        {file_kind::settings, "unreadable file", directory, "", "", "Is a directory"},
        {file_kind::settings, "number beyond a double",
         R"({"retry":{"enabled":true},"x":{"y":[1,1e400]}})", "x.y[1]", non_finite_expected,
         "out of range"},
        {file_kind::settings, "larger than 4 MiB", too_large_file(), "", too_large_expected,
         "larger"},
        // models.json
        {file_kind::models, "wrong type: providers", R"({"providers":[]})", "providers",
         "an object of providers", "[]"},
        {file_kind::models, "wrong type: baseUrl",
         R"({"providers":{"local":{"baseUrl":5,"api":"openai-completions","models":[{"id":"m1"}]}}})",
         "providers.local.baseUrl", "an http:// or https:// URL", "5"},
        {file_kind::models, "wrong type: contextWindow",
         R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions","models":[{"id":"m1","contextWindow":"big"}]}}})",
         "providers.local.models[0].contextWindow", "a positive integer", R"("big")"},
        {file_kind::models, "wrong value: api",
         R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"grpc","models":[{"id":"m1"}]}}})",
         "providers.local.api",
         "\"openai-completions\", \"openai-responses\" or \"anthropic-messages\"", R"("grpc")"},
        {file_kind::models, "missing: models",
         R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions"}}})",
         "providers.local.models", "a non-empty array of models", "missing"},
        {file_kind::models, "wrong type: top level", R"("local")", "",
         "a JSON object at the top level", R"("local")"},
        {file_kind::models, "invalid JSON", R"({"providers":{"local":})", "", "valid JSON", ""},
        {file_kind::models, "unreadable file", directory, "", "a readable file", "Is a directory"},
        {file_kind::models, "empty file", "", "", "a JSON object", "empty"},
        {file_kind::models, "blank file", "\xEF\xBB\xBF \r\n", "", "a JSON object", "empty"},
        {file_kind::models, "number beyond a double",
         R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions","models":[{"id":"m1","contextWindow":-1e999}]}}})",
         "providers.local.models[0].contextWindow", non_finite_expected, "out of range"},
        {file_kind::models, "larger than 4 MiB", too_large_file(), "", too_large_expected,
         "larger"},
        // auth.json
        {file_kind::auth, "wrong type: provider value", R"({"openai":"sk-123"})", "openai",
         "a credential object or an array of them", R"("sk-123")"},
        {file_kind::auth, "wrong type: key", R"({"openai":[{"type":"api_key","key":5}]})",
         "openai[0].key", "a non-empty string", "5"},
        {file_kind::auth, "wrong type: blockedUntil",
         R"({"openai":[{"type":"api_key","key":"sk-1","blockedUntil":"soon"}]})",
         "openai[0].blockedUntil", "an epoch time in ms (a non-negative integer)", R"("soon")"},
        {file_kind::auth, "wrong type: credential",
         R"({"openai":[{"type":"api_key","key":"sk-1"},7]})", "openai[1]", "a credential object",
         "7"},
        {file_kind::auth, "wrong type: top level", R"([1])", "", "a JSON object of providers",
         "[1]"},
        {file_kind::auth, "invalid JSON", R"({"openai":[{"type":"api_key","key":"sk-1"})", "",
         "valid JSON", ""},
        {file_kind::auth, "unreadable file", directory, "", "a readable file", "Is a directory"},
        {file_kind::auth, "empty file", "", "", "a JSON object", "empty"},
        {file_kind::auth, "blank file", "\n\n", "", "a JSON object", "empty"},
        {file_kind::auth, "number beyond a double",
         R"({"openai":[{"type":"api_key","key":"sk-1","n":1e400}]})", "openai[0].n",
         non_finite_expected, "out of range"},
        {file_kind::auth, "larger than 4 MiB", too_large_file(), "", too_large_expected, "larger"},
    };
    return c;
}

/// Creates the broken file of a row in `dir`; returns its path.
fs::path make_file(const fs::path& dir, const bad_case& c) {
    const fs::path p = dir / file_name(c.kind);
    if (c.content == directory)
        fs::create_directories(p / "not-a-file");
    else
        write_file(p, c.content);
    return p;
}

/// Loads the row's file the way coagent does; returns the error (or nullopt if none).
std::optional<settings_error> load_error(const bad_case& c, const fs::path& file) {
    try {
        switch (c.kind) {
            case file_kind::settings:
                (void)settings_store::load(file, file.parent_path() / "project" / "settings.json");
                break;
            case file_kind::models:
                (void)models_config::load(file);
                break;
            case file_kind::auth:
                file_auth_storage{file};
                break;
        }
    } catch (const settings_error& e) {
        return e;
    }
    return std::nullopt;
}

struct process_result {
    int exit_code = -1;
    std::string out, err;
};

/// Runs coagent with COAGENT_DIR=dir (cwd = dir, so there is no project settings file).
process_result run_coagent(const fs::path& dir, const std::string& args) {
    const fs::path out = dir.parent_path() / (dir.filename().string() + ".stdout");
    const fs::path err = dir.parent_path() / (dir.filename().string() + ".stderr");
    const std::string cmd = "cd '" + dir.string() + "' && COAGENT_DIR='" + dir.string() +
                            "' '" COAGENT_BIN "' " + args + " </dev/null >'" + out.string() +
                            "' 2>'" + err.string() + "'";
    const int status = std::system(cmd.c_str());
    process_result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = read_text(out);
    r.err = read_text(err);
    fs::remove(out);
    fs::remove(err);
    return r;
}

std::string coagent_args(file_kind k) {
    // settings.json is read by every mode; models.json and auth.json only for an HTTP provider
    switch (k) {
        case file_kind::settings:
            return "-p hi --no-session --provider faux";
        case file_kind::models:
            return "-p hi --no-session --provider local";
        case file_kind::auth:
            return "-p hi --no-session --provider openai";
    }
    return "";
}

}  // namespace

TEST_CASE("bad configuration: one error naming file, key, expected and found, nothing overwritten",
          "[config]") {
    for (const auto& c : cases()) {
        DYNAMIC_SECTION(file_name(c.kind) << ": " << c.what) {
            temp_dir dir;
            const fs::path file = make_file(dir.path, c);
            const auto before = listing(dir.path);
            const std::string text_before = c.content == directory ? "" : read_text(file);

            // the library: one settings_error with the four parts
            const auto e = load_error(c, file);
            REQUIRE(e);
            CHECK(e->file == file.string());
            CHECK(e->key == c.key);
            if (!c.expected.empty()) CHECK(e->expected == c.expected);
            CHECK_THAT(e->found, Catch::Contains(c.found));
            const std::string what = e->what();
            CHECK(what.starts_with(file.string() + ":"));
            if (!c.key.empty()) CHECK_THAT(what, Catch::Contains("key \"" + c.key + "\""));
            if (e->expected == "valid JSON") {
                CHECK(e->line > 0);  // file:line:col
                CHECK(e->column > 0);
                CHECK(what.starts_with(file.string() + ":" + std::to_string(e->line) + ":" +
                                       std::to_string(e->column) + ":"));
            }

            // the executable: exit 2, one line on stderr that is this error
            const auto r = run_coagent(dir.path, coagent_args(c.kind));
            CHECK(r.exit_code == 2);
            CHECK(r.out.empty());
            CHECK(r.err == "coagent: " + what + "\n");

            // nothing was overwritten or added
            CHECK(listing(dir.path) == before);
            if (c.content != directory) CHECK(read_text(file) == text_before);
        }
    }
}

TEST_CASE("bad configuration found later: a broken file is not overwritten by coagent's own writes",
          "[config]") {
    // settings.json: persist_global (the RPC set_auto_retry / TUI toggle) after the file broke
    for (const auto& c : cases()) {
        if (c.kind == file_kind::models) continue;  // coagent never writes models.json
        DYNAMIC_SECTION(file_name(c.kind) << ": " << c.what) {
            temp_dir dir;
            const fs::path file = dir.path / file_name(c.kind);
            if (c.kind == file_kind::settings) {
                // persisting retry.enabled replaces a bad retry.enabled: that is the write asked
                // for
                if (c.key == "retry.enabled") continue;
                write_file(file, R"({"retry":{"enabled":true}})");
                auto store = settings_store::load(file, dir.path / "project" / "settings.json");
                fs::remove(file);
                make_file(dir.path, c);
                const auto before = listing(dir.path);
                const std::string text = c.content == directory ? "" : read_text(file);
                bool threw = false;
                try {
                    store.persist_global("retry.enabled", json::value(false));
                } catch (const settings_error& e) {
                    threw = true;
                    CHECK(e.file == file.string());
                    CHECK_THAT(std::string(e.what()), Catch::Contains(file.string()));
                }
                // an empty file holds nothing to keep: it is the one broken file persist may
                // replace
                if (c.content.find_first_not_of(" \t\r\n") == std::string::npos &&
                    c.content != directory) {
                    CHECK_FALSE(threw);
                    continue;
                }
                CHECK(threw);
                CHECK(listing(dir.path) == before);
                if (c.content != directory) CHECK(read_text(file) == text);
                CHECK(store.current().retry.enabled);  // the failed write changed nothing
            } else {
                // auth.json: a usage limit after the file broke is kept in memory, not written
                write_file(
                    file,
                    R"({"openai":[{"type":"api_key","key":"sk-1"},{"type":"api_key","key":"sk-2"}]})");
                std::ostringstream log;
                auto logger = std::make_shared<spdlog::logger>(
                    "auth", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
                file_auth_storage auth(
                    file, [] { return std::int64_t{1'700'000'000'000}; }, logger);
                REQUIRE(auth.api_key("openai", "s1") == "sk-1");
                fs::remove(file);
                make_file(dir.path, c);
                const auto before = listing(dir.path);
                const std::string text = c.content == directory ? "" : read_text(file);
                CHECK(auth.mark_usage_limit_reached("openai", "s1",
                                                    1000));  // switched to sk-2 in memory
                CHECK(auth.api_key("openai", "s1") == "sk-2");
                CHECK(listing(dir.path) == before);
                if (c.content != directory) CHECK(read_text(file) == text);
                CHECK_THAT(log.str(), Catch::Contains(file.string()));
            }
        }
    }
}

TEST_CASE("unknown keys: settings.json warns once per key and keeps them, auth.json keeps them",
          "[config]") {
    temp_dir dir;
    SECTION("settings.json") {
        const fs::path file = dir.path / "settings.json";
        write_file(
            file,
            R"({"retry":{"enabled":true,"provider":"x"},"quietStartup":true,"theme":{"name":"dark"}})");
        auto store = settings_store::load(file, dir.path / "project" / "settings.json");
        std::vector<std::string> keys;
        for (const auto& w : store.warnings()) {
            keys.push_back(w.key);
            CHECK(w.file == file.string());
            CHECK(w.message() ==
                  file.string() + ": unknown key \"" + w.key + "\" (kept, not used)");
        }
        CHECK(keys == std::vector<std::string>{"retry.provider", "quietStartup", "theme"});
        store.persist_global("retry.enabled", json::value(false));
        const auto v = json::parse(read_text(file)).as_object();
        CHECK(v.at("retry").at("provider") == "x");
        CHECK(v.at("retry").at("enabled") == false);
        CHECK(v.at("quietStartup") == true);
        CHECK(v.at("theme").at("name") == "dark");

        // and through coagent: one warning line per unknown key, then the prompt runs
        const auto r = run_coagent(
            dir.path, "--provider faux -p hi --no-session --faux-script '[{\"text\":\"ok\"}]'");
        CHECK(r.exit_code == 0);
        CHECK(r.out == "ok\n");
        CHECK(r.err ==
              "warning: " + file.string() + ": unknown key \"retry.provider\" (kept, not used)\n" +
                  "warning: " + file.string() +
                  ": unknown key \"quietStartup\" (kept, not used)\n" +
                  "warning: " + file.string() + ": unknown key \"theme\" (kept, not used)\n");
    }
    SECTION("auth.json: other credential types and unknown fields survive a rewrite") {
        const fs::path file = dir.path / "auth.json";
        write_file(
            file,
            R"({"openai":[{"type":"api_key","key":"sk-1","label":"work"},{"type":"api_key","key":"sk-2"}],)"
            R"("anthropic":{"type":"oauth","refresh":"r","expires":1},"note":{"type":"other"}})");
        file_auth_storage auth(file, [] { return std::int64_t{1'700'000'000'000}; });
        REQUIRE(auth.api_key("openai", "s1") == "sk-1");
        CHECK(auth.mark_usage_limit_reached("openai", "s1", 1000));
        const auto v = json::parse(read_text(file)).as_object();
        CHECK(v.at("openai").at(0).at("label") == "work");
        CHECK(v.at("openai").at(0).at("blockedUntil") == 1'700'000'001'000);
        CHECK(v.at("anthropic") == json::parse(R"({"type":"oauth","refresh":"r","expires":1})"));
        CHECK(v.at("note") == json::parse(R"({"type":"other"})"));
    }
}

TEST_CASE("fixed finding 4: models.json and auth.json warn once per unknown key and keep it",
          "[config]") {
    temp_dir dir;
    write_file(dir.path / "settings.json", R"({"retry":{"enabled":false}})");
    const fs::path models = dir.path / "models.json";
    // the reference agent's keys coagent does not use (compat, cost, reasoning, input) are not
    // warned about; a typo is
    write_file(
        models,
        R"({"providers":{"local":{"baseUrl":"http://127.0.0.1:1/v1","api":"openai-completions",)"
        R"("compat":{},"timeoutMs":5,"models":[{"id":"m1","cost":{},"reasoning":true,"contextWindw":9},)"
        R"({"id":"m2","contextWindw":9}]}},"version":2,"providers2":{}})");
    const fs::path auth = dir.path / "auth.json";
    write_file(
        auth,
        R"({"local":[{"type":"api_key","key":"sk-1","label":"work"},{"type":"api_key","key":"sk-2","label":"x"}],)"
        R"("anthropic":{"type":"oauth","refresh":"r","expires":1}})");

    const auto c = models_config::load(models);
    std::vector<std::string> keys;
    for (const auto& w : c.warnings()) {
        keys.push_back(w.key);
        CHECK(w.file == models.string());
    }
    CHECK(keys == std::vector<std::string>{"version", "providers2", "providers.local.timeoutMs",
                                           "providers.local.models[0].contextWindw",
                                           "providers.local.models[1].contextWindw"});
    CHECK(c.resolve("local", "m1").id == "m1");

    file_auth_storage a(auth, [] { return std::int64_t{1'700'000'000'000}; });
    keys.clear();
    for (const auto& w : a.warnings()) {
        keys.push_back(w.key);
        CHECK(w.file == auth.string());
    }
    CHECK(keys ==
          std::vector<std::string>{"local[0].label", "local[1].label"});  // oauth: not coagent's
    REQUIRE(a.api_key("local", "s1") == "sk-1");
    CHECK(a.mark_usage_limit_reached("local", "s1", 1000));
    const auto v = json::parse(read_text(auth)).as_object();
    CHECK(v.at("local").at(0).at("label") == "work");  // kept when rewritten

    // coagent prints them, one line each, before anything else (the prompt then fails: no server)
    const auto r = run_coagent(dir.path, "-p hi --no-session --provider local");
    const std::string w = "warning: ";
    CHECK(r.err.starts_with(
        w + models.string() + ": unknown key \"version\" (kept, not used)\n" + w + models.string() +
        ": unknown key \"providers2\" (kept, not used)\n" + w + models.string() +
        ": unknown key \"providers.local.timeoutMs\" (kept, not used)\n" + w + models.string() +
        ": unknown key \"providers.local.models[0].contextWindw\" (kept, not used)\n" + w +
        models.string() +
        ": unknown key \"providers.local.models[1].contextWindw\" (kept, not used)\n" + w +
        auth.string() + ": unknown key \"local[0].label\" (kept, not used)\n" + w + auth.string() +
        ": unknown key \"local[1].label\" (kept, not used)\n"));
}

TEST_CASE("fixed bug: an unreadable models.json (here a directory) is an error naming the file",
          "[config]") {
    // models_config::load reads through std::ifstream, which opens a directory and then reads
    // nothing: the error is lost and coagent runs with the built-in providers only. settings.json
    // and auth.json report "<file>: cannot read it: Is a directory" (exit 2).
    temp_dir dir;
    const bad_case c{file_kind::models, "unreadable file", directory, "", "a readable file", ""};
    const fs::path file = make_file(dir.path, c);
    const auto e = load_error(c, file);
    REQUIRE(e);
    CHECK(e->file == file.string());
}

TEST_CASE(
    "issue 17 item 3: an API key over cleartext http:// to a host that is not loopback is "
    "refused unless the provider says allowInsecureHttp",
    "[config][issue-17]") {
    temp_dir dir;
    const fs::path models = dir.path / "models.json";
    const auto provider = [](const std::string& url, const std::string& extra) {
        return R"({"providers":{"lan":{"api":"openai-completions","baseUrl":")" + url +
               R"(","apiKey":"sk-secret")" + extra + R"(,"models":[{"id":"m"}]}}})";
    };
    // refused: exit 2 before any connection, naming the provider, the host and the setting
    write_file(models, provider("http://192.0.2.7:8080/v1", ""));
    auto r = run_coagent(dir.path, "-p hi --no-session --provider lan");
    CHECK(r.exit_code == 2);
    CHECK(r.out.empty());
    CHECK(r.err == "coagent: " + models.string() +
                       ": provider lan: baseUrl http://192.0.2.7:8080/v1 would send the API key "
                       "in cleartext to 192.0.2.7, which is not a loopback address: use https://, "
                       "or set \"allowInsecureHttp\": true in this provider's entry of models.json "
                       "to allow it\n");
    write_file(models, provider("http://llm.lan/v1", ""));
    r = run_coagent(dir.path, "-p hi --no-session --provider lan");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("in cleartext to llm.lan,"));

    // the library says the same (models_config → http_provider options)
    auto cfg = models_config::load(models);
    auto opts = cfg.provider_options("lan", "m", provider_settings{});
    CHECK_FALSE(opts.allow_insecure_http);
    CHECK_THROWS_WITH(http_provider(opts), Catch::Contains("not a loopback address"));

    // allowed: the setting, loopback hosts, https, or no key at all
    write_file(models, provider("http://192.0.2.7:8080/v1", R"(,"allowInsecureHttp":true)"));
    cfg = models_config::load(models);
    CHECK(cfg.warnings().empty());
    opts = cfg.provider_options("lan", "m", provider_settings{});
    CHECK(opts.allow_insecure_http);
    CHECK_NOTHROW(http_provider(opts));
    for (const std::string url :
         {"http://127.0.0.1:9/v1", "http://127.1.2.3/v1", "http://localhost:8080/v1",
          "http://[::1]:8080/v1", "https://192.0.2.7/v1"}) {
        INFO(url);
        write_file(models, provider(url, ""));
        opts = models_config::load(models).provider_options("lan", "m", provider_settings{});
        CHECK_NOTHROW(http_provider(opts));
    }
    write_file(
        models,
        R"({"providers":{"lan":{"api":"openai-completions","baseUrl":"http://192.0.2.7/v1","models":[{"id":"m"}]}}})");
    opts = models_config::load(models).provider_options("lan", "m", provider_settings{});
    CHECK_NOTHROW(http_provider(opts));  // nothing secret to send

    // a wrong type is a settings_error like any other key
    write_file(models, provider("http://192.0.2.7/v1", R"(,"allowInsecureHttp":"yes")"));
    r = run_coagent(dir.path, "-p hi --no-session --provider lan");
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err,
               Catch::Contains("key \"providers.lan.allowInsecureHttp\": expected a boolean"));
}

TEST_CASE("issue 17 item 3: an error never quotes a URL's userinfo or query string",
          "[config][issue-17]") {
    temp_dir dir;
    const fs::path models = dir.path / "models.json";
    // invalid in models.json (no host), and invalid for the provider (a space)
    for (const std::string url : {"http://user:pa55@/v1?key=sk-secret",
                                  "https://user:pa55@host name/v1?key=sk-secret#frag"}) {
        INFO(url);
        write_file(models, R"({"providers":{"lan":{"api":"openai-completions","baseUrl":")" + url +
                               R"(","models":[{"id":"m"}]}}})");
        const auto r = run_coagent(dir.path, "-p hi --no-session --provider lan");
        CHECK(r.exit_code == 2);
        CHECK_THAT(r.err, Catch::Contains("baseUrl"));
        CHECK_THAT(r.err, !Catch::Contains("pa55") && !Catch::Contains("sk-secret") &&
                              !Catch::Contains("frag") && !Catch::Contains("user"));
    }
    CHECK(http_protocol::redact_url("https://u:p@h:1/v1?key=s#f") == "https://h:1/v1?…");
    CHECK(http_protocol::redact_url("http://h/v1") == "http://h/v1");
    CHECK(http_protocol::redact_url("not a url @x?y") == "not a url @x?…");
}

TEST_CASE(
    "issue 17 item 5: settings, models and auth files that are not regular files are refused, "
    "naming the file",
    "[config][issue-17]") {
    for (const auto kind : {file_kind::settings, file_kind::models, file_kind::auth}) {
        for (const std::string what : {"a pipe", "a character device"}) {
            DYNAMIC_SECTION(file_name(kind) << " -> " << what) {
                // a pipe that holds "{}" and has no writer left (read whole without blocking,
                // valid), or /dev/null
                int fds[2];
                REQUIRE(::pipe(fds) == 0);
                REQUIRE(::write(fds[1], "{}", 2) == 2);
                ::close(fds[1]);
                struct closer {
                    int fd;
                    ~closer() { ::close(fd); }
                } close_it{fds[0]};
                const std::string target = what == "a pipe"
                                               ? "/proc/self/fd/" + std::to_string(fds[0])
                                               : std::string("/dev/null");
                temp_dir dir;
                const fs::path file = dir.path / file_name(kind);
                fs::create_symlink(target, file);
                const bad_case c{kind, "not a regular file", "", "", "", ""};
                const auto e = load_error(c, file);
                REQUIRE(e);
                CHECK(e->file == file.string());
                CHECK(e->expected == "a regular file");
                CHECK(std::string(e->what()) ==
                      file.string() + ": not a regular file (" + what +
                          "); coagent reads configuration only from regular files");
            }
        }
    }
    // the project layer too: <cwd>/.coagent/settings.json -> /dev/stdin in RPC mode
    temp_dir dir;
    const fs::path project = dir.path / "project" / ".coagent" / "settings.json";
    fs::create_directories(project.parent_path());
    fs::create_symlink("/dev/stdin", project);
    const std::string cmd = "cd '" + (dir.path / "project").string() +
                            "' && echo '{}' | COAGENT_DIR='" + (dir.path / "home").string() +
                            "' '" COAGENT_BIN "' --provider faux --mode rpc --no-session >'" +
                            (dir.path / "out").string() + "' 2>'" + (dir.path / "err").string() +
                            "'";
    const int status = std::system(cmd.c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 2);
    CHECK(read_text(dir.path / "out").empty());
    CHECK(read_text(dir.path / "err") ==
          "coagent: " + project.string() +
              ": not a regular file (a pipe); coagent reads configuration only from regular "
              "files\n");
}

TEST_CASE("issue 17 item 5: a symlinked auth.json is locked and written at the resolved path",
          "[config][issue-17]") {
    temp_dir dir;
    const fs::path real = dir.path / "secrets" / "auth.json";
    write_file(real, R"({"local":[{"type":"api_key","key":"k1"},{"type":"api_key","key":"k2"}]})");
    const fs::path link = dir.path / "home" / "auth.json";
    fs::create_directories(link.parent_path());
    fs::create_symlink(real, link);
    file_auth_storage auth(link, [] { return std::int64_t{1000}; });
    CHECK(auth.api_key("local", "s1") == "k1");
    CHECK(auth.mark_usage_limit_reached("local", "s1", 5000));
    CHECK(fs::is_symlink(link));  // written through, not replaced
    CHECK(fs::exists(dir.path / "secrets" / "auth.json.lock"));
    CHECK_FALSE(fs::exists(dir.path / "home" / "auth.json.lock"));
    CHECK_THAT(read_text(real), Catch::Contains("\"blockedUntil\": 6000"));
    // a dangling symlink: written at its target, the link stays
    const fs::path link2 = dir.path / "home2" / "auth.json";
    fs::create_directories(link2.parent_path());
    const fs::path real2 = dir.path / "secrets2" / "auth.json";
    fs::create_directories(real2.parent_path());
    fs::create_symlink(real2, link2);
    config_file::write_atomically(link2, "{}\n", link2.string(), 0600);
    CHECK(fs::is_symlink(link2));
    CHECK(read_text(real2) == "{}\n");
    { config_file::lock l(link2); }
    CHECK(fs::exists(dir.path / "secrets2" / "auth.json.lock"));
    CHECK_FALSE(fs::exists(dir.path / "home2" / "auth.json.lock"));
}

TEST_CASE(
    "issue 17 item 7: usage-limit blocks are clamped to 7 days, and coagent auth --unblock "
    "lifts them",
    "[config][issue-17]") {
    temp_dir dir;
    const fs::path file = dir.path / "auth.json";
    constexpr std::int64_t now = 1'700'000'000'000;
    constexpr std::int64_t week = std::int64_t{7} * 24 * 60 * 60 * 1000;
    write_file(file,
               R"({"openai":[{"type":"api_key","key":"k1"},{"type":"api_key","key":"k2"}],)"
               R"("anthropic":[{"type":"api_key","key":"a1","blockedUntil":99999999999999999}],)"
               R"("note":{"type":"other","kept":true}})");
    {
        file_auth_storage auth(file, [] { return now; });
        CHECK(file_auth_storage::max_block_ms == week);
        // Retry-After: 99999999999 (seconds) on a usage-limit 429
        CHECK(auth.api_key("openai", "s") == "k1");
        CHECK(auth.mark_usage_limit_reached("openai", "s", std::int64_t{99999999999} * 1000));
        CHECK(auth.blocked_until("openai", 0) == now + week);
        // a block stored beyond 7 days (an older coagent) counts as 7 days from now
        CHECK(auth.blocked_until("anthropic", 0) == now + week);
    }
    CHECK_THAT(read_text(file), Catch::Contains("\"blockedUntil\": " + std::to_string(now + week)));

    // coagent auth --unblock openai: that provider's blocks only
    auto r = run_coagent(dir.path, "auth --unblock openai");
    CHECK(r.exit_code == 0);
    CHECK(r.err.empty());
    CHECK(r.out == "openai: 1 block lifted in " + file.string() + "\n");
    {
        file_auth_storage auth(file);
        CHECK(auth.blocked_until("openai", 0) == 0);
        CHECK(auth.blocked_until("anthropic", 0) > 0);
    }
    // without a provider: every block
    r = run_coagent(dir.path, "auth --unblock");
    CHECK(r.exit_code == 0);
    CHECK(r.out == "anthropic: 1 block lifted in " + file.string() + "\n");
    CHECK_THAT(read_text(file), !Catch::Contains("blockedUntil"));
    CHECK_THAT(read_text(file), Catch::Contains("\"kept\": true"));  // other entries kept
    r = run_coagent(dir.path, "auth --unblock");
    CHECK(r.exit_code == 0);
    CHECK(r.out == "no blocked credentials in " + file.string() + "\n");
    // a provider without credentials is an error naming it and the file
    r = run_coagent(dir.path, "auth --unblock nope");
    CHECK(r.exit_code == 2);
    CHECK(r.err == "coagent: " + file.string() + ": no credentials for provider nope\n");
    // auth without an action is a usage error
    r = run_coagent(dir.path, "auth");
    CHECK(r.exit_code == 2);
}

TEST_CASE("issue 17 item 6: invalid UTF-8 becomes U+FFFD where text enters", "[issue-17]") {
    const std::string r = "\xEF\xBF\xBD";
    CHECK(to_valid_utf8("plain caf\xC3\xA9 \xF0\x9F\x98\x80") ==
          "plain caf\xC3\xA9 \xF0\x9F\x98\x80");
    CHECK(to_valid_utf8("caf\xE9 au lait") == "caf" + r + " au lait");  // Latin-1
    CHECK(to_valid_utf8("\x80\xBF") == r + r);                          // stray continuations
    CHECK(to_valid_utf8("\xC0\xAF") == r + r);                          // overlong
    CHECK(to_valid_utf8("\xED\xA0\x80") == r + r + r);                  // a surrogate
    CHECK(to_valid_utf8("\xF4\x90\x80\x80") == r + r + r + r);          // beyond U+10FFFF
    CHECK(to_valid_utf8("\xE2\x82") == r);                              // truncated: one U+FFFD
    CHECK(to_valid_utf8("\xE2\x82x") == r + "x");
    // a provider's error body that is not UTF-8
    CHECK(http_protocol::http_error_text(503, "\xFF\xFE overloaded").text ==
          "503 " + r + r + " overloaded");
}

// coagent_crash_helper: the checking half of the crash-safety scripts in tests/integration/crash/.
//
//   check-session EVENTS SESSION_FILE   every message whose message_end is in EVENTS (the
//                                       stdout of a killed `coagent --mode rpc`; a torn last
//                                       line is ignored) is in SESSION_FILE, in order, and the
//                                       file loads (session_history::load)
//   auth-hammer FILE PROVIDER ROUNDS    ROUNDS usage-limit blocks on FILE through a fresh
//                                       file_auth_storage each (what concurrent coagent
//                                       processes do); prints "<key> <blockedUntil>" per block
//   check-auth FILE RECORDS...          FILE parses, and every "<key> <until>" record of the
//                                       RECORDS files is honoured (blockedUntil >= until)
//   json-get FILE KEY                   prints the value at dotted KEY of the JSON file FILE
//   watch FILE MS                       reads FILE over and over for MS ms: it must always
//                                       exist and parse as a JSON object (atomic replacement)
//   tool-session new DIR SIDE           a session in DIR on the faux provider whose first reply
//                                       calls the slow test tool `slow_side_effect` (it appends a
//                                       line to SIDE, prints "tool started", then waits 60 s;
//                                       resumed: at once);
//                                       the script kills it during the tool
//   tool-session continue FILE SIDE [idempotent]
//                                       resumes FILE with the same tool registered (idempotent
//                                       or not) and prompts "after the crash"; prints the roles
//                                       and texts of the request sent, then the reply (issue 21)
//
// Exit 0 when the check holds; 1 with the reason on stderr otherwise.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/session/history.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace coagent;
namespace fs = std::filesystem;

namespace {

int fail(const std::string& why) {
    std::cerr << "crash_helper: " << why << "\n";
    return 1;
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// What identifies a message across the event stream and the file.
std::string identity(const message& m) {
    std::string s(to_string(m.role));
    s += "|" + std::to_string(m.timestamp) + "|";
    if (m.role == message_role::assistant) s += std::string(to_string(m.stop)) + "|";
    s += text_of(m);
    return s;
}

int check_session(const fs::path& events_file, const fs::path& session_file) {
    // message_end events read from stdout before the kill
    std::vector<std::string> published;
    {
        std::istringstream in(read_text(events_file));
        std::vector<std::string> lines;
        for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
        for (std::size_t i = 0; i < lines.size(); ++i) {
            boost::system::error_code ec;
            auto v = json::parse(lines[i], ec);
            if (ec) {
                if (i + 1 == lines.size()) break;  // torn by the kill
                return fail(events_file.string() + ":" + std::to_string(i + 1) +
                            ": not JSON: " + lines[i].substr(0, 200));
            }
            if (!v.is_object()) continue;
            const auto* type = v.as_object().if_contains("type");
            if (!type || *type != "message_end") continue;
            try {
                published.push_back(identity(message_from_json(v.as_object().at("message"))));
            } catch (const std::exception& e) {
                return fail(events_file.string() + ":" + std::to_string(i + 1) +
                            ": bad message: " + e.what());
            }
        }
    }
    std::size_t size = 0;
    {
        std::error_code ec;
        size = fs::file_size(session_file, ec);
    }
    std::vector<std::string> stored;
    std::size_t warnings = 0;
    try {
        auto loaded = session_history::load(session_file);
        for (const auto& m : loaded.history.messages()) stored.push_back(identity(*m));
        for (const auto& w : loaded.warnings) {
            ++warnings;
            // only a torn last line may be skipped (the kill landed in the middle of a write)
            if (w.find("torn last line") == std::string::npos)
                return fail("unexpected warning: " + w);
        }
    } catch (const std::exception& e) {
        return fail(session_file.string() + " (" + std::to_string(size) +
                    " bytes) does not load: " + e.what());
    }
    // every published message is stored, in order (the file may hold more: written, not yet
    // published)
    std::size_t j = 0;
    for (std::size_t i = 0; i < published.size(); ++i) {
        while (j < stored.size() && stored[j] != published[i]) ++j;
        if (j == stored.size())
            return fail("published message " + std::to_string(i + 1) + " of " +
                        std::to_string(published.size()) + " is missing from " +
                        session_file.string() + ": " + published[i].substr(0, 200));
        ++j;
    }
    std::cout << "published " << published.size() << " stored " << stored.size() << " torn "
              << warnings << "\n";
    return 0;
}

int auth_hammer(const fs::path& file, const std::string& provider, int rounds) {
    for (int r = 0; r < rounds; ++r) {
        // a fresh storage per round: another process's view, re-read from the file
        file_auth_storage auth(file);
        const std::string session = "s" + std::to_string(::getpid()) + "-" + std::to_string(r);
        const std::string key = auth.api_key(provider, session);
        if (key.empty()) return fail("no credential for " + provider);
        const std::int64_t hint = 3'600'000 + r;
        const std::int64_t until = wall_clock_ms() + hint;
        (void)auth.mark_usage_limit_reached(provider, session, hint);
        std::cout << key << " " << until << "\n";
    }
    return 0;
}

int check_auth(const fs::path& file, const std::vector<fs::path>& records) {
    boost::system::error_code ec;
    const auto v = json::parse(read_text(file), ec);
    if (ec || !v.is_object()) return fail(file.string() + " does not parse: " + ec.message());
    std::map<std::string, std::int64_t> blocked;
    std::size_t credentials = 0;
    for (const auto& kv : v.as_object()) {
        if (!kv.value().is_array()) continue;
        for (const auto& c : kv.value().as_array()) {
            ++credentials;
            const auto& o = c.as_object();
            std::int64_t b = 0;
            if (const auto* x = o.if_contains("blockedUntil")) b = x->as_int64();
            blocked[std::string(o.at("key").as_string())] = b;
        }
    }
    std::size_t n = 0;
    for (const auto& r : records) {
        std::istringstream in(read_text(r));
        std::string key;
        std::int64_t until = 0;
        while (in >> key >> until) {
            ++n;
            auto it = blocked.find(key);
            if (it == blocked.end())
                return fail("credential " + key + " vanished from " + file.string());
            // the writer used a `now` taken after `until` was computed, and later writes only
            // raise a block (max): a smaller value means an update was lost
            if (it->second < until)
                return fail("lost update: " + key + " blockedUntil " + std::to_string(it->second) +
                            " < " + std::to_string(until) + " written by a process");
        }
    }
    std::cout << "credentials " << credentials << " blocks checked " << n << "\n";
    return 0;
}

int json_get(const fs::path& file, const std::string& dotted) {
    boost::system::error_code ec;
    json::value v = json::parse(read_text(file), ec);
    if (ec) return fail(file.string() + " does not parse: " + ec.message());
    const json::value* cur = &v;
    std::istringstream parts(dotted);
    for (std::string part; std::getline(parts, part, '.');) {
        if (!cur->is_object() || !cur->as_object().contains(part))
            return fail(dotted + ": not in " + file.string());
        cur = &cur->as_object().at(part);
    }
    std::cout << json::serialize(*cur) << "\n";
    return 0;
}

int watch(const fs::path& file, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    std::size_t reads = 0;
    while (std::chrono::steady_clock::now() < end) {
        std::ifstream in(file, std::ios::binary);
        if (!in) return fail(file.string() + " missing during a write");
        std::ostringstream s;
        s << in.rdbuf();
        boost::system::error_code ec;
        const auto v = json::parse(s.str(), ec);
        if (ec || !v.is_object())
            return fail(file.string() + " read as invalid JSON during a write (" +
                        std::to_string(s.str().size()) + " bytes)");
        ++reads;
    }
    std::cout << "reads " << reads << "\n";
    return 0;
}

}  // namespace

// the slow test tool: its side effect first (one line a run), then (`slow`) a long wait
tool_function slow_side_effect(fs::path side, bool slow) {
    return [side, slow](json::object) -> boost::asio::awaitable<tool_output> {
        {
            std::ofstream out(side, std::ios::app);
            out << "run\n";
        }
        std::cout << "tool started" << std::endl;
        if (slow) {
            boost::asio::steady_timer t(co_await boost::asio::this_coro::executor);
            t.expires_after(std::chrono::seconds(60));
            co_await t.async_wait(boost::asio::use_awaitable);
        }
        co_return tool_output{"side effect done", false};
    };
}

int tool_session(const std::vector<std::string>& a) {
    const bool resume = a[1] == "continue";
    const bool idempotent = a.size() == 5 && a[4] == "idempotent";
    boost::asio::io_context io;
    faux_options fo;
    fo.script = faux_script::parse(
        resume ? R"([{"text":"resumed"}])"
               : R"([{"toolCall":{"name":"slow_side_effect","arguments":{}}},{"text":"late"}])",
        "<crash helper>");
    auto faux = std::make_shared<faux_provider>(std::move(fo));
    session_options so;
    so.executor = io.get_executor();
    so.model_provider = faux;
    so.cwd = "/";
    if (resume)
        so.resume_file = a[2];
    else
        so.session_dir = a[2];
    agent_session session(std::move(so));
    session.register_tool({"slow_side_effect", "appends a line to a file, then waits", {}},
                          slow_side_effect(a[3], !resume), tool_options{idempotent});
    std::optional<prompt_result> result;
    std::exception_ptr failure;
    boost::asio::co_spawn(io, session.prompt(resume ? "after the crash" : "run the tool"),
                          [&](std::exception_ptr e, prompt_result r) {
                              failure = e;
                              result = std::move(r);
                          });
    io.run();
    if (failure) std::rethrow_exception(failure);
    for (const auto& r : faux->requests()) {
        std::cout << "request:";
        for (const auto& m : r.messages) std::cout << " " << m.role;
        std::cout << "\n";
        for (const auto& m : r.messages)
            if (m.role == "toolResult") std::cout << "toolResult: " << m.text << "\n";
    }
    if (!result || result->outcome != prompt_result::status::succeeded)
        return fail("the prompt did not succeed: " + (result ? result->error : "no result"));
    std::cout << "reply: " << text_of(*result->last_assistant) << std::endl;
    return 0;
}

int main(int argc, char** argv) {
    const std::vector<std::string> a(argv + 1, argv + argc);
    try {
        if (a.size() == 3 && a[0] == "check-session") return check_session(a[1], a[2]);
        if (a.size() == 4 && a[0] == "auth-hammer") return auth_hammer(a[1], a[2], std::stoi(a[3]));
        if (a.size() >= 2 && a[0] == "check-auth")
            return check_auth(a[1], {a.begin() + 2, a.end()});
        if (a.size() == 3 && a[0] == "json-get") return json_get(a[1], a[2]);
        if (a.size() == 3 && a[0] == "watch") return watch(a[1], std::stoi(a[2]));
        if ((a.size() == 4 || a.size() == 5) && a[0] == "tool-session" &&
            (a[1] == "new" || a[1] == "continue"))
            return tool_session(a);
    } catch (const std::exception& e) {
        return fail(e.what());
    }
    std::cerr
        << "usage: coagent_crash_helper check-session EVENTS FILE | auth-hammer FILE "
           "PROVIDER ROUNDS | "
           "check-auth FILE RECORDS... | json-get FILE KEY | watch FILE MS | tool-session new DIR "
           "SIDE | tool-session continue FILE SIDE [idempotent]\n";
    return 2;
}

// coagent: agent sessions with automatic retry — print, json, rpc and interactive modes, and
// `coagent classify` to see how an error text is classified.

#include <coagent/classify/classify.hpp>
#include <coagent/modes/app.hpp>
#include <coagent/modes/interactive_mode.hpp>
#include <coagent/modes/rpc_mode.hpp>
#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/runtime/json_input.hpp>
#include <coagent/session/settings_store.hpp>

#include <CLI/CLI.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/json/serialize.hpp>

#include <sys/prctl.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <iostream>

namespace {

int run_classify(const std::string& text, std::optional<int> status,
                 std::optional<std::int64_t> now) {
    auto c = coagent::classify_error_text(text, status, now.value_or(coagent::wall_clock_ms()));
    std::cout << boost::json::serialize(coagent::to_json(c)) << std::endl;
    return 0;
}

// `coagent auth --unblock [provider]`: lifts stored usage-limit blocks (docs/providers.md).
int run_unblock(const std::string& provider) {
    try {
        const auto file = coagent::coagent_dir() / "auth.json";
        coagent::file_auth_storage auth(file);
        const auto lifted = auth.unblock(
            provider.empty() ? std::nullopt : std::optional<std::string_view>(provider));
        if (lifted.empty()) std::cout << "no blocked credentials in " << file.string() << "\n";
        for (const auto& [name, n] : lifted)
            std::cout << name << ": " << n << (n == 1 ? " block" : " blocks") << " lifted in "
                      << file.string() << "\n";
        return 0;
    } catch (const coagent::settings_error& e) {
        std::cerr << "coagent: " << e.what() << "\n";
        return 2;
    }
}

// This process holds API keys in memory: no core dumps and no ptrace by other processes of the
// same user (PR_SET_DUMPABLE 0), unless COAGENT_ALLOW_CORE_DUMPS=1 (docs/reliability.md).
// Returns false (after the error line) for a value other than 1, 0 or empty.
bool set_dumpable() {
    const char* v = std::getenv("COAGENT_ALLOW_CORE_DUMPS");
    const std::string_view allow = v ? v : "";
    if (allow != "" && allow != "0" && allow != "1") {
        std::cerr << "coagent: COAGENT_ALLOW_CORE_DUMPS: expected 1 (allow core dumps) or 0, "
                     "found \""
                  << allow << "\"\n";
        return false;
    }
    if (allow != "1" && ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
        std::cerr << "coagent: warning: cannot turn core dumps off (prctl PR_SET_DUMPABLE): "
                  << std::strerror(errno) << "\n";
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    const auto std_fds = coagent::reserve_standard_descriptors();
    if (!set_dumpable()) return 2;
    CLI::App app{"coagent — LLM agent sessions with automatic retry (C++20, Asio)", "coagent"};
    app.set_version_flag("--version", std::string("coagent ") + COAGENT_VERSION);
    app.footer(
        "Exit codes: 0 the prompt succeeded; 1 it ended in an error; 2 usage or configuration "
        "error; "
        "130 interrupted.\nCore dumps are off; COAGENT_ALLOW_CORE_DUMPS=1 allows "
        "them.\nConfiguration: $COAGENT_DIR (default ~/.coagent): settings.json; "
        "project "
        "layer <cwd>/.coagent/settings.json.");

    coagent::app_options o;
    std::string mode_name;
    std::string message;
    std::string model;
    std::string session_dir, session_file, faux_log, trace_file;
    std::string faux_script;
    app.add_option("--mode", mode_name,
                   "interactive | print | json | rpc (default: interactive on a "
                   "terminal; print with -p)")
        ->check(CLI::IsMember({"interactive", "print", "json", "rpc"}));
    app.add_option("-p,--print", message,
                   "Run one prompt and print the reply (implies --mode print)");
    app.add_option("--provider", o.provider,
                   "Provider name (default: faux, the embedded offline provider)");
    app.add_option("--model", model, "Model id, or PROVIDER/ID");
    app.add_flag("--no-session", o.no_session, "Keep the session history in memory only");
    app.add_option("--session-dir", session_dir,
                   "Directory for session files (default: $COAGENT_DIR/sessions)");
    app.add_flag("--continue", o.continue_last, "Continue the latest session of this directory");
    app.add_option("--session", session_file, "Continue the session in this file");
    app.add_option("--faux-script", faux_script,
                   "Faux provider script: a JSON array of steps, inline or a file");
    app.add_option("--faux-log", faux_log,
                   "Faux provider: append one JSON line per request received to FILE");
    app.add_option("--trace-file", trace_file,
                   "Append span records (JSON lines: prompts, model calls, attempts) to FILE");
    std::string faux_window;  // checked below, with an error that says what is allowed
    app.add_option("--faux-context-window", faux_window,
                   "Faux provider: context window in tokens (a whole number, at least 1)");

    auto* classify_cmd = app.add_subcommand(
        "classify", "Classify an error text as the retry policy does; prints one JSON object");
    std::string classify_message;
    std::optional<int> classify_status;
    std::optional<std::int64_t> classify_now;
    classify_cmd->add_option("--message", classify_message, "The error text")->required();
    classify_cmd->add_option("--status", classify_status, "HTTP status the provider gave")
        ->check(CLI::Range(100, 599));
    classify_cmd->add_option("--now", classify_now,
                             "Current time in epoch ms (makes dated hints repeatable)");
    classify_cmd->footer(
        "Exit codes: 0 the decision was printed; 2 usage error (a bad or missing flag, --status "
        "outside 100..599).");

    auto* auth_cmd = app.add_subcommand(
        "auth",
        "Credentials in $COAGENT_DIR/auth.json: --unblock [PROVIDER] lifts usage-limit "
        "blocks");
    bool auth_unblock = false;
    std::string auth_provider;
    auth_cmd->add_flag("--unblock", auth_unblock,
                       "Lift the usage-limit blocks of PROVIDER's credentials (all providers "
                       "without one)");
    auth_cmd->add_option("provider", auth_provider, "The provider (as named in auth.json)");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // the error and where to look, not the whole help (docs/architecture.md "Executables")
        const char* help = classify_cmd->parsed() ? "coagent classify --help" : "coagent --help";
        std::cerr << "coagent: " << e.what() << "\nRun '" << help << "' for the flags.\n"
                  << std::flush;
        return 2;
    }
    const auto usage_error = [](const std::string& what) {
        std::cerr << "coagent: " << what << "\nRun 'coagent --help' for the flags.\n" << std::flush;
        return 2;
    };

    if (*classify_cmd) return run_classify(classify_message, classify_status, classify_now);
    if (*auth_cmd) {
        if (!auth_unblock) {
            std::cerr << "coagent auth: nothing to do: use --unblock [PROVIDER]\n";
            return 2;
        }
        return run_unblock(auth_provider);
    }

    if (app.count("--faux-context-window")) {
        const auto bad = [&] {
            return usage_error(
                "--faux-context-window: must be a whole number of tokens, at least "
                "1 (got " +
                faux_window + ")");
        };
        std::int64_t n = 0;
        const char* end = faux_window.data() + faux_window.size();
        const auto [ptr, ec] = std::from_chars(faux_window.data(), end, n);
        if (ec != std::errc() || ptr != end || n < 1) return bad();
        o.faux_context_window = n;
    }
    // contradictory flags are refused, never resolved silently (one wins over the other)
    const auto both = [&](const char* a, const char* b, const char* why) {
        return usage_error(std::string(a) + " and " + b + " cannot be used together: " + why);
    };
    const bool has_session = app.count("--session") > 0;
    if (o.no_session && o.continue_last)
        return both("--no-session", "--continue",
                    "--continue resumes a session file, --no-session keeps no file");
    if (o.no_session && has_session)
        return both("--no-session", "--session",
                    "--session resumes a session file, --no-session keeps no file");
    if (o.no_session && app.count("--session-dir"))
        return both("--no-session", "--session-dir", "--no-session writes no session file");
    if (o.continue_last && has_session)
        return both("--continue", "--session",
                    "each names the session to resume; give one of them");
    if (app.count("-p") && (mode_name == "rpc" || mode_name == "interactive"))
        return both("-p", mode_name == "rpc" ? "--mode rpc" : "--mode interactive",
                    "-p runs one prompt in print mode (or with --mode json)");

    if (!model.empty()) {
        if (auto slash = model.find('/'); slash != std::string::npos) {
            o.provider = model.substr(0, slash);
            o.model = model.substr(slash + 1);
        } else {
            o.model = model;
        }
    }
    o.model_explicit = app.count("--provider") > 0 || app.count("--model") > 0;
    o.stdout_closed = std_fds.stdout_closed;
    if (!session_dir.empty()) o.session_dir = session_dir;
    if (!session_file.empty()) o.session_file = session_file;
    if (!faux_log.empty()) o.faux_log = faux_log;
    if (!trace_file.empty()) o.trace_file = trace_file;
    if (!faux_script.empty()) o.faux_script = faux_script;
    if (app.count("-p")) o.message = coagent::to_valid_utf8(message);  // Latin-1 bytes: U+FFFD

    if (mode_name == "rpc") {
        o.mode = coagent::app_mode::rpc;
    } else if (mode_name == "json") {
        o.mode = coagent::app_mode::json;
    } else if (mode_name == "print" || (mode_name.empty() && o.message)) {
        o.mode = coagent::app_mode::print;
    } else {
        o.mode = coagent::app_mode::interactive;
    }
    if ((o.mode == coagent::app_mode::print || o.mode == coagent::app_mode::json) && !o.message) {
        std::cerr << "coagent: --mode " << (mode_name.empty() ? "print" : mode_name)
                  << " needs a message: -p MESSAGE\n";
        return 2;
    }

    try {
        boost::asio::io_context io;
        coagent::app_context ctx(io, o);
        switch (o.mode) {
            case coagent::app_mode::print:
            case coagent::app_mode::json:
                return coagent::run_print_mode(ctx);
            case coagent::app_mode::rpc:
                return coagent::run_rpc_mode(ctx);
            case coagent::app_mode::interactive:
                if (!::isatty(STDIN_FILENO) || !::isatty(STDOUT_FILENO)) {
                    std::cerr
                        << "coagent: not a terminal. Use -p MESSAGE for one prompt, or --mode rpc "
                           "to drive coagent over JSON lines.\n";
                    return 2;
                }
                return coagent::run_interactive_mode(ctx);
        }
    } catch (const coagent::config_error& e) {
        std::cerr << "coagent: " << e.what() << "\n";
        return 2;
    }
    return 0;
}

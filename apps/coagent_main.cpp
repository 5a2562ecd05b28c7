// coagent: agent sessions with automatic retry — print, json, rpc and interactive modes, and
// `coagent classify` to see how an error text is classified.

#include <coagent/classify/classify.hpp>
#include <coagent/modes/app.hpp>
#include <coagent/modes/interactive_mode.hpp>
#include <coagent/modes/limits_command.hpp>
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

// Everything stdin holds (the prompt of `echo text | coagent`); one trailing line break dropped.
std::string read_stdin() {
    std::string text;
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
        if (n > 0) {
            text.append(buf, static_cast<std::size_t>(n));
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    if (text.ends_with("\r\n"))
        text.resize(text.size() - 2);
    else if (text.ends_with('\n'))
        text.pop_back();
    return text;
}

bool blank(std::string_view s) {
    return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// --resume: the recent sessions of this directory, numbered on the terminal, and the one
// picked there (the terminal, not stdin, which may hold the prompt).
std::filesystem::path pick_session(coagent::app_context& ctx) {
    const std::string cwd = coagent::to_valid_utf8(std::filesystem::current_path().string());
    const auto sessions = coagent::recent_sessions(ctx.sessions_dir(), cwd, 10);
    if (sessions.empty())
        throw coagent::config_error("--resume: no session of " + cwd + " in " +
                                    ctx.sessions_dir().string());
    FILE* tty = std::fopen("/dev/tty", "r+");
    if (!tty)
        throw coagent::config_error(
            "--resume: picking a session needs a terminal; use --continue (the latest) or "
            "--session FILE");
    const std::string list = "Recent sessions of " + cwd + ":\n" +
                             coagent::format_session_choices(sessions) + "Resume which [1-" +
                             std::to_string(sessions.size()) + "]? ";
    std::fputs(list.c_str(), tty);
    std::fflush(tty);
    char line[64] = {};
    const bool got = std::fgets(line, sizeof line, tty) != nullptr;
    std::fclose(tty);
    const auto picked = got ? coagent::parse_session_choice(line, sessions.size()) : std::nullopt;
    if (!picked)
        throw coagent::config_error("--resume: expected a number from 1 to " +
                                    std::to_string(sessions.size()) + ", found \"" +
                                    std::string(line, std::strcspn(line, "\r\n")) + "\"");
    return sessions[*picked].file;
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
        "130 interrupted.\nThe prompt: MESSAGE, -p MESSAGE, or stdin when it is not a terminal "
        "(-p TEXT with stdin: TEXT, a blank line, then stdin).\nThe model without "
        "--provider/--model: "
        "defaultProvider/defaultModel in the settings, else the first of anthropic, openai and "
        "models.json's providers with a key, else faux (stderr says which).\nCore dumps are off; "
        "COAGENT_ALLOW_CORE_DUMPS=1 allows "
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
                   "terminal; print with -p, and with a MESSAGE or a piped stdin without one)")
        ->check(CLI::IsMember({"interactive", "print", "json", "rpc"}));
    app.add_option("-p,--print", message,
                   "Run one prompt and print the reply (implies --mode print); with a piped "
                   "stdin the prompt is MESSAGE, a blank line, then stdin's text")
        ->expected(0, 1);
    std::string positional;
    app.add_option("message", positional,
                   "The first message: on a terminal the interactive UI starts with it, "
                   "otherwise it runs in print mode (a piped stdin is the prompt too)");
    app.add_option("--provider", o.provider,
                   "Provider name (default: defaultProvider/defaultModel of the settings, else "
                   "the first of anthropic, openai, models.json's providers with an API key, "
                   "else faux, the embedded offline provider)");
    app.add_option("--model", model, "Model id, or PROVIDER/ID");
    app.add_flag("--no-session", o.no_session, "Keep the session history in memory only");
    app.add_flag("--no-markdown", o.no_markdown,
                 "Interactive mode: show replies as plain text, not rendered Markdown "
                 "(tui.markdown: false)");
    app.add_option("--session-dir", session_dir,
                   "Directory for session files (default: $COAGENT_DIR/sessions)");
    app.add_flag("-c,--continue", o.continue_last, "Continue the latest session of this directory");
    bool resume_pick = false;
    app.add_flag("-r,--resume", resume_pick,
                 "Pick one of this directory's recent sessions to continue");
    std::string list_pattern;
    app.add_option("--list-models", list_pattern,
                   "List the models (provider, id, context window, credential), those whose "
                   "provider/id contains PATTERN")
        ->expected(0, 1);
    app.add_option("--session", session_file, "Continue the session in this file");
    app.add_option("--faux-script", faux_script,
                   "Faux provider script: a JSON array of steps, inline or a file");
    app.add_option("--faux-log", faux_log,
                   "Faux provider: append one JSON line per request received to FILE");
    app.add_option("--trace-file", trace_file,
                   "Append span records (JSON lines: prompts, model calls, attempts) to FILE");
    std::vector<std::string> image_files;
    app.add_option("--image", image_files,
                   "Print and json mode: attach the image in FILE (PNG, JPEG, GIF or WebP) to "
                   "the prompt; repeatable")
        ->type_name("FILE")
        ->expected(1)
        ->allow_extra_args(false)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
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

    auto* limits_cmd = app.add_subcommand(
        "limits",
        "The limit state (limits.store): blocked credentials, model cooldowns, the retry budget "
        "per provider, active sessions per credential; --clear resets it");
    bool limits_json = false;
    bool limits_clear = false;
    std::string limits_provider;
    limits_cmd->add_flag("--json", limits_json, "Print one JSON object");
    limits_cmd->add_flag("--clear", limits_clear,
                         "Forget the shared state (with limits.store \"redis\") and lift "
                         "auth.json's usage-limit blocks");
    limits_cmd->add_option("--provider", limits_provider,
                           "With --clear: only this provider's budget, credential blocks and "
                           "model cooldowns");
    limits_cmd->footer(
        "Credentials are shown by the SHA-256 fingerprint of the key, never the key. With "
        "limits.store \"local\" only auth.json's blocks outlive a process, so only they are "
        "shown and cleared.\nExit codes: 0 done; 1 Redis unreachable; 2 usage or configuration "
        "error.");

    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // the error and where to look, not the whole help (docs/architecture.md "Executables")
        const char* help = classify_cmd->parsed() ? "coagent classify --help"
                           : limits_cmd->parsed() ? "coagent limits --help"
                                                  : "coagent --help";
        std::cerr << "coagent: " << e.what() << "\nRun '" << help << "' for the flags.\n"
                  << std::flush;
        return 2;
    }
    const auto usage_error = [](const std::string& what) {
        std::cerr << "coagent: " << what << "\nRun 'coagent --help' for the flags.\n" << std::flush;
        return 2;
    };

    if (*classify_cmd) return run_classify(classify_message, classify_status, classify_now);
    if (*limits_cmd) {
        if (!limits_provider.empty() && !limits_clear) {
            std::cerr << "coagent limits: --provider needs --clear (the listing shows every "
                         "provider)\nRun 'coagent limits --help' for the flags.\n";
            return 2;
        }
        if (limits_json && limits_clear) {
            std::cerr << "coagent limits: --json and --clear cannot be used together: --json "
                         "prints the state, --clear resets it\nRun 'coagent limits --help' for the "
                         "flags.\n";
            return 2;
        }
        return coagent::run_limits_command(
            limits_json, limits_clear,
            limits_provider.empty() ? std::nullopt : std::optional<std::string>(limits_provider));
    }
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
    if (resume_pick && (o.continue_last || has_session || o.no_session))
        return both("--resume",
                    o.no_session ? "--no-session" : (has_session ? "--session" : "--continue"),
                    "each names the session to resume (--no-session: none); give one of them");
    if (app.count("-p") && !message.empty() && !positional.empty())
        return both("-p MESSAGE", "MESSAGE", "give the prompt once");
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

    if (app.count("--list-models")) {
        try {
            boost::asio::io_context io;
            o.provider = "faux";  // no model is needed to list them
            coagent::app_context ctx(io, o);
            std::cout << coagent::format_model_list(ctx.catalog()->list(), list_pattern);
            return 0;
        } catch (const coagent::config_error& e) {
            std::cerr << "coagent: " << e.what() << "\n";
            return 2;
        }
    }

    // The prompt: -p MESSAGE or MESSAGE, and stdin when it is not a terminal (not in RPC mode,
    // where stdin is the protocol): `cat file | coagent -p explain` is "explain\n\n<file>".
    const bool tty_in = ::isatty(STDIN_FILENO) == 1, tty_out = ::isatty(STDOUT_FILENO) == 1;
    std::optional<std::string> prompt;
    if (!message.empty()) prompt = message;
    if (!positional.empty()) prompt = positional;
    const bool wants_stdin = mode_name != "rpc" && !tty_in && mode_name != "interactive";
    if (wants_stdin) {
        const std::string piped = read_stdin();
        if (!blank(piped)) prompt = prompt ? *prompt + "\n\n" + piped : piped;
    }
    if (prompt) o.message = coagent::to_valid_utf8(*prompt);  // Latin-1 bytes: U+FFFD

    if (mode_name == "rpc") {
        o.mode = coagent::app_mode::rpc;
    } else if (mode_name == "json") {
        o.mode = coagent::app_mode::json;
    } else if (mode_name == "interactive") {
        o.mode = coagent::app_mode::interactive;
    } else if (mode_name == "print" || app.count("-p") || (o.message && !(tty_in && tty_out))) {
        o.mode = coagent::app_mode::print;
    } else if (!tty_in && !o.message) {
        std::cerr << "coagent: no prompt: stdin is not a terminal and gave no text\n"
                     "usage: coagent [OPTIONS] [MESSAGE] | coagent -p MESSAGE | echo MESSAGE | "
                     "coagent | coagent --mode rpc   (coagent --help for the flags)\n";
        return 2;
    } else {
        o.mode = coagent::app_mode::interactive;  // with MESSAGE as its first prompt, if given
    }
    if ((o.mode == coagent::app_mode::print || o.mode == coagent::app_mode::json) && !o.message) {
        std::cerr << "coagent: --mode " << (mode_name.empty() ? "print" : mode_name)
                  << " needs a message: -p MESSAGE, MESSAGE, or a prompt on stdin\n";
        return 2;
    }
    if (o.mode == coagent::app_mode::rpc && o.message)
        return both("--mode rpc", "a message", "RPC mode takes its prompts as commands");
    if (!image_files.empty() && o.mode != coagent::app_mode::print &&
        o.mode != coagent::app_mode::json)
        return both("--image", o.mode == coagent::app_mode::rpc ? "--mode rpc" : "interactive mode",
                    "--image attaches images to the -p prompt (RPC: the prompt command's "
                    "images)");
    try {
        for (const auto& f : image_files) o.images.push_back(coagent::load_image_file(f));
    } catch (const coagent::config_error& e) {
        std::cerr << "coagent: " << e.what() << "\n";
        return 2;
    }

    try {
        boost::asio::io_context io;
        coagent::app_context ctx(io, o);
        if (resume_pick) ctx.set_session_file(pick_session(ctx));
        // (the TUI says it on its screen; a resumed session continues on the model it recorded)
        const bool resuming = o.continue_last || o.session_file || resume_pick;
        if (ctx.choice() && o.mode != coagent::app_mode::interactive && !resuming)
            std::cerr << coagent::model_choice_line(ctx.model_provider()->model(), *ctx.choice())
                      << "\n";
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

#pragma once
// What every mode of the coagent executable shares: the command-line options, the settings
// layers, and building a session (provider, history) from them.

#include <coagent/classify/classify.hpp>
#include <coagent/providers/faux_provider.hpp>
#include <coagent/providers/redis_limit_store.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/asio/io_context.hpp>

#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

namespace coagent {

enum class app_mode { interactive, print, json, rpc };

struct app_options {
    app_mode mode = app_mode::interactive;
    std::optional<std::string> message;  // -p, MESSAGE or stdin (interactive: the first prompt)
    std::vector<image_block> images;     // --image FILE…: sent with the print / json prompt
    std::string provider;  // empty: chosen by choose_model (settings, credentials, else faux)
    std::string model;     // empty: the provider's default
    /// --provider or --model was given: it wins over the model a resumed session recorded.
    bool model_explicit = false;
    std::optional<std::string> faux_script;
    std::optional<std::filesystem::path> faux_log;
    std::int64_t faux_context_window = 128000;
    bool no_session = false;
    bool no_markdown = false;  ///< --no-markdown: the terminal UI shows replies as plain text
    std::optional<std::filesystem::path> session_dir;
    bool continue_last = false;
    std::optional<std::filesystem::path> session_file;
    /// --trace-file: span records as JSON lines (wins over telemetry.traceFile)
    std::optional<std::string> trace_file;
    /// File descriptor 1 was closed when coagent started (reserve_standard_descriptors): RPC
    /// mode then exits 1 at once.
    bool stdout_closed = false;
};

/// Which of the descriptors 0, 1, 2 were closed at start; each closed one is reopened on
/// /dev/null first, so that no file coagent opens later (a session file, an epoll descriptor)
/// takes its number and receives another stream's bytes. Call it first thing in main.
struct standard_descriptors {
    bool stdin_closed = false;
    bool stdout_closed = false;
    bool stderr_closed = false;
};
standard_descriptors reserve_standard_descriptors() noexcept;

/// A configuration or usage problem: exit code 2, message shown as is.
class config_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// The image in `file` for --image and the TUI's `@file` attachments: PNG, JPEG, GIF or WebP
/// (told by its first bytes, not its name), at most max_image_file_bytes, base64-encoded.
/// Throws config_error naming the file: `<label>: no such file` …, the label "--image FILE"
/// when `label` is empty.
inline constexpr std::size_t max_image_file_bytes = std::size_t{20} * 1024 * 1024;
image_block load_image_file(const std::filesystem::path& file, std::string_view label = {});

class models_config;
class file_auth_storage;

/// A provider as the model choice sees it: its name, its first model, and where its
/// credential is ("ANTHROPIC_API_KEY", "auth.json", "models.json apiKey"; empty: none).
struct provider_candidate {
    std::string name;
    std::string first_model;
    std::string credential;
};

/// The model a run uses when the command line names none (docs/settings.md "Choosing the
/// model"): `provider`/`model` (empty model: the provider's first) and why, in words.
struct model_choice {
    std::string provider;
    std::string model;
    std::string reason;
};

/// The choice: defaultProvider / defaultModel of the settings (`origin`: the file that set
/// them) when set (defaultModel may be "provider/id"); otherwise the first candidate with a
/// credential — `candidates` come in the order anthropic, openai, then models.json's
/// providers in file order — with its first model (or defaultModel, when only that is set);
/// faux when none has a credential. Plain code: no I/O.
model_choice choose_model(const model_selection_settings& defaults, std::string_view origin,
                          const std::vector<provider_candidate>& candidates);

/// The line that says which model is in use and why: "coagent: using anthropic/claude… (…)".
std::string model_choice_line(const model_info& m, const model_choice& c);

/// The models of $COAGENT_DIR/models.json (and the built-ins) plus faux, for RPC set_model,
/// get_available_models and the model fallback. models.json and auth.json are read on first
/// use (a faux-only run never touches them); providers are built once and shared.
class app_catalog final : public model_catalog {
  public:
    app_catalog(std::filesystem::path dir, provider_settings limits,
                std::shared_ptr<provider> faux);
    ~app_catalog() override;

    /// The faux provider that "faux" names (built from the command line's --faux-* flags).
    void set_faux(std::shared_ptr<provider> faux) { faux_ = std::move(faux); }
    /// A shared limit store (limits.store "redis"): auth.json's credential blocks are shared
    /// through it (auth_storage::share_limits). Before the first make().
    void share_limits(std::shared_ptr<limit_store> store) { shared_ = std::move(store); }

    /// Throws config_error: unknown provider or model, broken models.json / auth.json, no key.
    std::shared_ptr<provider> make(std::string_view provider_name, std::string_view model_id);
    std::shared_ptr<provider> resolve(std::string_view provider_name, std::string_view model_id,
                                      std::string& error) override;
    /// faux, then every model of models.json (and the built-ins) whose provider has a key.
    std::vector<model_info> available() override;

    /// Every provider of models.json and the built-ins in choose_model's order (anthropic,
    /// openai, then the file's), with where its credential is. Throws config_error.
    std::vector<provider_candidate> candidates();

    /// One row of --list-models.
    struct listed_model {
        std::string provider, id;
        std::int64_t context_window = 0;
        std::string credential;  // empty: none
    };
    /// faux, then every model of every provider, with or without a credential.
    std::vector<listed_model> list();

  private:
    void load();
    // make() that throws model_selection_error for an unknown provider or model
    std::shared_ptr<provider> build(std::string_view provider_name, std::string_view model_id);

    std::filesystem::path dir_;
    provider_settings limits_;
    std::shared_ptr<provider> faux_;
    std::unique_ptr<models_config> models_;
    std::shared_ptr<file_auth_storage> auth_;
    std::shared_ptr<limit_store> shared_;
    std::vector<std::pair<std::string, std::shared_ptr<provider>>> cache_;  // selector → provider
};

/// The environment of a running coagent: options, settings, the provider.
/// The Redis store's options from the settings' `limits` group (redis_url already validated
/// by the settings), its warnings on stderr as the documented lines.
redis_limit_store_options redis_store_options(const limits_settings& ls);

class app_context {
  public:
    /// Loads settings ($COAGENT_DIR/settings.json, <cwd>/.coagent/settings.json) and builds the
    /// provider. Throws config_error (bad settings, bad faux script, unknown provider).
    app_context(boost::asio::io_context& io, app_options opts);

    /// A new session (or the resumed one for --continue / --session on the first call).
    /// `logger`: where the session's warnings go (default: stderr); the terminal UI passes
    /// one that does not draw over its screen.
    std::unique_ptr<agent_session> make_session(bool resume,
                                                std::shared_ptr<spdlog::logger> logger = {});

    boost::asio::io_context& io() noexcept { return io_; }
    const app_options& options() const noexcept { return opts_; }
    settings_store& settings_layers() noexcept { return store_; }
    std::shared_ptr<provider> model_provider() const noexcept { return provider_; }
    /// How the model was chosen when the command line named none (else nullopt).
    const std::optional<model_choice>& choice() const noexcept { return choice_; }
    const std::shared_ptr<app_catalog>& catalog() const noexcept { return catalog_; }
    const std::filesystem::path& dir() const noexcept { return dir_; }
    std::filesystem::path sessions_dir() const;
    /// The session file the first make_session(true) resumes (--resume's pick).
    void set_session_file(std::filesystem::path file) {
        opts_.session_file = std::move(file);
        opts_.continue_last = false;
    }

    /// The toggle of docs/architecture.md "Configuration" (TUI and RPC alike): sets the boolean
    /// setting `key` ("retry.enabled", "compaction.enabled") as a runtime override, so that the
    /// next new session has it too, then writes it to the global settings file. Returns the
    /// settings_error's text when either step failed (an override set stays), else empty.
    std::string override_and_persist(std::string_view key, bool value);

    /// The process's limit store (limits.store): every session of this process shares it.
    const std::shared_ptr<limit_store>& limits() const noexcept { return limits_; }
    /// Ends the limit store's background work (a Redis store sends what is queued first), so
    /// io().run() can return. Each mode calls it once its last prompt is over.
    void stop_limits();

  private:
    /// A resumed session continues on the model it recorded; config_error naming that model
    /// when it is not available now. An explicit --provider/--model wins and is recorded.
    void restore_recorded_model(agent_session& session);

    boost::asio::io_context& io_;
    app_options opts_;
    std::filesystem::path dir_;
    settings_store store_;
    std::shared_ptr<app_catalog> catalog_;
    std::shared_ptr<provider> provider_;
    std::shared_ptr<limit_store> limits_;
    std::optional<model_choice> choice_;
    std::shared_ptr<spdlog::logger> trace_log_;  // the span records' file, opened once
    // compiles the classifier while the constructor loads settings (members start before the
    // constructor's body runs); declared last, so joined first at destruction
    std::jthread classifier_warm_up_{warm_up_classifier};
};

/// --list-models: the rows whose "provider/id" contains `pattern` (case-insensitive), as an
/// aligned table with a header; a line saying so when none matches.
std::string format_model_list(const std::vector<app_catalog::listed_model>& rows,
                              std::string_view pattern);

/// The model a session file's history says the conversation was held on: the last
/// model_change entry that is not a fallback's temporary switch, else the model of its first
/// assistant reply; nothing for a session without either.
std::optional<std::pair<std::string, std::string>> recorded_model(const session_history& h);

/// A session file of this directory, for --resume and /resume.
struct session_summary {
    std::filesystem::path file;
    std::filesystem::file_time_type modified;
    std::string first_prompt;  ///< the first user message ("" if none)
};
/// The `max` latest session files in `dir` whose header cwd is `cwd`, newest first.
std::vector<session_summary> recent_sessions(const std::filesystem::path& dir,
                                             const std::string& cwd, std::size_t max);
/// One session as a person picks it: "2026-12-01 16:03  <first message, on one line>".
std::string session_choice_label(const session_summary& s);
/// The numbered list a person picks from: "1. 2026-12-01 16:03  <first message>", one a line.
std::string format_session_choices(const std::vector<session_summary>& sessions);
/// The index an answer ("2", " 2\n") picks among `count` choices; nullopt for anything else.
std::optional<std::size_t> parse_session_choice(std::string_view answer, std::size_t count);

/// The latest session file in `dir` whose header cwd is `cwd` (by modification time).
std::optional<std::filesystem::path> latest_session_file(const std::filesystem::path& dir,
                                                         const std::string& cwd);

/// The terminal UI's /settings: each retry.* key as "retry.maxRetries = 5  (<where>)", where
/// is the file that set it, "this session" for a runtime override, or "default".
std::vector<std::string> effective_retry_settings(const settings_store& store);

/// print / json mode: one prompt; returns the process exit code (0 ok, 1 error, 130 interrupted).
int run_print_mode(app_context& app);

/// The human line for an auto_retry_start: "Retrying (1/3) in 2s… — <error>".
std::string retry_progress_line(const auto_retry_start_event& e);
/// "Retry failed after N attempts: <error>".
std::string retry_failed_line(const auto_retry_end_event& e);
/// "Fallback: <from> -> <to>" (the reference's warning text).
std::string fallback_applied_line(const retry_fallback_applied_event& e);
/// "Fallback succeeded on <model>".
std::string fallback_succeeded_line(const retry_fallback_succeeded_event& e);
/// Print mode's line for a failed prompt: "Error: <error>", sanitised like every line above;
/// without a text "Error: <status> status code (no body)" (or "Error: Unknown error …").
std::string print_error_line(const prompt_result& r);

}  // namespace coagent

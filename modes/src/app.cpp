#include <coagent/modes/app.hpp>
#include <coagent/telemetry/span_telemetry.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/models_config.hpp>
#include <coagent/providers/redis_limit_store.hpp>
#include <coagent/runtime/json_input.hpp>
#include <coagent/session/history.hpp>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <iostream>

namespace coagent {

image_block load_image_file(const std::filesystem::path& file, std::string_view label) {
    const std::string name = label.empty() ? "--image " + file.string() : std::string(label);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
        throw config_error(
            name + ": " +
            (std::filesystem::exists(file, ec) ? "not a regular file" : "no such file"));
    const auto size = std::filesystem::file_size(file, ec);
    if (ec) throw config_error(name + ": cannot read: " + ec.message());
    if (size > max_image_file_bytes)
        throw config_error(name + ": " + std::to_string(size) + " bytes, more than the " +
                           std::to_string(max_image_file_bytes) + " an image may have");
    std::ifstream in(file, std::ios::binary);
    std::string bytes(static_cast<std::size_t>(size), '\0');
    if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
        throw config_error(name + ": cannot read: " + std::strerror(errno));
    // the type from the first bytes (a name can lie)
    const auto starts = [&](std::string_view magic, std::size_t at = 0) {
        return bytes.size() >= at + magic.size() && bytes.compare(at, magic.size(), magic) == 0;
    };
    std::string mime;
    if (starts("\x89PNG\r\n\x1a\n"))
        mime = "image/png";
    else if (starts("\xff\xd8\xff"))
        mime = "image/jpeg";
    else if (starts("GIF87a") || starts("GIF89a"))
        mime = "image/gif";
    else if (starts("RIFF") && starts("WEBP", 8))
        mime = "image/webp";
    else
        throw config_error(name + ": not a PNG, JPEG, GIF or WebP image");
    return image_block{base64_encode(bytes), std::move(mime)};
}

namespace fs = std::filesystem;

redis_limit_store_options redis_store_options(const limits_settings& ls) {
    std::string why;
    redis_limit_store_options ro;
    ro.endpoint = *parse_redis_url(ls.redis_url, why);  // validated with the settings
    ro.key_prefix = ls.key_prefix;
    ro.logger = std::make_shared<spdlog::logger>("limits",
                                                 std::make_shared<spdlog::sinks::stderr_sink_mt>());
    ro.logger->set_pattern("%v");  // the documented lines, as they are
    return ro;
}

app_context::app_context(boost::asio::io_context& io, app_options opts)
    : io_(io), opts_(std::move(opts)), store_(settings_store::defaults()) {
    try {
        dir_ = coagent_dir();
        store_ = settings_store::load(global_settings_path(dir_),
                                      project_settings_path(fs::current_path()));
    } catch (const settings_error& e) {
        throw config_error(e.what());
    }
    for (const auto& w : store_.warnings()) std::cerr << "warning: " << w.message() << "\n";

    const limits_settings& ls = store_.current().limits_or_default();
    if (ls.store == limit_store_kind::redis) {
        limits_ = std::make_shared<redis_limit_store>(io_.get_executor(), redis_store_options(ls));
    } else {
        limits_ = process_limit_store();
    }

    catalog_ = std::make_shared<app_catalog>(dir_, store_.current().provider, nullptr);
    if (ls.store == limit_store_kind::redis) catalog_->share_limits(limits_);
    if (opts_.provider.empty()) {
        // none named: settings, else the first provider with a credential, else faux
        model_selection_settings sel = store_.current().selection;
        if (!opts_.model.empty()) sel.default_model = opts_.model;  // --model ID
        const std::string origin =
            store_.origin(!sel.default_provider.empty() || opts_.model.empty() ? "defaultProvider"
                                                                               : "defaultModel");
        choice_ = choose_model(sel, origin, catalog_->candidates());
        opts_.provider = choice_->provider;
        opts_.model = choice_->model;
    }
    if (opts_.provider == "faux") {
        faux_options fo;
        if (opts_.faux_script) {
            try {
                fo.script = faux_script::from_argument(*opts_.faux_script);
            } catch (const faux_script_error& e) {
                throw config_error(e.what());
            }
        }
        fo.context_window = opts_.faux_context_window;
        fo.log_file = opts_.faux_log;
        fo.stream_idle_timeout_ms = store_.current().provider.stream_idle_timeout_ms;
        try {
            catalog_->set_faux(std::make_shared<faux_provider>(std::move(fo)));
        } catch (const std::system_error& e) {
            throw config_error(e.what());
        }
    }
    provider_ = catalog_->make(opts_.provider, opts_.model);
}

void app_context::stop_limits() {
    if (auto* r = dynamic_cast<redis_limit_store*>(limits_.get())) r->stop();
}

// ---- choosing the model ---------------------------------------------------------------------

model_choice choose_model(const model_selection_settings& defaults, std::string_view origin,
                          const std::vector<provider_candidate>& candidates) {
    std::string provider = defaults.default_provider;
    std::string model = defaults.default_model;
    if (provider.empty()) {
        if (const auto slash = model.find('/'); slash != std::string::npos) {
            provider = model.substr(0, slash);  // defaultModel "provider/id"
            model = model.substr(slash + 1);
        }
    }
    if (!provider.empty())
        return {
            provider, model,
            std::string(defaults.default_provider.empty() ? "defaultModel" : "defaultProvider") +
                " in " + std::string(origin)};
    for (const auto& c : candidates)
        if (!c.credential.empty())
            return {c.name, model.empty() ? c.first_model : model, "a key in " + c.credential};
    return {"faux", model.empty() ? std::string() : model,
            "no API key found: the offline faux provider"};
}

std::string model_choice_line(const model_info& m, const model_choice& c) {
    return "coagent: using " + m.provider + "/" + m.id + " (" + c.reason +
           "; --provider/--model or defaultProvider choose another)";
}

std::string format_model_list(const std::vector<app_catalog::listed_model>& rows,
                              std::string_view pattern) {
    const auto lower = [](std::string_view t) {
        std::string out(t);
        for (char& ch : out)
            if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        return out;
    };
    const std::string want = lower(pattern);
    std::vector<std::array<std::string, 4>> table{{"provider", "model", "context", "credential"}};
    for (const auto& r : rows) {
        if (lower(r.provider + "/" + r.id).find(want) == std::string::npos) continue;
        table.push_back({r.provider, r.id, std::to_string(r.context_window),
                         r.credential.empty() ? "none" : r.credential});
    }
    if (table.size() == 1) return "no model matches \"" + std::string(pattern) + "\"\n";
    std::array<std::size_t, 4> w{};
    for (const auto& row : table)
        for (std::size_t i = 0; i < 4; ++i) w[i] = std::max(w[i], row[i].size());
    std::string out;
    for (const auto& row : table) {
        std::string line;
        for (std::size_t i = 0; i < 4; ++i) {
            line += row[i];
            if (i + 1 < 4) line += std::string(w[i] - row[i].size() + 2, ' ');
        }
        out += line + "\n";
    }
    return out;
}

// ---- the catalog ----------------------------------------------------------------------------

app_catalog::app_catalog(fs::path dir, provider_settings limits, std::shared_ptr<provider> faux)
    : dir_(std::move(dir)), limits_(limits), faux_(std::move(faux)) {}

app_catalog::~app_catalog() = default;

void app_catalog::load() {
    if (models_) return;
    try {
        auto models = std::make_unique<models_config>(models_config::load(dir_ / "models.json"));
        auto auth_log = std::make_shared<spdlog::logger>(
            "auth", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        auth_ =
            std::make_shared<file_auth_storage>(dir_ / "auth.json", nullptr, std::move(auth_log));
        if (shared_) auth_->share_limits(shared_);
        for (const auto& w : models->warnings()) std::cerr << "warning: " << w.message() << "\n";
        for (const auto& w : auth_->warnings()) std::cerr << "warning: " << w.message() << "\n";
        models_ = std::move(models);
    } catch (const settings_error& e) {
        throw config_error(e.what());
    }
}

std::shared_ptr<provider> app_catalog::build(std::string_view provider_name,
                                             std::string_view model_id) {
    if (provider_name == "faux") {
        if (!model_id.empty() && model_id != "faux")
            throw model_selection_error("model \"" + std::string(model_id) +
                                        "\" not found for provider faux (it has: faux)");
        if (!faux_) faux_ = std::make_shared<faux_provider>(faux_options{});
        return faux_;
    }
    // An HTTP provider from models.json (+ the built-in openai / anthropic), keys from auth.json,
    // models.json or the environment (docs/providers.md).
    load();
    http_provider_options ho = models_->provider_options(provider_name, model_id, limits_);
    const std::string selector = model_selector(ho.model);
    for (const auto& [s, p] : cache_)
        if (s == selector) return p;
    const provider_entry& entry = *models_->find(provider_name);
    const fs::path models_file = dir_ / "models.json";
    if (ho.api_key.empty() && auth_->credential_count(provider_name) == 0 && entry.builtin)
        throw config_error("no API key for provider " + entry.name + ": set " + entry.env_key +
                           ", or add one to " + (dir_ / "auth.json").string() + " or " +
                           models_file.string());
    ho.auth = auth_;
    try {
        auto p = std::make_shared<http_provider>(std::move(ho));
        if (!p->cleartext_refusal().empty() && auth_->credential_count(provider_name) > 0)
            throw http_provider_error(p->cleartext_refusal());  // auth.json keys: the same rule
        cache_.emplace_back(selector, p);
        return p;
    } catch (const http_provider_error& e) {
        throw config_error(models_file.string() + ": provider " + entry.name + ": " + e.what());
    }
}

std::shared_ptr<provider> app_catalog::make(std::string_view provider_name,
                                            std::string_view model_id) {
    try {
        return build(provider_name, model_id);
    } catch (const model_selection_error& e) {
        throw config_error(e.what());
    }
}

std::shared_ptr<provider> app_catalog::resolve(std::string_view provider_name,
                                               std::string_view model_id, std::string& error) {
    try {
        if (model_id.empty())
            throw model_selection_error("no model named");  // a selector names its model
        return build(provider_name, model_id);
    } catch (const model_selection_error&) {
        error = "Model not found: " + std::string(provider_name) + "/" + std::string(model_id);
    } catch (const config_error& e) {
        error = e.what();  // broken models.json / auth.json, no key
    }
    return nullptr;
}

std::vector<model_info> app_catalog::available() {
    std::vector<model_info> out;
    out.push_back(make("faux", "faux")->model());
    try {
        load();
    } catch (const config_error&) {
        return out;  // a broken models.json: set_model says why
    }
    for (const auto& p : models_->providers())
        for (const auto& m : p.models) {
            std::string error;
            if (auto provider = resolve(p.name, m.id, error)) out.push_back(provider->model());
        }
    return out;
}

std::vector<provider_candidate> app_catalog::candidates() {
    load();
    std::vector<provider_candidate> out;
    const auto add = [&](const provider_entry& p) {
        if (p.models.empty()) return;
        provider_candidate c{p.name, p.models.front().id, {}};
        if (!p.api_key.empty() && !models_config::static_api_key(p).empty())
            c.credential = (dir_ / "models.json").string() + " (apiKey)";
        else if (!p.env_key.empty() && !models_config::static_api_key(p).empty())
            c.credential = p.env_key;
        else if (auth_->credential_count(p.name) > 0)
            c.credential = (dir_ / "auth.json").string();
        out.push_back(std::move(c));
    };
    for (const char* builtin : {"anthropic", "openai"})
        if (const auto* p = models_->find(builtin)) add(*p);
    for (const auto& p : models_->providers())
        if (p.name != "anthropic" && p.name != "openai") add(p);
    return out;
}

std::vector<app_catalog::listed_model> app_catalog::list() {
    std::vector<listed_model> out;
    out.push_back({"faux", "faux", make("faux", "faux")->model().context_window, "not needed"});
    const auto cands = candidates();
    for (const auto& c : cands) {
        const auto* p = models_->find(c.name);
        for (const auto& m : p->models)
            out.push_back({c.name, m.id, m.context_window, c.credential});
    }
    return out;
}

standard_descriptors reserve_standard_descriptors() noexcept {
    standard_descriptors d;
    bool* closed[3] = {&d.stdin_closed, &d.stdout_closed, &d.stderr_closed};
    for (int fd = 0; fd < 3; ++fd) {
        if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
        *closed[fd] = true;
        // open() returns the lowest free number: this one, since the lower ones are open
        const int null = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
        if (null >= 0 && null != fd) {
            ::dup2(null, fd);
            ::close(null);
        }
    }
    return d;
}

fs::path app_context::sessions_dir() const {
    return opts_.session_dir ? *opts_.session_dir : dir_ / "sessions";
}

namespace {

// The text of the first user message among a session file's first lines ("" if none).
std::string first_prompt_of(std::istream& in) {
    for (int n = 0; n < 200; ++n) {
        const auto line = read_first_line(in, session_header_max_bytes);
        if (!line) break;
        boost::system::error_code jec;
        auto v = boost::json::parse(*line, jec);
        if (jec || !v.is_object()) continue;
        const auto* m = v.as_object().if_contains("message");
        if (!m || !m->is_object()) continue;
        const auto* role = m->as_object().if_contains("role");
        if (!role || !role->is_string() || role->get_string() != "user") continue;
        const auto* c = m->as_object().if_contains("content");
        if (c && c->is_string()) return std::string(c->get_string());
        if (c && c->is_array())
            for (const auto& part : c->get_array())
                if (const auto* t =
                        part.is_object() ? part.as_object().if_contains("text") : nullptr;
                    t && t->is_string())
                    return std::string(t->get_string());
        return {};
    }
    return {};
}

}  // namespace

std::vector<session_summary> recent_sessions(const fs::path& dir, const std::string& cwd,
                                             std::size_t max) {
    std::error_code ec;
    std::vector<session_summary> out;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        if (!entry.is_regular_file() || entry.path().extension() != ".jsonl") continue;
        std::ifstream in(entry.path());
        const auto first = read_first_line(in, session_header_max_bytes);  // bounded
        if (!first) continue;
        boost::system::error_code jec;
        auto v = boost::json::parse(*first, jec);
        if (jec || !v.is_object()) continue;
        const auto* c = v.as_object().if_contains("cwd");
        if (!c || !c->is_string() || c->get_string() != cwd) continue;
        session_summary s{entry.path(), entry.last_write_time(ec), {}};
        out.push_back(std::move(s));
    }
    // newest first; the same time: by name (a timestamp), newest first
    std::sort(out.begin(), out.end(), [](const session_summary& a, const session_summary& b) {
        return a.modified != b.modified ? a.modified > b.modified : a.file > b.file;
    });
    if (out.size() > max) out.resize(max);
    for (auto& s : out) {
        std::ifstream in(s.file);
        s.first_prompt = first_prompt_of(in);
    }
    return out;
}

std::optional<fs::path> latest_session_file(const fs::path& dir, const std::string& cwd) {
    auto all = recent_sessions(dir, cwd, 1);
    if (all.empty()) return std::nullopt;
    return all.front().file;
}

std::string session_choice_label(const session_summary& s) {
    const auto t =
        std::chrono::system_clock::to_time_t(std::chrono::file_clock::to_sys(s.modified));
    std::tm tm{};
    ::localtime_r(&t, &tm);
    char when[32];
    std::strftime(when, sizeof when, "%Y-%m-%d %H:%M", &tm);
    std::string prompt = s.first_prompt;
    std::replace(prompt.begin(), prompt.end(), '\n', ' ');
    if (prompt.empty()) prompt = "(no message)";
    return std::string(when) + "  " + prompt;
}

std::string format_session_choices(const std::vector<session_summary>& sessions) {
    std::string out;
    for (std::size_t i = 0; i < sessions.size(); ++i)
        out += std::to_string(i + 1) + ". " + session_choice_label(sessions[i]) + "\n";
    return out;
}

std::vector<std::string> effective_retry_settings(const settings_store& store) {
    std::vector<std::string> out;
    for (const auto& info : settings_schema()) {
        if (!info.key.starts_with("retry.")) continue;
        const auto v = store.get(info.key);
        std::string where = store.origin(info.key);
        if (where == "<runtime>") where = "this session";
        out.push_back(std::string(info.key) + " = " +
                      (v ? boost::json::serialize(*v) : std::string("(none)")) + "  (" + where +
                      ")");
    }
    return out;
}

std::optional<std::size_t> parse_session_choice(std::string_view answer, std::size_t count) {
    while (!answer.empty() &&
           (answer.back() == '\n' || answer.back() == '\r' || answer.back() == ' '))
        answer.remove_suffix(1);
    while (!answer.empty() && answer.front() == ' ') answer.remove_prefix(1);
    std::size_t n = 0;
    const auto [ptr, ec] = std::from_chars(answer.data(), answer.data() + answer.size(), n);
    if (answer.empty() || ec != std::errc() || ptr != answer.data() + answer.size() || n < 1 ||
        n > count)
        return std::nullopt;
    return n - 1;
}

std::unique_ptr<agent_session> app_context::make_session(bool resume,
                                                         std::shared_ptr<spdlog::logger> logger) {
    session_options so;
    so.logger = std::move(logger);
    so.executor = io_.get_executor();
    so.model_provider = provider_;
    so.models = catalog_;
    so.config = store_.current();
    // a shared store shares the budget and the model cooldowns; the local one only the budget
    // (process_limit_store(), the session's default), cooldowns staying per session as before
    if (limits_ != process_limit_store()) so.limits = limits_;
    const std::string trace = opts_.trace_file ? *opts_.trace_file : so.config.telemetry.trace_file;
    if (!trace.empty()) {
        try {
            if (!trace_log_) trace_log_ = make_trace_file_logger(trace);
        } catch (const std::exception& e) {
            throw config_error("--trace-file / telemetry.traceFile: cannot open " + trace + ": " +
                               e.what());
        }
        so.telemetry = std::make_shared<span_telemetry>(trace_log_);
    }
    // stored (and matched by --continue) in its valid UTF-8 form: a name that is not UTF-8
    // gets U+FFFD, so the header is valid JSON and the session loads again
    so.cwd = to_valid_utf8(fs::current_path().string());
    if (!opts_.no_session) so.session_dir = sessions_dir();
    if (resume && opts_.session_file) so.resume_file = opts_.session_file;
    if (resume && opts_.continue_last) {
        so.resume_file = latest_session_file(sessions_dir(), so.cwd);
        if (!so.resume_file)
            throw config_error("--continue: no session of " + so.cwd + " in " +
                               sessions_dir().string());
    }
    const bool resuming = so.resume_file.has_value();
    std::unique_ptr<agent_session> session;
    try {
        session = std::make_unique<agent_session>(std::move(so));
    } catch (const std::system_error& e) {
        throw config_error(e.what());
    } catch (const std::runtime_error& e) {
        throw config_error(e.what());
    }
    if (resuming) restore_recorded_model(*session);
    return session;
}

std::optional<std::pair<std::string, std::string>> recorded_model(const session_history& h) {
    // the last model chosen for the session (set_model / RPC set_model, not a fallback's
    // temporary switch); without one, the model of its first reply
    const auto& entries = h.entries();
    for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
        if (it->type != "model_change") continue;
        const auto* t = it->raw.if_contains("temporary");
        if (t && t->is_bool() && t->as_bool()) continue;
        const auto* p = it->raw.if_contains("provider");
        const auto* m = it->raw.if_contains("modelId");
        if (p && m && p->is_string() && m->is_string())
            return std::pair{std::string(p->as_string()), std::string(m->as_string())};
    }
    for (const auto& e : entries)
        if (e.msg && e.msg->role == message_role::assistant && !e.msg->provider.empty() &&
            !e.msg->model.empty())
            return std::pair{e.msg->provider, e.msg->model};
    return std::nullopt;
}

void app_context::restore_recorded_model(agent_session& session) {
    const auto rec = recorded_model(session.history());
    if (!rec) return;
    const model_info now = session.model();
    if (now.provider == rec->first && now.id == rec->second) return;
    if (opts_.model_explicit) {
        // --provider/--model wins, and the history records the switch, so the next resume
        // continues on this model too
        session.set_model(provider_);
        return;
    }
    const std::string file =
        session.history().file() ? session.history().file()->string() : std::string("the session");
    try {
        session.set_model(catalog_->make(rec->first, rec->second));
    } catch (const config_error& e) {
        throw config_error(file + ": the conversation was held on " + rec->first + "/" +
                           rec->second + ", which is not available now: " + e.what() +
                           " (give --provider/--model to continue it on another model)");
    }
}

std::string app_context::override_and_persist(std::string_view key, bool value) {
    try {
        store_.set_override(key, boost::json::value(value));
        store_.persist_global(key, boost::json::value(value));
    } catch (const settings_error& e) {
        return e.what();
    }
    return {};
}

}  // namespace coagent

#include <coagent/modes/app.hpp>
#include <coagent/telemetry/span_telemetry.hpp>

#include <boost/json/parse.hpp>

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/models_config.hpp>
#include <coagent/providers/redis_limit_store.hpp>
#include <coagent/runtime/json_input.hpp>
#include <coagent/session/history.hpp>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fstream>

#include <fcntl.h>
#include <unistd.h>
#include <cerrno>
#include <iostream>

namespace coagent {

namespace fs = std::filesystem;

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

    std::shared_ptr<provider> faux;
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
            faux = std::make_shared<faux_provider>(std::move(fo));
        } catch (const std::system_error& e) {
            throw config_error(e.what());
        }
    }
    catalog_ = std::make_shared<app_catalog>(dir_, store_.current().provider, std::move(faux));
    provider_ = catalog_->make(opts_.provider, opts_.model);

    const limits_settings& ls = store_.current().limits_or_default();
    if (ls.store == limit_store_kind::redis) {
        std::string why;
        redis_limit_store_options ro;
        ro.endpoint = *parse_redis_url(ls.redis_url, why);  // validated with the settings
        ro.key_prefix = ls.key_prefix;
        ro.logger = std::make_shared<spdlog::logger>(
            "limits", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        ro.logger->set_pattern("%v");  // the documented lines, as they are
        limits_ = std::make_shared<redis_limit_store>(io_.get_executor(), std::move(ro));
    } else {
        limits_ = process_limit_store();
    }
}

void app_context::stop_limits() {
    if (auto* r = dynamic_cast<redis_limit_store*>(limits_.get())) r->stop();
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

std::optional<fs::path> latest_session_file(const fs::path& dir, const std::string& cwd) {
    std::error_code ec;
    std::optional<fs::path> best;
    fs::file_time_type best_time;
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
        auto t = entry.last_write_time();
        if (!best || t > best_time) {
            best = entry.path();
            best_time = t;
        }
    }
    return best;
}

std::unique_ptr<agent_session> app_context::make_session(bool resume,
                                                         std::shared_ptr<spdlog::logger> logger) {
    session_options so;
    so.logger = std::move(logger);
    so.executor = io_.get_executor();
    so.model_provider = provider_;
    so.models = catalog_;
    so.config = store_.current();
    so.limits = limits_;
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

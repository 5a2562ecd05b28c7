#include <coagent/modes/app.hpp>

#include <boost/json/parse.hpp>

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/providers/models_config.hpp>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iostream>

namespace coagent {

namespace fs = std::filesystem;

app_context::app_context(boost::asio::io_context& io, app_options opts)
    : io_(io), opts_(std::move(opts)), store_(settings_store::defaults()) {
    try {
        dir_ = coagent_dir();
        store_ = settings_store::load(global_settings_path(dir_), project_settings_path(fs::current_path()));
    } catch (const settings_error& e) {
        throw config_error(e.what());
    }
    for (const auto& w : store_.warnings()) std::cerr << "warning: " << w.message() << "\n";

    if (opts_.provider == "faux") {
        if (!opts_.model.empty() && opts_.model != "faux")
            throw config_error("model \"" + opts_.model + "\" not found for provider faux (it has: faux)");
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
            provider_ = std::make_shared<faux_provider>(std::move(fo));
        } catch (const std::system_error& e) {
            throw config_error(e.what());
        }
        return;
    }

    // An HTTP provider from models.json (+ the built-in openai / anthropic), keys from auth.json,
    // models.json or the environment (docs/providers.md).
    const fs::path models_file = dir_ / "models.json";
    const fs::path auth_file = dir_ / "auth.json";
    models_config models;
    std::shared_ptr<file_auth_storage> auth;
    http_provider_options ho;
    try {
        models = models_config::load(models_file);
        auto auth_log = std::make_shared<spdlog::logger>("auth", std::make_shared<spdlog::sinks::stderr_sink_mt>());
        auth = std::make_shared<file_auth_storage>(auth_file, nullptr, std::move(auth_log));
        for (const auto& w : models.warnings()) std::cerr << "warning: " << w.message() << "\n";
        for (const auto& w : auth->warnings()) std::cerr << "warning: " << w.message() << "\n";
        ho = models.provider_options(opts_.provider, opts_.model, store_.current().provider);
    } catch (const settings_error& e) {
        throw config_error(e.what());
    } catch (const model_selection_error& e) {
        throw config_error(e.what());
    }
    const provider_entry& entry = *models.find(opts_.provider);
    if (ho.api_key.empty() && auth->credential_count(opts_.provider) == 0 && entry.builtin)
        throw config_error("no API key for provider " + entry.name + ": set " + entry.env_key + ", or add one to " +
                           auth_file.string() + " or " + models_file.string());
    ho.auth = auth;
    try {
        provider_ = std::make_shared<http_provider>(std::move(ho));
    } catch (const http_provider_error& e) {
        throw config_error(models_file.string() + ": provider " + entry.name + ": " + e.what());
    }
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
        std::string first;
        if (!std::getline(in, first)) continue;
        boost::system::error_code jec;
        auto v = boost::json::parse(first, jec);
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

std::unique_ptr<agent_session> app_context::make_session(bool resume, std::shared_ptr<spdlog::logger> logger) {
    session_options so;
    so.logger = std::move(logger);
    so.executor = io_.get_executor();
    so.model_provider = provider_;
    if (auto http = std::dynamic_pointer_cast<http_provider>(provider_)) so.auth = http->auth();
    so.config = store_.current();
    so.cwd = fs::current_path().string();
    if (!opts_.no_session) so.session_dir = sessions_dir();
    if (resume && opts_.session_file) so.resume_file = opts_.session_file;
    if (resume && opts_.continue_last) {
        so.resume_file = latest_session_file(sessions_dir(), so.cwd);
        if (!so.resume_file)
            throw config_error("--continue: no session of " + so.cwd + " in " + sessions_dir().string());
    }
    try {
        return std::make_unique<agent_session>(std::move(so));
    } catch (const std::system_error& e) {
        throw config_error(e.what());
    } catch (const std::runtime_error& e) {
        throw config_error(e.what());
    }
}

}  // namespace coagent

#include <coagent/modes/app.hpp>

#include <boost/json/parse.hpp>

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

    if (opts_.provider != "faux")
        throw config_error("provider \"" + opts_.provider +
                           "\" is not available in this build: only the embedded \"faux\" provider "
                           "exists so far (HTTP providers are a later feature)");
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

std::unique_ptr<agent_session> app_context::make_session(bool resume) {
    session_options so;
    so.executor = io_.get_executor();
    so.model_provider = provider_;
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

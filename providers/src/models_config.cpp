// models.json: parsing, validation (errors name file, key, expected, found) and the built-ins.

#include <coagent/providers/models_config.hpp>

#include <coagent/session/config_file.hpp>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace coagent {

namespace {

namespace fs = std::filesystem;

std::string found_text(const json::value& v) {
    return config_file::compact(v);
}

// Warns (once) about the keys of `o` that are neither used by coagent (`known`) nor known to be
// the reference agent's (`reference`).
template <std::size_t N, std::size_t M>
void warn_unknown(const json::object& o, const std::string& file, const std::string& path,
                  const std::string_view (&known)[N], const std::string_view (&reference)[M],
                  std::vector<settings_warning>& warnings) {
    for (const auto& kv : o) {
        const std::string_view key = kv.key();
        if (std::find(std::begin(known), std::end(known), key) != std::end(known) ||
            std::find(std::begin(reference), std::end(reference), key) != std::end(reference))
            continue;
        settings_warning w{file, path.empty() ? std::string(key) : path + "." + std::string(key)};
        if (std::find(warnings.begin(), warnings.end(), w) == warnings.end())
            warnings.push_back(std::move(w));
    }
}

constexpr std::string_view top_keys[] = {"providers"};
constexpr std::string_view no_keys[] = {""};
constexpr std::string_view provider_keys[] = {"baseUrl", "api",    "apiKey",
                                              "headers", "models", "allowInsecureHttp"};
constexpr std::string_view reference_provider_keys[] = {"authHeader", "compat"};
constexpr std::string_view model_keys[] = {"id",  "name",      "contextWindow", "maxTokens",
                                           "api", "reasoning", "input",         "cost"};
constexpr std::string_view reference_model_keys[] = {"compat", "headers"};

[[noreturn]] void fail(const std::string& file, const std::string& key, const std::string& expected,
                       const json::value& v) {
    throw settings_error(file, key, expected, found_text(v));
}

std::string string_field(const json::object& o, std::string_view name, const std::string& file,
                         const std::string& path, bool required, bool non_empty = true) {
    const auto* v = o.if_contains(name);
    const std::string key = path + "." + std::string(name);
    if (!v) {
        if (required)
            throw settings_error(file, key, non_empty ? "a non-empty string" : "a string",
                                 "nothing (missing)");
        return {};
    }
    if (!v->is_string() || (non_empty && v->get_string().empty()))
        fail(file, key, non_empty ? "a non-empty string" : "a string", *v);
    return std::string(v->get_string());
}

std::optional<std::int64_t> positive_int(const json::object& o, std::string_view name,
                                         const std::string& file, const std::string& path) {
    const auto* v = o.if_contains(name);
    if (!v) return std::nullopt;
    const std::string key = path + "." + std::string(name);
    if (v->is_int64() && v->get_int64() > 0) return v->get_int64();
    if (v->is_double() && v->get_double() >= 1 && v->get_double() < 9e18 &&
        v->get_double() == static_cast<double>(static_cast<std::int64_t>(v->get_double())))
        return static_cast<std::int64_t>(v->get_double());
    fail(file, key, "a positive integer", *v);
}

std::optional<http_protocol::api_kind> api_field(const json::object& o, const std::string& file,
                                                 const std::string& path) {
    const auto* v = o.if_contains("api");
    if (!v) return std::nullopt;
    if (v->is_string())
        if (auto k = http_protocol::api_from_string(v->get_string())) return k;
    fail(file, path + ".api",
         "\"openai-completions\", \"openai-responses\" or \"anthropic-messages\"", *v);
}

void check_url(const std::string& url, const std::string& file, const std::string& key) {
    const std::size_t rest = url.starts_with("http://") ? 7 : url.starts_with("https://") ? 8 : 0;
    if (rest == 0 || url.size() <= rest || url[rest] == '/')
        throw settings_error(file, key, "an http:// or https:// URL",
                             found_text(json::value(http_protocol::redact_url(url))));
}

model_entry parse_model(const json::value& v, const std::string& file, const std::string& path,
                        std::vector<settings_warning>& warnings) {
    if (!v.is_object()) fail(file, path, "an object", v);
    const auto& o = v.get_object();
    warn_unknown(o, file, path, model_keys, reference_model_keys, warnings);
    model_entry m;
    m.id = string_field(o, "id", file, path, true);
    m.name = string_field(o, "name", file, path, false, false);
    if (auto n = positive_int(o, "contextWindow", file, path)) m.context_window = *n;
    if (auto n = positive_int(o, "maxTokens", file, path)) m.max_tokens = *n;
    m.api = api_field(o, file, path);
    // reported by get_available_models in the reference's shape; checked like every known key
    if (const auto* r = o.if_contains("reasoning")) {
        if (!r->is_bool()) fail(file, path + ".reasoning", "true or false", *r);
        m.reasoning = r->get_bool();
    }
    if (const auto* in = o.if_contains("input")) {
        const auto bad = [&] {
            fail(file, path + ".input", "an array of \"text\" and \"image\"", *in);
        };
        if (!in->is_array()) bad();
        for (const auto& x : in->get_array()) {
            if (!x.is_string() || (x.get_string() != "text" && x.get_string() != "image")) bad();
            if (x.get_string() == "image") m.image_input = true;
        }
    }
    if (const auto* c = o.if_contains("cost")) {
        if (!c->is_object())
            fail(file, path + ".cost", "an object of prices per million tokens", *c);
        const std::pair<const char*, double*> fields[] = {{"input", &m.cost.input},
                                                          {"output", &m.cost.output},
                                                          {"cacheRead", &m.cost.cache_read},
                                                          {"cacheWrite", &m.cost.cache_write}};
        for (const auto& [name, out] : fields)
            if (const auto* v = c->get_object().if_contains(name)) {
                if (!v->is_number() || v->to_number<double>() < 0)
                    fail(file, path + ".cost." + name, "a number >= 0", *v);
                *out = v->to_number<double>();
            }
    }
    return m;
}

void add_or_replace(std::vector<model_entry>& models, model_entry m) {
    auto it = std::find_if(models.begin(), models.end(),
                           [&](const model_entry& x) { return x.id == m.id; });
    if (it != models.end())
        *it = std::move(m);
    else
        models.push_back(std::move(m));
}

model_entry builtin_model(std::string id, std::int64_t window, std::int64_t max_tokens) {
    model_entry m;
    m.id = std::move(id);
    m.name = m.id;
    m.context_window = window;
    m.max_tokens = max_tokens;
    m.image_input = true;  // every built-in model reads images
    return m;
}

std::string list_of(const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) {
        if (!s.empty()) s += ", ";
        s += n;
    }
    return s;
}

}  // namespace

models_config models_config::builtins() {
    models_config c;
    provider_entry openai;
    openai.name = "openai";
    openai.base_url = "https://api.openai.com/v1";
    openai.api = http_protocol::api_kind::openai_completions;
    openai.env_key = "OPENAI_API_KEY";
    openai.builtin = true;
    openai.models = {
        builtin_model("gpt-4.1", 1047576, 32768), builtin_model("gpt-4.1-mini", 1047576, 32768),
        builtin_model("gpt-4o", 128000, 16384), builtin_model("gpt-4o-mini", 128000, 16384),
        builtin_model("o4-mini", 200000, 100000)};
    provider_entry anthropic;
    anthropic.name = "anthropic";
    anthropic.base_url = "https://api.anthropic.com/v1";
    anthropic.api = http_protocol::api_kind::anthropic_messages;
    anthropic.env_key = "ANTHROPIC_API_KEY";
    anthropic.builtin = true;
    anthropic.models = {builtin_model("claude-sonnet-4-5", 200000, 64000),
                        builtin_model("claude-opus-4-1", 200000, 32000),
                        builtin_model("claude-haiku-4-5", 200000, 64000),
                        builtin_model("claude-3-5-haiku-latest", 200000, 8192)};
    c.providers_.push_back(std::move(openai));
    c.providers_.push_back(std::move(anthropic));
    return c;
}

models_config models_config::load(const fs::path& file) {
    const std::string label = file.string();
    auto text = config_file::read(file, label);
    if (!text) return builtins();
    return parse(*text, label);
}

models_config models_config::parse(std::string_view text, const std::string& file) {
    models_config c = builtins();
    const json::value root = config_file::parse_object(text, file);  // empty: an error
    warn_unknown(root.get_object(), file, "", top_keys, no_keys, c.warnings_);
    const auto* provs = root.get_object().if_contains("providers");
    if (!provs) return c;  // other top-level keys are the reference's business
    if (!provs->is_object()) fail(file, "providers", "an object of providers", *provs);

    for (const auto& kv : provs->get_object()) {
        const std::string name(kv.key());
        const std::string path = "providers." + name;
        if (name.empty() || name == "faux" || name.find('/') != std::string::npos)
            throw settings_error(file, path, "a provider name without '/' other than \"faux\"",
                                 found_text(json::value(name)));
        if (!kv.value().is_object()) fail(file, path, "an object", kv.value());
        const auto& o = kv.value().get_object();
        warn_unknown(o, file, path, provider_keys, reference_provider_keys, c.warnings_);
        auto it = std::find_if(c.providers_.begin(), c.providers_.end(),
                               [&](const provider_entry& e) { return e.name == name; });
        const bool existing = it != c.providers_.end();
        provider_entry pe = existing ? *it : provider_entry{};
        pe.name = name;

        if (const auto* b = o.if_contains("baseUrl")) {
            if (!b->is_string()) fail(file, path + ".baseUrl", "an http:// or https:// URL", *b);
            pe.base_url = b->get_string();
            check_url(pe.base_url, file, path + ".baseUrl");
        } else if (!existing) {
            throw settings_error(file, path + ".baseUrl", "an http:// or https:// URL",
                                 "nothing (missing)");
        }
        if (const auto* a = o.if_contains("allowInsecureHttp")) {
            if (!a->is_bool())
                fail(file, path + ".allowInsecureHttp", "a boolean (true or false)", *a);
            pe.allow_insecure_http = a->get_bool();
        }
        if (auto a = api_field(o, file, path)) pe.api = a;
        if (o.contains("apiKey")) pe.api_key = string_field(o, "apiKey", file, path, false, false);
        if (const auto* h = o.if_contains("headers")) {
            if (!h->is_object()) fail(file, path + ".headers", "an object of strings", *h);
            pe.headers.clear();
            for (const auto& hv : h->get_object()) {
                if (!hv.value().is_string())
                    fail(file, path + ".headers." + std::string(hv.key()), "a string", hv.value());
                pe.headers.emplace_back(hv.key(), hv.value().get_string());
            }
        }
        if (const auto* ms = o.if_contains("models")) {
            if (!ms->is_array()) fail(file, path + ".models", "an array of models", *ms);
            for (std::size_t i = 0; i < ms->get_array().size(); ++i)
                add_or_replace(pe.models, parse_model(ms->get_array()[i], file,
                                                      path + ".models[" + std::to_string(i) + "]",
                                                      c.warnings_));
        }
        if (pe.models.empty())
            throw settings_error(file, path + ".models", "a non-empty array of models",
                                 o.contains("models") ? "[]" : "nothing (missing)");
        if (!pe.api)
            for (std::size_t i = 0; i < pe.models.size(); ++i)
                if (!pe.models[i].api)
                    throw settings_error(
                        file, path + ".api", "\"openai-completions\" or \"anthropic-messages\"",
                        "nothing (missing; needed by model \"" + pe.models[i].id + "\")");
        if (existing)
            *it = std::move(pe);
        else
            c.providers_.push_back(std::move(pe));
    }
    return c;
}

const provider_entry* models_config::find(std::string_view provider) const noexcept {
    for (const auto& p : providers_)
        if (p.name == provider) return &p;
    return nullptr;
}

model_info models_config::resolve(std::string_view provider, std::string_view model_id) const {
    const provider_entry* p = find(provider);
    if (!p) {
        std::vector<std::string> names{"faux"};
        for (const auto& e : providers_) names.push_back(e.name);
        throw model_selection_error("provider \"" + std::string(provider) +
                                    "\" not found (known: " + list_of(names) +
                                    "; add it to models.json)");
    }
    const model_entry* m = model_id.empty() ? &p->models.front() : nullptr;
    for (const auto& e : p->models)
        if (!m && e.id == model_id) m = &e;
    if (!m) {
        std::vector<std::string> ids;
        for (const auto& e : p->models) ids.push_back(e.id);
        throw model_selection_error("model \"" + std::string(model_id) +
                                    "\" not found for provider " + p->name +
                                    " (it has: " + list_of(ids) + "; add it to models.json)");
    }
    const auto api = m->api ? *m->api : *p->api;
    model_info info{p->name, m->id, std::string(http_protocol::to_string(api)), m->context_window,
                    m->max_tokens};
    info.name = m->name;
    info.base_url = p->base_url;
    info.reasoning = m->reasoning;
    info.image_input = m->image_input;
    info.cost = m->cost;
    return info;
}

std::string models_config::static_api_key(const provider_entry& p,
                                          const std::function<const char*(const char*)>& getenv) {
    auto env = [&](const std::string& name) -> std::string {
        const char* v = getenv ? getenv(name.c_str()) : std::getenv(name.c_str());
        return v ? std::string(v) : std::string();
    };
    if (!p.api_key.empty()) {
        const bool env_name = std::all_of(p.api_key.begin(), p.api_key.end(), [](char ch) {
            return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
        });
        if (env_name) {
            std::string v = env(p.api_key);
            if (!v.empty()) return v;
        }
        return p.api_key;
    }
    if (!p.env_key.empty()) return env(p.env_key);
    return {};
}

http_provider_options models_config::provider_options(
    std::string_view provider, std::string_view model_id, const provider_settings& limits,
    const std::function<const char*(const char*)>& getenv) const {
    http_provider_options o;
    o.model = resolve(provider, model_id);
    const provider_entry& p = *find(provider);
    o.api = *http_protocol::api_from_string(o.model.api);
    o.base_url = p.base_url;
    o.api_key = static_api_key(p, getenv);
    o.headers = p.headers;
    o.allow_insecure_http = p.allow_insecure_http;
    o.connect_timeout_ms = limits.connect_timeout_ms;
    o.stream_idle_timeout_ms = limits.stream_idle_timeout_ms;
    o.attempt_timeout_ms = limits.attempt_timeout_ms;
    return o;
}

}  // namespace coagent

#pragma once
// $COAGENT_DIR/models.json: the model providers coagent can talk to, in the reference agent's
// shape (docs/providers.md), merged over the built-in `openai` and `anthropic` providers:
//
//   {"providers":{"local":{"baseUrl":"http://127.0.0.1:8080/v1","api":"openai-completions",
//     "apiKey":"any","models":[{"id":"m1","contextWindow":32000,"maxTokens":4096}]}}}
//
// A broken file is a settings_error naming the file, the key and what was expected.

#include <coagent/providers/http_protocol.hpp>
#include <coagent/providers/http_provider.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/session/settings_store.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent {

struct model_entry {
    std::string id;
    std::string name;
    std::int64_t context_window = 128000;
    std::int64_t max_tokens = 16384;
    std::optional<http_protocol::api_kind> api;  ///< overrides the provider's api
    bool reasoning = false;                      ///< "reasoning" (reported, not used)
    bool image_input = false;                    ///< "input" holds "image" (reported, not used)
    model_cost cost;                             ///< "cost" (reported, not used)
};

struct provider_entry {
    std::string name;
    std::string base_url;
    std::optional<http_protocol::api_kind> api;
    std::string api_key;  ///< models.json "apiKey" as written (a literal or an env variable name)
    std::string env_key;  ///< built-ins: OPENAI_API_KEY / ANTHROPIC_API_KEY
    std::vector<std::pair<std::string, std::string>> headers;
    std::vector<model_entry> models;  ///< the first is the default
    bool builtin = false;
    bool allow_insecure_http = false;  ///< "allowInsecureHttp": keys over cleartext http:// allowed
};

/// A provider or model that does not exist; what() lists what does.
class model_selection_error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

class models_config {
  public:
    /// The built-in providers only.
    static models_config builtins();
    /// The built-ins merged with `file` (a missing file adds nothing). A provider of the file
    /// with a built-in's name overrides the fields it gives; its models are added (same id:
    /// replaced). Throws settings_error for a file that cannot be read, is larger than 4 MiB,
    /// is empty or blank, is not valid JSON (numbers beyond the double range included) or has a
    /// wrong value. Unknown keys are kept (not used) and listed in warnings(); the keys of the
    /// reference agent's models.json that coagent does not use (compat, a model's headers,
    /// authHeader) are not warned about; reasoning, input and cost are checked and reported.
    static models_config load(const std::filesystem::path& file);
    /// The same from JSON text (`label` names it in errors).
    static models_config parse(std::string_view json_text, const std::string& label);

    const std::vector<provider_entry>& providers() const noexcept { return providers_; }
    /// Unknown keys of the file ("providers.local.contextWindw"), each once, in file order.
    const std::vector<settings_warning>& warnings() const noexcept { return warnings_; }
    const provider_entry* find(std::string_view provider) const noexcept;

    /// The model `model_id` of `provider` (empty id: the provider's first model) as the
    /// session sees it. Throws model_selection_error.
    model_info resolve(std::string_view provider, std::string_view model_id) const;

    /// The key used when auth.json has none for the session: models.json "apiKey" (the value of
    /// the environment variable it names, if one is set; else the text itself), else the
    /// built-in's environment variable. Empty if none. `getenv` is injectable for tests.
    static std::string static_api_key(const provider_entry& p,
                                      const std::function<const char*(const char*)>& getenv = {});

    /// Options for an http_provider of `provider`/`model_id` (empty: the default model) with the
    /// time limits of `limits`. Throws model_selection_error.
    http_provider_options provider_options(
        std::string_view provider, std::string_view model_id, const provider_settings& limits,
        const std::function<const char*(const char*)>& getenv = {}) const;

  private:
    std::vector<provider_entry> providers_;
    std::vector<settings_warning> warnings_;
};

}  // namespace coagent

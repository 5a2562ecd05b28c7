#pragma once
// The models a session can switch to at runtime: RPC set_model, and the model fallback of the
// usage-limit path (retry.fallbackChains). The coagent executable's catalog reads
// $COAGENT_DIR/models.json and auth.json (modes/app.cpp); embedders supply their own.

#include <coagent/runtime/message.hpp>
#include <coagent/session/provider.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace coagent {

class model_catalog {
  public:
    virtual ~model_catalog() = default;

    /// The provider that answers with `provider`/`model_id`, or nullptr with `error` set to a
    /// sentence for the user ("Model not found: nope/nope", "no API key for provider …").
    /// Called on the session's executor; may be called often (cache what is expensive).
    virtual std::shared_ptr<provider> resolve(std::string_view provider, std::string_view model_id,
                                              std::string& error) = 0;

    /// The models resolve() accepts, for RPC get_available_models.
    virtual std::vector<model_info> available() = 0;
};

/// "provider/model", the selector of retry.fallbackChains.
inline std::string model_selector(const model_info& m) {
    return m.provider + "/" + m.id;
}

}  // namespace coagent

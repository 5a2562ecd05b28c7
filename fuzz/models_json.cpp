// Fuzz target: $COAGENT_DIR/models.json as read by models_config::load (written to a file,
// loaded from it), then every provider and model resolved and turned into provider options.
// Invariants: a bad file is a settings_error naming the file; every provider of a good file
// has a model, an api, a resolvable default model with a positive context window.

#include "fuzz_support.hpp"

#include <coagent/providers/models_config.hpp>

using namespace coagent;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const auto file = fuzz::write_scratch("models.json", data, size);
    std::optional<models_config> c;
    try {
        c = models_config::load(file);
    } catch (const settings_error& e) {
        FUZZ_CHECK(e.file == file.string());
        FUZZ_CHECK(std::string_view(e.what()).starts_with(file.string()));
        return 0;
    }
    FUZZ_CHECK(c->find("openai") && c->find("anthropic"));
    const auto no_env = [](const char*) -> const char* { return nullptr; };
    for (const auto& p : c->providers()) {
        FUZZ_CHECK(!p.models.empty());
        const model_info m = c->resolve(p.name, "");
        FUZZ_CHECK(m.provider == p.name && m.id == p.models.front().id);
        FUZZ_CHECK(m.context_window > 0);
        for (const auto& e : p.models) FUZZ_CHECK(c->resolve(p.name, e.id).id == e.id);
        try {
            (void)c->provider_options(p.name, "", provider_settings{}, no_env);
        } catch (const model_selection_error&) {
        }
        (void)models_config::static_api_key(p, no_env);
    }
    return 0;
}

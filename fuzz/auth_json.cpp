// Fuzz target: $COAGENT_DIR/auth.json as file_auth_storage reads it, then the usage-limit
// bookkeeping that rewrites it (locked read-modify-write, atomic replace).
// Invariants: a bad file is a settings_error naming the file; with a good one every provider's
// key can be asked for, a usage limit persists a block that a fresh reader sees, and the
// rewritten file loads again with the same credentials.

#include "fuzz_support.hpp"
#include "known_bugs.hpp"

#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/json/parse.hpp>

#include <spdlog/logger.h>
#include <spdlog/sinks/null_sink.h>

using namespace coagent;
namespace json = boost::json;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    fuzz::clear_scratch();
    const auto file = fuzz::write_scratch("auth.json", data, size);
    static const auto quiet =
        std::make_shared<spdlog::logger>("auth", std::make_shared<spdlog::sinks::null_sink_mt>());
    const auto now = [] { return std::int64_t{1'700'000'000'000}; };
    std::optional<file_auth_storage> auth;
    try {
        auth.emplace(file, now, quiet);
    } catch (const settings_error& e) {
        FUZZ_CHECK(e.file == file.string());
        return 0;
    }
    // the providers of the file, as written
    std::vector<std::string> providers;
    {
        std::string_view t = fuzz::as_text(data, size);
        if (t.starts_with("\xEF\xBB\xBF")) t.remove_prefix(3);
        boost::system::error_code ec;
        auto v = json::parse(t, ec);
        if (!ec && fuzz::skip_non_finite(v)) return 0;  // known bug: rewritten as Infinity
        if (!ec && v.is_object())
            for (const auto& kv : v.get_object()) providers.emplace_back(kv.key());
    }
    std::vector<std::size_t> counts;
    for (const auto& p : providers) {
        const std::size_t n = auth->credential_count(p);
        counts.push_back(n);
        const std::string key = auth->api_key(p, "session-1");
        FUZZ_CHECK(n > 0 || key.empty());
        if (n == 0) continue;
        FUZZ_CHECK(!key.empty());
        (void)auth->mark_usage_limit_reached(p, "session-1", 5000);
        // persisted: a fresh reader of the rewritten file sees a block on one credential
        file_auth_storage fresh(file, now, quiet);
        FUZZ_CHECK(fresh.credential_count(p) == n);
        bool blocked = false;
        for (std::size_t i = 0; i < n; ++i)
            blocked = blocked || fresh.blocked_until(p, i) >= now() + 5000;
        FUZZ_CHECK(blocked);
    }
    for (std::size_t i = 0; i < providers.size(); ++i)
        FUZZ_CHECK(auth->credential_count(providers[i]) == counts[i]);
    return 0;
}

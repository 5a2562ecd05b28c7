#pragma once
// Model fallback on the usage-limit path (docs/settings.md, `retry.fallbackChains`), as plain code:
// no I/O, no clock. The session asks it what to switch to and performs the switch.
//
// Rules:
// - It applies only when the auth storage could not switch credentials.
// - The model that hit the limit ("provider/model") is put aside until now + the server's hint,
//   or 60 s without one.
// - The role: the first chain (settings order) that lists the current model; otherwise the
//   role "default", if configured, whose models then all act as fallbacks of the current one.
// - The next model: the first entry of that chain that is not the current model, not put
//   aside, and usable (the session's catalog knows it and has a key for it).
// - The model in use when the chain was entered is its primary. Before every request (a
//   retry's continue or a new prompt) the primary comes back once its cooldown has expired,
//   unless retry.fallbackRevertPolicy is "never".
// - retry_fallback_succeeded (once, on the first successful reply after a switch) is the run
//   policy's (session/run_policy.hpp): it is an event of the retry chain.
// - Cooldowns set elsewhere (other sessions or processes of a shared limit store, §11.30) count
//   as this session's own, when share() gave a way to read them.

#include <coagent/runtime/event.hpp>
#include <coagent/runtime/settings.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace coagent {

class model_fallback {
  public:
    static constexpr std::int64_t default_cooldown_ms = 60'000;

    /// A usage limit on `current` that no credential switch resolved. Puts `current` aside and
    /// returns the switch to make, or nullopt when no chain applies or no entry is usable.
    std::optional<retry_fallback_applied_event> on_usage_limit(
        std::string_view current, std::optional<std::int64_t> hint_ms, std::int64_t now_ms,
        const retry_settings& s, const std::function<bool(std::string_view)>& usable);

    /// Before a request: the primary to switch back to, if a fallback is active, the revert
    /// policy allows it and its cooldown has expired (the fallback state is then cleared).
    std::optional<std::string> primary_to_restore(std::int64_t now_ms, const retry_settings& s);

    /// The user chose a model (set_model): forget the fallback state, keep the cooldowns.
    void reset() noexcept {
        primary_.clear();
        role_.clear();
    }

    bool active() const noexcept { return !primary_.empty(); }
    const std::string& primary() const noexcept { return primary_; }
    /// When `selector` comes back (epoch ms); 0 if it is not put aside. The later of this
    /// session's cooldown and the shared one.
    std::int64_t suppressed_until(std::string_view selector) const;

    /// Reads the cooldowns set elsewhere: `shared(selector)` → until (epoch ms, 0: none).
    void share(std::function<std::int64_t(std::string_view)> shared) {
        shared_ = std::move(shared);
    }

  private:
    bool suppressed(std::string_view selector, std::int64_t now_ms) const {
        return suppressed_until(selector) > now_ms;
    }

    std::vector<std::pair<std::string, std::int64_t>> suppressed_;  // selector → until
    std::function<std::int64_t(std::string_view)> shared_;
    std::string primary_;  // the model the chain was entered from; empty: no fallback active
    std::string role_;
};

}  // namespace coagent

#pragma once
// Known bugs the fuzz targets found and that are reported, not yet fixed. While one is open,
// the targets skip the invariant it breaks for the inputs that trigger it (so the CI smoke run
// stays deterministic); flip the switch to false once it is fixed, and the targets check it
// again. See docs/reliability.md, "Findings".

#include <boost/json/value.hpp>

#include <cmath>

namespace coagent::fuzz {

/// Boost.JSON 1.81 parses a number beyond the double range (1e400) as ±infinity and serialises
/// it as `Infinity`, which no JSON parser (Boost.JSON included) reads back. Every place that
/// writes back JSON it parsed is affected: the RPC response's echoed `id`, settings.json after
/// persist_global, auth.json after a usage-limit block, session-file lines and RPC events that
/// carry tool-call arguments from a provider.
inline constexpr bool known_bug_non_finite_numbers = true;

/// Whether `v` holds a non-finite number anywhere.
inline bool has_non_finite(const boost::json::value& v) {
    switch (v.kind()) {
        case boost::json::kind::double_: return !std::isfinite(v.get_double());
        case boost::json::kind::array:
            for (const auto& x : v.get_array())
                if (has_non_finite(x)) return true;
            return false;
        case boost::json::kind::object:
            for (const auto& kv : v.get_object())
                if (has_non_finite(kv.value())) return true;
            return false;
        default: return false;
    }
}

/// An input whose invariants are skipped because of an open known bug.
inline bool skip_non_finite(const boost::json::value& v) {
    return known_bug_non_finite_numbers && has_non_finite(v);
}

}  // namespace coagent::fuzz

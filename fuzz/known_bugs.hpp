#pragma once
// Known bugs the fuzz targets found and that are reported, not yet fixed. While one is open,
// the targets skip the invariant it breaks for the inputs that trigger it (so the CI smoke run
// stays deterministic); flip the switch to false once it is fixed, and the targets check it
// again. See docs/reliability.md, "Findings".

#include <boost/json/value.hpp>

#include <cmath>
#include <cstdint>

namespace coagent::fuzz {

/// Boost.JSON 1.81 parses a number beyond the double range (1e400) as ±infinity and serialises
/// it as `Infinity`, which no JSON parser (Boost.JSON included) reads back. Every place that
/// writes back JSON it parsed is affected: the RPC response's echoed `id`, settings.json after
/// persist_global, auth.json after a usage-limit block, session-file lines and RPC events that
/// carry tool-call arguments from a provider. Fixed: every reader of outside JSON goes through
/// coagent::parse_json_strict (runtime/json_input.hpp), which refuses such numbers.
inline constexpr bool known_bug_non_finite_numbers = false;

/// Whether `v` holds a non-finite number anywhere.
inline bool has_non_finite(const boost::json::value& v) {
    switch (v.kind()) {
        case boost::json::kind::double_:
            return !std::isfinite(v.get_double());
        case boost::json::kind::array:
            for (const auto& x : v.get_array())
                if (has_non_finite(x)) return true;
            return false;
        case boost::json::kind::object:
            for (const auto& kv : v.get_object())
                if (has_non_finite(kv.value())) return true;
            return false;
        default:
            return false;
    }
}

/// An input whose invariants are skipped because of an open known bug.
inline bool skip_non_finite(const boost::json::value& v) {
    return known_bug_non_finite_numbers && has_non_finite(v);
}

/// Numbers beyond int64 reach undefined behaviour where coagent turns JSON into its integer
/// fields: `static_cast<std::int64_t>(double)` of a value out of range (runtime/src/message.cpp
/// get_int: a session file's timestamp or usage; providers/src/http_protocol.cpp int_of: a
/// provider's usage, e.g. "input_tokens":1e19) and signed overflow when usage parts are summed
/// into totalTokens ("input_tokens":9223372036854775807,"output_tokens":1). UBSan stops on both.
/// Fixed: conversions and sums saturate (coagent::saturating_int64, coagent::saturating_add).
inline constexpr bool known_bug_huge_numbers = false;

/// Whether `v` holds a number that an int64 field cannot take, or that overflows when added to
/// another (beyond ±2^61).
inline bool has_huge_number(const boost::json::value& v) {
    constexpr double limit = 2305843009213693952.0;  // 2^61
    switch (v.kind()) {
        case boost::json::kind::double_:
            return !(std::fabs(v.get_double()) < limit);
        case boost::json::kind::int64:
            return v.get_int64() > (std::int64_t{1} << 61) ||
                   v.get_int64() < -(std::int64_t{1} << 61);
        case boost::json::kind::uint64:
            return v.get_uint64() > (std::uint64_t{1} << 61);
        case boost::json::kind::array:
            for (const auto& x : v.get_array())
                if (has_huge_number(x)) return true;
            return false;
        case boost::json::kind::object:
            for (const auto& kv : v.get_object())
                if (has_huge_number(kv.value())) return true;
            return false;
        default:
            return false;
    }
}

inline bool skip_huge_numbers(const boost::json::value& v) {
    return known_bug_huge_numbers && has_huge_number(v);
}

}  // namespace coagent::fuzz

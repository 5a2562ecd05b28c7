#pragma once
// Park probes (docs/retry-policy.md §11.27): when several parked sessions of one account wake at
// the end of the same limit, the first one to wake sends one request (the probe) and the others
// wait for its outcome: a success lets them all continue, the same limit again keeps them all
// parked until the new reset. park_probe_book holds these rules as plain code (no I/O, no clock:
// the times are parameters); a limit_store keeps one book per process or fleet.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace coagent {

/// What a session whose park has elapsed does next.
struct park_wake {
    enum class kind : unsigned char {
        probe,   ///< it sends the request; report the outcome with park_probe_done
        wait,    ///< another session probes: ask again in park_probe_poll_ms
        go,      ///< a probe succeeded after this session parked: continue
        repark,  ///< a probe met the limit again after this session parked: park until `until`
    };
    kind what = kind::probe;
    std::int64_t until = 0;  ///< repark: epoch ms
};

/// How a probe ended.
enum class park_probe_outcome : unsigned char {
    succeeded,  ///< the request succeeded: the limit is over
    limited,    ///< the same limit again, until a new reset
    released,   ///< something else ended it (another error, a cancel): the next waiter probes
};

/// How often a session waiting for another's probe looks at the book.
inline constexpr std::int64_t park_probe_poll_ms = 1000;
/// A probe that reported nothing for this long is forgotten (its session died): the next waiter
/// probes instead.
inline constexpr std::int64_t park_probe_stale_ms = 10 * 60 * 1000;

/// The probes of every account (a provider name), one at a time per account.
class park_probe_book {
  public:
    /// `session`'s park on `account`, begun at `parked_at`, has elapsed at `now`.
    park_wake wake(std::string_view account, std::string_view session, std::int64_t parked_at,
                   std::int64_t now);
    /// `session`'s probe on `account` ended at `now` (`until`: the new reset when limited). A
    /// report from a session that is not the account's prober only records its outcome.
    void done(std::string_view account, std::string_view session, park_probe_outcome outcome,
              std::int64_t until, std::int64_t now);

  private:
    struct account_state {
        std::string prober;  // empty: no probe in flight
        std::int64_t claimed_at = 0;
        park_probe_outcome last = park_probe_outcome::released;
        std::int64_t last_at = -1;  // when the last probe ended (-1: none)
        std::int64_t until = 0;     // last == limited: the new reset
    };
    std::map<std::string, account_state, std::less<>> accounts_;
};

}  // namespace coagent

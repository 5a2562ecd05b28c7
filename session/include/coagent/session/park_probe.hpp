#pragma once
// Park probes (docs/retry-policy.md §11.27, §11.37): when several parked sessions of one account
// wake at the end of the same limit, the first one to wake sends one request (the probe) and the
// others wait for its outcome: a success lets them all continue, the same limit again keeps them
// all parked until the new reset. park_probe_book holds these rules as plain code (no I/O, no
// clock: the times are parameters); a limit_store keeps one book per process. A book shared by a
// fleet (the Redis store) also says when to ask the shared state for the account's claim, and
// learns the answers and the other processes' outcomes: the store only carries them.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

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
    switched,   ///< the same limit again on its credential, but the prober moved to another
                ///< credential of the account that was free (§11.37): the waiters continue too
};

/// How often a session waiting for another's probe looks at the book.
inline constexpr std::int64_t park_probe_poll_ms = 1000;
/// A probe that reported nothing for this long is forgotten (its session died): the next waiter
/// probes instead.
inline constexpr std::int64_t park_probe_stale_ms = 10 * 60 * 1000;
/// A shared book: the claim of an account lapses this long after its holder last refreshed it
/// (the holder process died): a waiter of another process then takes it.
inline constexpr std::int64_t park_claim_ttl_ms = 10'000;

/// A shared book asks the shared state for an account's claim (the right to probe).
struct park_claim_ask {
    std::string account;
    std::int64_t age_ms = 0;  ///< how long ago the asking session parked: a newer outcome answers
};

/// The shared state's answer to a park_claim_ask.
struct park_claim_answer {
    enum class kind : unsigned char {
        mine,     ///< this process holds the claim now: its next waking session probes
        theirs,   ///< another process holds it: wait for its outcome
        outcome,  ///< a probe ended after the asking session parked: `outcome`, `until`, `at`
        failed,   ///< no answer (the shared state is unreachable): ask again at the next wake
    };
    kind what = kind::failed;
    park_probe_outcome outcome = park_probe_outcome::released;
    std::int64_t until = 0;  ///< outcome limited: the new reset (epoch ms, this process's clock)
    std::int64_t at = 0;     ///< outcome: when it was reported (this process's clock)
};

/// The probes of every account (a provider name), one at a time per account.
class park_probe_book {
  public:
    /// `shared`: the probes are shared with other processes through a store that takes the
    /// claims the book asks for (take_asks) and answers them (on_claim_answer).
    explicit park_probe_book(bool shared = false) : shared_(shared) {}

    /// `session`'s park on `account`, begun at `parked_at`, has elapsed at `now`.
    park_wake wake(std::string_view account, std::string_view session, std::int64_t parked_at,
                   std::int64_t now);
    /// `session`'s probe on `account` ended at `now` (`until`: the new reset when limited). A
    /// report from a session that is not the account's prober only records its outcome. Returns
    /// true when a shared book held the account's claim for this probe: the store must publish
    /// the outcome and free the claim.
    bool done(std::string_view account, std::string_view session, park_probe_outcome outcome,
              std::int64_t until, std::int64_t now);

    // ---- a shared book --------------------------------------------------------------------
    /// The claims to ask the shared state for, since the last call (one per account at a time).
    std::vector<park_claim_ask> take_asks();
    /// The shared state answered the ask of `account` at `now`.
    void on_claim_answer(std::string_view account, const park_claim_answer& a, std::int64_t now);
    /// Another process's probe of `account` ended (`at`, `until`: this process's clock).
    void on_remote_done(std::string_view account, park_probe_outcome outcome, std::int64_t until,
                        std::int64_t at);
    /// The accounts whose claim this process holds for a probe in flight (the store keeps them
    /// from lapsing; a claim granted that no session took lapses by itself).
    std::vector<std::string> held_claims() const;

  private:
    enum class claim : unsigned char { none, asking, held, theirs };
    struct account_state {
        std::string prober;  // empty: no probe of this process in flight
        std::int64_t claimed_at = 0;
        park_probe_outcome last = park_probe_outcome::released;
        std::int64_t last_at = -1;  // when the last probe ended (-1: none)
        std::int64_t until = 0;     // last == limited: the new reset
        // shared: where the account's claim is, since when (asked, granted or seen)
        claim where = claim::none;
        std::int64_t claim_at = 0;
    };
    account_state& of(std::string_view account);
    void ask(account_state& a, std::string_view account, std::int64_t age, std::int64_t now);

    bool shared_ = false;
    std::map<std::string, account_state, std::less<>> accounts_;
    std::vector<park_claim_ask> asks_;
};

}  // namespace coagent

#include <coagent/session/park_probe.hpp>

namespace coagent {

park_wake park_probe_book::wake(std::string_view account, std::string_view session,
                                std::int64_t parked_at, std::int64_t now) {
    auto it = accounts_.find(account);
    if (it == accounts_.end()) it = accounts_.emplace(std::string(account), account_state{}).first;
    account_state& a = it->second;
    park_wake w;
    // an outcome reported after this session parked answers for it
    if (a.last_at >= parked_at && a.prober.empty()) {
        if (a.last == park_probe_outcome::succeeded) {
            w.what = park_wake::kind::go;
            return w;
        }
        if (a.last == park_probe_outcome::limited && a.until > now) {
            w.what = park_wake::kind::repark;
            w.until = a.until;
            return w;
        }
    }
    if (!a.prober.empty() && a.prober != session && now - a.claimed_at < park_probe_stale_ms) {
        w.what = park_wake::kind::wait;
        return w;
    }
    a.prober = std::string(session);
    a.claimed_at = now;
    w.what = park_wake::kind::probe;
    return w;
}

void park_probe_book::done(std::string_view account, std::string_view session,
                           park_probe_outcome outcome, std::int64_t until, std::int64_t now) {
    auto it = accounts_.find(account);
    if (it == accounts_.end()) it = accounts_.emplace(std::string(account), account_state{}).first;
    account_state& a = it->second;
    if (a.prober == session) a.prober.clear();
    if (outcome == park_probe_outcome::released) return;
    a.last = outcome;
    a.last_at = now;
    a.until = until;
}

}  // namespace coagent

#include <coagent/session/park_probe.hpp>

namespace coagent {

park_probe_book::account_state& park_probe_book::of(std::string_view account) {
    auto it = accounts_.find(account);
    if (it == accounts_.end()) it = accounts_.emplace(std::string(account), account_state{}).first;
    return it->second;
}

void park_probe_book::ask(account_state& a, std::string_view account, std::int64_t age,
                          std::int64_t now) {
    a.where = claim::asking;
    a.claim_at = now;
    asks_.push_back({std::string(account), age > 0 ? age : 0});
}

park_wake park_probe_book::wake(std::string_view account, std::string_view session,
                                std::int64_t parked_at, std::int64_t now) {
    account_state& a = of(account);
    park_wake w;
    // an outcome reported after this session parked answers for it
    if (a.last_at >= parked_at && a.prober.empty()) {
        if (a.last == park_probe_outcome::succeeded || a.last == park_probe_outcome::switched) {
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
    // a shared book probes only with the account's claim (its own prober, stale, held it)
    const bool claimed = !shared_ || !a.prober.empty() ||
                         (a.where == claim::held && now - a.claim_at < park_claim_ttl_ms);
    if (claimed) {
        a.prober = std::string(session);
        a.claimed_at = now;
        w.what = park_wake::kind::probe;
        return w;
    }
    w.what = park_wake::kind::wait;
    switch (a.where) {
        case claim::asking:  // an answer is on its way (unless it was lost)
            if (now - a.claim_at >= park_claim_ttl_ms) ask(a, account, now - parked_at, now);
            break;
        case claim::theirs:  // its outcome, or its lapse, shows at the next ask
            if (now - a.claim_at >= park_probe_poll_ms) ask(a, account, now - parked_at, now);
            break;
        case claim::none:
        case claim::held:  // lapsed before a session took it
            ask(a, account, now - parked_at, now);
            break;
    }
    return w;
}

bool park_probe_book::done(std::string_view account, std::string_view session,
                           park_probe_outcome outcome, std::int64_t until, std::int64_t now) {
    account_state& a = of(account);
    const bool mine = !session.empty() && a.prober == session;
    if (mine) a.prober.clear();
    const bool publish = shared_ && mine && a.where == claim::held;
    if (publish) a.where = claim::none;
    if (outcome == park_probe_outcome::released) return publish;
    a.last = outcome;
    a.last_at = now;
    a.until = until;
    return publish;
}

std::vector<park_claim_ask> park_probe_book::take_asks() {
    std::vector<park_claim_ask> out;
    out.swap(asks_);
    return out;
}

void park_probe_book::on_claim_answer(std::string_view account, const park_claim_answer& ans,
                                      std::int64_t now) {
    account_state& a = of(account);
    switch (ans.what) {
        case park_claim_answer::kind::mine:
            a.where = claim::held;
            a.claim_at = now;
            break;
        case park_claim_answer::kind::theirs:
            a.where = claim::theirs;
            a.claim_at = now;
            break;
        case park_claim_answer::kind::outcome:
            a.where = claim::none;
            if (ans.outcome != park_probe_outcome::released) {
                a.last = ans.outcome;
                a.last_at = ans.at;
                a.until = ans.until;
            }
            break;
        case park_claim_answer::kind::failed:
            a.where = claim::none;
            break;
    }
}

void park_probe_book::on_remote_done(std::string_view account, park_probe_outcome outcome,
                                     std::int64_t until, std::int64_t at) {
    account_state& a = of(account);
    if (a.where == claim::theirs) a.where = claim::none;  // its claim is free
    if (outcome == park_probe_outcome::released) return;
    a.last = outcome;
    a.last_at = at;
    a.until = until;
}

std::vector<std::string> park_probe_book::held_claims() const {
    std::vector<std::string> out;
    for (const auto& [k, a] : accounts_)
        if (a.where == claim::held && !a.prober.empty()) out.push_back(k);
    return out;
}

}  // namespace coagent

// retry.longWait (docs/retry-policy.md §11.24-§11.28): what a wait above retry.maxDelayMs does —
// fail, fall back, park — as plain decisions (run_policy, park_probe_book) told as tables, then
// sessions performing them on a manual clock: exact events, requests and session-file entries,
// cancelling and ending a park, re-entering an open park from the file, and several parked
// sessions of one account sharing a limit store (one probe, then all continue or stay parked).

#include "support/session_harness.hpp"

#include <coagent/retry/backoff.hpp>
#include <coagent/session/limit_store.hpp>
#include <coagent/session/park_probe.hpp>
#include <coagent/session/run_policy.hpp>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <catch2/catch.hpp>

#include <filesystem>

using namespace coagent;
using namespace coagent::test;
namespace fs = std::filesystem;
using strings = std::vector<std::string>;
using kind = run_action::kind;

namespace {

constexpr std::int64_t t0 = 1'700'000'000'000;
constexpr std::int64_t two_hours = 7'200'000;

struct recorder final : event_sink {
    strings seen;
    void operator()(event e) override {
        std::visit(
            [&](const auto& x) {
                using T = std::decay_t<decltype(x)>;
                if constexpr (std::is_same_v<T, agent_end_event>)
                    seen.push_back(std::string("agent_end{") + (x.will_retry ? "retry" : "final") +
                                   "}");
                else if constexpr (std::is_same_v<T, auto_retry_start_event>)
                    seen.push_back("auto_retry_start{" + std::to_string(x.attempt) + "/" +
                                   std::to_string(x.max_attempts) + "," +
                                   std::to_string(x.delay_ms) + "," +
                                   std::string(to_string(x.limit)) + "}");
                else if constexpr (std::is_same_v<T, auto_retry_end_event>)
                    seen.push_back(std::string("auto_retry_end{") + (x.success ? "ok" : "fail") +
                                   "," + std::to_string(x.attempt) +
                                   (x.final_error ? "," + *x.final_error : std::string()) + "}");
                else if constexpr (std::is_same_v<T, retry_fallback_applied_event>)
                    seen.push_back("retry_fallback_applied{" + x.to + "}");
                else if constexpr (std::is_same_v<T, retry_parked_event>)
                    seen.push_back("retry_parked{" + std::to_string(x.until) + "," +
                                   std::string(to_string(x.limit)) + "," + x.error_message + "}");
                else
                    seen.push_back(std::string(event_type(event(x))));
            },
            e);
    }
    strings take() { return std::exchange(seen, {}); }
    bool has(std::string_view prefix) const {
        for (const auto& s : seen)
            if (s.starts_with(prefix)) return true;
        return false;
    }
};

settings long_wait_settings(long_wait_policy p, bool chain) {
    settings s;
    s.retry.max_delay_ms = 60'000;
    s.retry.long_wait = p;
    if (chain)
        s.retry.fallback =
            std::make_shared<const fallback_chains>(fallback_chains{{"default", {"q/n"}}});
    return s;
}

message_ptr failed(std::string error) {
    auto m = std::make_shared<message>();
    m->role = message_role::assistant;
    m->stop = stop_reason::error;
    m->provider = "p";
    m->model = "m";
    m->error_message = std::move(error);
    return m;
}

run_end ended(message_ptr last, error_kind k, limit_kind limit, std::optional<std::int64_t> hint,
              bool can_fall_back) {
    run_end in;
    in.added = {last};
    in.last = std::move(last);
    in.cls.kind = k;
    in.cls.limit = limit;
    in.cls.retry_after_ms = hint;
    in.can_fall_back = can_fall_back;
    in.park.now_ms = t0;
    return in;
}

// one run's end through the policy, with the switches answered: no credential; a fallback model
// exactly when `chain`
run_action drive(run_policy& p, run_end in, const settings& s, recorder& out, bool chain) {
    p.on_reply_end(*in.last, out);
    run_action a = p.on_run_end(std::move(in), s, out);
    for (int i = 0; i < 4; ++i) {
        if (a.what == kind::switch_credential) {
            a = p.on_credential_switch(false, s, out);
        } else if (a.what == kind::switch_model) {
            std::optional<retry_fallback_applied_event> applied;
            if (chain) applied = retry_fallback_applied_event{"p/m", "q/n", "default"};
            a = p.on_model_switch(std::move(applied), s, out);
        } else {
            break;
        }
    }
    return a;
}

std::string outcome_of(const run_action& a, const recorder& out) {
    if (a.what == kind::park) return "park";
    if (a.what == kind::wait) return out.has("retry_fallback_applied") ? "fallback" : "backoff";
    if (out.has("auto_retry_end{fail")) return "fail";
    return "other";
}

}  // namespace

// ---- the decisions ------------------------------------------------------------------------------

TEST_CASE("retry.longWait: each limit type under each policy, with and without a fallback model",
          "[long_wait][run_policy][spec-11]") {
    struct limit_case {
        limit_kind limit;
        error_kind kind;
        std::optional<std::int64_t> hint;  // billing: none (an infinite wait)
    };
    const std::vector<limit_case> limits = {
        {limit_kind::rate, error_kind::retryable, two_hours},
        {limit_kind::quota, error_kind::usage_limit, two_hours},
        {limit_kind::billing, error_kind::usage_limit, std::nullopt},
        {limit_kind::capacity, error_kind::retryable, two_hours},
        {limit_kind::server, error_kind::retryable, two_hours},
        {limit_kind::transport, error_kind::retryable, two_hours},
    };
    struct row {
        long_wait_policy policy;
        bool chain;
        std::string waitable;  // rate, quota, capacity, server, transport (a 2 h wait)
        std::string billing;
        std::string usage_limit_fail;  // quota and billing under "fail" (today's §11.14)
    };
    // "fail" is today's behaviour: honorRetryAfter is off, so the 2 h hint is not honoured and
    // the backoff applies; a usage limit moves along the fallback chain (§11.14) as before
    const std::vector<row> table = {
        {long_wait_policy::fail, false, "backoff", "backoff", "backoff"},
        {long_wait_policy::fail, true, "backoff", "fallback", "fallback"},
        {long_wait_policy::fallback, false, "fail", "fail", ""},
        {long_wait_policy::fallback, true, "fallback", "fallback", ""},
        {long_wait_policy::park, false, "park", "fail", ""},
        {long_wait_policy::park, true, "park", "fail", ""},
        {long_wait_policy::fallback_park, false, "park", "fail", ""},
        {long_wait_policy::fallback_park, true, "fallback", "fallback", ""},
    };
    for (const row& r : table)
        for (const limit_case& l : limits) {
            INFO("policy " << static_cast<int>(r.policy) << " chain " << r.chain << " limit "
                           << to_string(l.limit));
            run_policy p;
            p.set_random([] { return 0.5; });
            recorder out;
            const settings s = long_wait_settings(r.policy, r.chain);
            p.begin_prompt();
            const run_action a =
                drive(p, ended(failed("limit"), l.kind, l.limit, l.hint, r.chain), s, out, r.chain);
            std::string want = l.limit == limit_kind::billing ? r.billing : r.waitable;
            if (r.policy == long_wait_policy::fail && l.kind == error_kind::usage_limit)
                want = r.usage_limit_fail;
            CHECK(outcome_of(a, out) == want);
            if (want == "fail") {
                const std::string why = l.limit == limit_kind::billing
                                            ? "limit (a billing limit: waiting will not help)"
                                            : "limit (server asked to wait 7200s, above "
                                              "retry.maxDelayMs)";
                CHECK(out.seen ==
                      strings{"agent_end{final}", "auto_retry_end{fail,0," + why + "}"});
                CHECK(a.what == kind::settle);
            }
            if (want == "park") {
                CHECK(out.seen == strings{"agent_end{retry}",
                                          "auto_retry_start{1/3,7200000," +
                                              std::string(to_string(l.limit)) + "}",
                                          "retry_parked{1700007200000," +
                                              std::string(to_string(l.limit)) + ",limit}"});
                CHECK(a.until_ms == t0 + two_hours);
                CHECK(a.delay_ms == two_hours + 30'000);  // spread: 0.5 × min(10 %, 60 s)
                CHECK(a.drop_failed_reply);
                CHECK(p.parked_until() == t0 + two_hours);
                CHECK(p.machine().is_retrying());
                CHECK(p.machine().attempt() == 1);  // a park counts as one attempt
            }
            if (want == "fallback") {
                CHECK(a.delay_ms == 0);
                CHECK(out.has("retry_fallback_applied{q/n}"));
                CHECK_FALSE(out.has("retry_parked"));
            }
            if (want == "backoff") CHECK(a.delay_ms == 2000);
        }
}

TEST_CASE("retry.longWait engages only above retry.maxDelayMs, and never with it 0",
          "[long_wait][run_policy][spec-11]") {
    for (const auto policy :
         {long_wait_policy::fallback, long_wait_policy::park, long_wait_policy::fallback_park}) {
        SECTION("a hint under retry.maxDelayMs: the backoff") {
            run_policy p;
            recorder out;
            const settings s = long_wait_settings(policy, false);
            p.begin_prompt();
            const run_action a = drive(
                p, ended(failed("429"), error_kind::retryable, limit_kind::rate, 59'000, false), s,
                out, false);
            CHECK(a.what == kind::wait);
            CHECK(a.delay_ms == 2000);
        }
        SECTION("retry.maxDelayMs 0: a 2 h hint and a billing limit keep today's behaviour") {
            run_policy p;
            recorder out;
            settings s = long_wait_settings(policy, false);
            s.retry.max_delay_ms = 0;
            p.begin_prompt();
            run_action a = drive(
                p, ended(failed("429"), error_kind::retryable, limit_kind::rate, two_hours, false),
                s, out, false);
            CHECK(a.what == kind::wait);
            CHECK(a.delay_ms == 2000);
            run_policy q;
            q.begin_prompt();
            a = drive(q,
                      ended(failed("billing"), error_kind::usage_limit, limit_kind::billing,
                            std::nullopt, false),
                      s, out, false);
            CHECK(a.what == kind::wait);
            CHECK(a.delay_ms == 2000);
        }
    }
}

TEST_CASE("retry.longWait \"fallback,park\": the fallback first, the park when no model is left",
          "[long_wait][run_policy][spec-11]") {
    run_policy p;
    p.set_random([] { return 0.0; });
    recorder out;
    const settings s = long_wait_settings(long_wait_policy::fallback_park, true);
    p.begin_prompt();
    run_action a =
        drive(p, ended(failed("429 a"), error_kind::retryable, limit_kind::rate, two_hours, true),
              s, out, true);
    CHECK(out.take() == strings{"agent_end{retry}", "retry_fallback_applied{q/n}",
                                "auto_retry_start{1/3,0,rate}"});
    REQUIRE(a.what == kind::wait);
    CHECK(p.on_wait_done(true, false, out).what == kind::run);
    // the fallback model meets the same long wait, and the chain has no model left
    a = drive(p, ended(failed("429 b"), error_kind::retryable, limit_kind::rate, two_hours, true),
              s, out, false);
    CHECK(out.take() == strings{"agent_end{retry}", "auto_retry_start{2/3,7200000,rate}",
                                "retry_parked{1700007200000,rate,429 b}"});
    REQUIRE(a.what == kind::park);
    CHECK(a.delay_ms == two_hours);  // a draw of 0: no spread
}

TEST_CASE("a park ends like a backoff: abort_retry cancels it, retry_now ends it at once",
          "[long_wait][run_policy][spec-11]") {
    const settings s = long_wait_settings(long_wait_policy::park, false);
    const auto parked = [&](run_policy& p, recorder& out) {
        p.begin_prompt();
        const run_action a = drive(
            p, ended(failed("429"), error_kind::retryable, limit_kind::rate, two_hours, false), s,
            out, false);
        REQUIRE(a.what == kind::park);
        out.take();
    };
    SECTION("abort_retry: Retry cancelled, the park ends cancelled") {
        run_policy p;
        recorder out;
        parked(p, out);
        CHECK(p.abort_retry().cancel_wait);
        const run_action a = p.on_park_done(false, false, park_context{}, out);
        CHECK(out.take() == strings{"auto_retry_end{fail,1,Retry cancelled}"});
        CHECK(a.what == kind::settle);
        CHECK(a.ended_park == run_action::park_end::cancelled);
        CHECK(p.result().error == "Retry cancelled");
        CHECK_FALSE(p.parked_until());
        CHECK_FALSE(p.machine().is_retrying());
    }
    SECTION("abort: the same end, the prompt aborted") {
        run_policy p;
        recorder out;
        parked(p, out);
        CHECK(p.abort().cancel_wait);
        const run_action a = p.on_park_done(false, false, park_context{}, out);
        CHECK(out.take() == strings{"auto_retry_end{fail,1,Retry cancelled}"});
        CHECK(a.ended_park == run_action::park_end::cancelled);
        CHECK(p.result().outcome == prompt_result::status::aborted);
    }
    SECTION("retry_now: the run starts, the park ends resumed, no probe is asked") {
        run_policy p;
        recorder out;
        parked(p, out);
        CHECK(p.retry_now());
        local_limit_store store;
        const run_action a = p.on_park_done(false, false, park_context{&store, "s1", t0}, out);
        CHECK(out.take().empty());
        CHECK(a.what == kind::run);
        CHECK(a.ended_park == run_action::park_end::resumed);
        CHECK_FALSE(p.parked_until());
        CHECK(p.machine().attempt() == 1);
    }
}

TEST_CASE("park_spread_ms: up to 10 % of the wait, at most 60 s", "[long_wait][spec-11]") {
    CHECK(park_spread_ms(two_hours, 0.0) == 0);
    CHECK(park_spread_ms(two_hours, 0.5) == 30'000);     // 10 % is 720 s: capped at 60 s
    CHECK(park_spread_ms(two_hours, 0.9999) == 59'994);  // never the whole 60 s
    CHECK(park_spread_ms(100'000, 0.5) == 5'000);        // 10 % of 100 s, halved
    CHECK(park_spread_ms(0, 0.5) == 0);
    CHECK(park_spread_ms(-5, 0.5) == 0);
    CHECK(park_spread_ms(std::numeric_limits<std::int64_t>::max(), 1.5) == 59'999);
}

TEST_CASE("park_probe_book: one probe per account, the others wait for its outcome",
          "[long_wait][park_probe][spec-11]") {
    park_probe_book book;
    using k = park_wake::kind;
    // three sessions parked at t0 on account "p"; s1 wakes first
    CHECK(book.wake("p", "s1", t0, t0 + 100).what == k::probe);
    CHECK(book.wake("p", "s2", t0, t0 + 200).what == k::wait);
    CHECK(book.wake("q", "s3", t0, t0 + 200).what == k::probe);  // another account: its own
    SECTION("the probe succeeds: every session parked before it goes") {
        book.done("p", "s1", park_probe_outcome::succeeded, 0, t0 + 300);
        CHECK(book.wake("p", "s2", t0, t0 + 400).what == k::go);
        CHECK(book.wake("p", "s4", t0 + 50, t0 + 400).what == k::go);
        // a session that parked after the success probes for itself
        CHECK(book.wake("p", "s5", t0 + 500, t0 + 600).what == k::probe);
    }
    SECTION("the same limit again: the others park until the new reset") {
        book.done("p", "s1", park_probe_outcome::limited, t0 + two_hours, t0 + 300);
        const park_wake w = book.wake("p", "s2", t0, t0 + 400);
        CHECK(w.what == k::repark);
        CHECK(w.until == t0 + two_hours);
        // once the new reset has passed, the next to wake probes again
        CHECK(book.wake("p", "s2", t0 + 400, t0 + two_hours + 1).what == k::probe);
    }
    SECTION("released (another error, a cancel): the next waiter probes") {
        book.done("p", "s1", park_probe_outcome::released, 0, t0 + 300);
        CHECK(book.wake("p", "s2", t0, t0 + 400).what == k::probe);
    }
    SECTION("a probe that never reports is forgotten after park_probe_stale_ms") {
        CHECK(book.wake("p", "s2", t0, t0 + 100 + park_probe_stale_ms - 1).what == k::wait);
        CHECK(book.wake("p", "s2", t0, t0 + 100 + park_probe_stale_ms).what == k::probe);
    }
}

TEST_CASE("park_probe_book shared by a fleet: one claim per account, its outcome for all",
          "[long_wait][park_probe][spec-11]") {
    using k = park_wake::kind;
    using ans = park_claim_answer::kind;
    const auto answer = [](ans what) {
        park_claim_answer a;
        a.what = what;
        return a;
    };
    park_probe_book a(true);  // two processes sharing a store, parked at t0 on account "p"
    park_probe_book b(true);
    // a1 wakes first: its process asks for the claim; no session probes before the answer
    CHECK(a.wake("p", "a1", t0, t0 + 100).what == k::wait);
    auto asks = a.take_asks();
    REQUIRE(asks.size() == 1);
    CHECK(asks[0].account == "p");
    CHECK(asks[0].age_ms == 100);
    CHECK(a.wake("p", "a2", t0, t0 + 150).what == k::wait);
    CHECK(a.take_asks().empty());  // one ask at a time per account
    CHECK(b.wake("p", "b1", t0, t0 + 120).what == k::wait);
    CHECK(b.take_asks().size() == 1);
    a.on_claim_answer("p", answer(ans::mine), t0 + 110);
    b.on_claim_answer("p", answer(ans::theirs), t0 + 130);
    // the holder's next session to look probes; everyone else waits
    CHECK(a.wake("p", "a2", t0, t0 + 1150).what == k::probe);
    CHECK(a.held_claims() == strings{"p"});
    CHECK(a.wake("p", "a1", t0, t0 + 1100).what == k::wait);
    CHECK(a.take_asks().empty());
    CHECK(b.wake("p", "b1", t0, t0 + 1129).what == k::wait);
    CHECK(b.take_asks().empty());  // not before park_probe_poll_ms
    CHECK(b.wake("p", "b1", t0, t0 + 1130).what == k::wait);
    CHECK(b.take_asks().size() == 1);  // a claim held elsewhere is asked again each poll
    b.on_claim_answer("p", answer(ans::theirs), t0 + 1135);
    CHECK(b.wake("p", "b1", t0, t0 + 1500).what == k::wait);
    CHECK(b.take_asks().empty());  // not before park_probe_poll_ms
    SECTION("the probe succeeds: every waiter of every process goes") {
        CHECK(a.done("p", "a2", park_probe_outcome::succeeded, 0, t0 + 2000));  // to publish
        CHECK(a.held_claims().empty());
        CHECK(a.wake("p", "a1", t0, t0 + 2100).what == k::go);
        b.on_remote_done("p", park_probe_outcome::succeeded, 0, t0 + 2000);
        CHECK(b.wake("p", "b1", t0, t0 + 2120).what == k::go);
        CHECK(b.take_asks().empty());
    }
    SECTION("the same limit again: all repark until the new reset") {
        CHECK(a.done("p", "a2", park_probe_outcome::limited, t0 + two_hours, t0 + 2000));
        CHECK(a.wake("p", "a1", t0, t0 + 2100).what == k::repark);
        b.on_remote_done("p", park_probe_outcome::limited, t0 + two_hours, t0 + 2000);
        const park_wake w = b.wake("p", "b1", t0, t0 + 2120);
        CHECK(w.what == k::repark);
        CHECK(w.until == t0 + two_hours);
    }
    SECTION("switched to a free credential: the waiters continue") {
        CHECK(a.done("p", "a2", park_probe_outcome::switched, 0, t0 + 2000));
        CHECK(a.wake("p", "a1", t0, t0 + 2100).what == k::go);
        b.on_remote_done("p", park_probe_outcome::switched, 0, t0 + 2000);
        CHECK(b.wake("p", "b1", t0, t0 + 2120).what == k::go);
    }
    SECTION("released: the claim is free, the next to look asks at once") {
        CHECK(a.done("p", "a2", park_probe_outcome::released, 0, t0 + 2000));
        b.on_remote_done("p", park_probe_outcome::released, 0, t0 + 2000);
        CHECK(b.wake("p", "b1", t0, t0 + 2010).what == k::wait);
        CHECK(b.take_asks().size() == 1);
        b.on_claim_answer("p", answer(ans::mine), t0 + 2020);
        CHECK(b.wake("p", "b1", t0, t0 + 3010).what == k::probe);
    }
    SECTION("the holder died: the shared state gives the lapsed claim to a waiter") {
        CHECK(b.wake("p", "b1", t0, t0 + 2135).what == k::wait);
        CHECK(b.take_asks().size() == 1);
        b.on_claim_answer("p", answer(ans::mine), t0 + 2140);
        CHECK(b.wake("p", "b1", t0, t0 + 3135).what == k::probe);
    }
    SECTION("a late reader: an outcome already stored answers the ask") {
        park_claim_answer o = answer(ans::outcome);
        o.outcome = park_probe_outcome::succeeded;
        o.at = t0 + 1600;
        b.on_claim_answer("p", o, t0 + 1700);
        CHECK(b.wake("p", "b1", t0, t0 + 2125).what == k::go);
    }
    SECTION("a report of a session that is not the prober publishes nothing") {
        CHECK_FALSE(a.done("p", "a1", park_probe_outcome::released, 0, t0 + 2000));
        CHECK(a.held_claims() == strings{"p"});
    }
}

TEST_CASE("park_probe_book shared: a claim nobody took lapses, an unanswered ask is asked again",
          "[long_wait][park_probe][spec-11]") {
    using k = park_wake::kind;
    park_probe_book a(true);
    CHECK(a.wake("p", "a1", t0, t0).what == k::wait);
    CHECK(a.take_asks().size() == 1);
    SECTION("no answer within park_claim_ttl_ms: asked again") {
        CHECK(a.wake("p", "a1", t0, t0 + park_claim_ttl_ms - 1).what == k::wait);
        CHECK(a.take_asks().empty());
        CHECK(a.wake("p", "a1", t0, t0 + park_claim_ttl_ms).what == k::wait);
        CHECK(a.take_asks().size() == 1);
    }
    SECTION("the answer failed (the shared state is unreachable): asked again at the next look") {
        park_claim_answer f;
        f.what = park_claim_answer::kind::failed;
        a.on_claim_answer("p", f, t0 + 10);
        CHECK(a.wake("p", "a1", t0, t0 + 1000).what == k::wait);
        CHECK(a.take_asks().size() == 1);
    }
    SECTION("a claim granted that no session took within park_claim_ttl_ms is not used") {
        park_claim_answer m;
        m.what = park_claim_answer::kind::mine;
        a.on_claim_answer("p", m, t0 + 10);
        CHECK(a.held_claims().empty());  // not refreshed: no probe in flight
        CHECK(a.wake("p", "a1", t0, t0 + 10 + park_claim_ttl_ms).what == k::wait);
        CHECK(a.take_asks().size() == 1);
    }
    SECTION("a book that is not shared never asks") {
        park_probe_book local;
        CHECK(local.wake("p", "s1", t0, t0).what == k::probe);
        CHECK(local.take_asks().empty());
        CHECK_FALSE(local.done("p", "s1", park_probe_outcome::succeeded, 0, t0 + 1));
    }
}

TEST_CASE("a probe that a credential switch resolves reports switched: the waiters continue",
          "[long_wait][run_policy][park_probe][spec-11]") {
    const settings s = long_wait_settings(long_wait_policy::park, false);
    local_limit_store store;
    run_policy p;
    p.set_random([] { return 0.0; });
    recorder out;
    p.begin_prompt();
    // the usage limit parks: no other credential is free
    run_action a = drive(
        p, ended(failed("429 usage"), error_kind::usage_limit, limit_kind::quota, two_hours, false),
        s, out, false);
    REQUIRE(a.what == kind::park);
    // s2, parked at the same time, wakes after s1 took the probe
    a = p.on_park_done(true, false, park_context{&store, "s1", t0 + two_hours}, out);
    REQUIRE(a.what == kind::run);
    CHECK(store.park_probe_wake("p", "s2", t0, t0 + two_hours + 1).what == park_wake::kind::wait);
    out.take();
    // the probe meets the limit again on its credential
    run_end again =
        ended(failed("429 usage"), error_kind::usage_limit, limit_kind::quota, two_hours, false);
    again.park = park_context{&store, "s1", t0 + two_hours + 100};
    p.on_reply_end(*again.last, out);
    a = p.on_run_end(std::move(again), s, out);
    REQUIRE(a.what == kind::switch_credential);
    SECTION("the pool had a free credential: switched, the waiters go") {
        a = p.on_credential_switch(true, s, out);
        CHECK(a.what == kind::wait);
        CHECK(a.delay_ms == 0);
        CHECK(store.park_probe_wake("p", "s2", t0, t0 + two_hours + 200).what ==
              park_wake::kind::go);
    }
    SECTION("no credential free: limited, the waiters repark until the new reset") {
        a = p.on_credential_switch(false, s, out);
        CHECK(a.what == kind::park);
        const park_wake w = store.park_probe_wake("p", "s2", t0, t0 + two_hours + 200);
        CHECK(w.what == park_wake::kind::repark);
        CHECK(w.until == t0 + two_hours + 100 + two_hours);
    }
}

// ---- sessions on a manual clock -----------------------------------------------------------------

namespace {

struct temp_dir {
    fs::path path;
    temp_dir() {
        path = fs::temp_directory_path() / ("coagent-test-" + random_hex_id(12));
        fs::create_directories(path);
        fs::permissions(path, fs::perms::owner_all);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

constexpr const char* quota_error =
    R"({"error":"429 You have reached your usage limit for this period retry-after-ms=7200000","status":429})";

// the session file's entries other than messages: type and the fields a park writes
strings park_entries(const session_history& h) {
    strings out;
    for (const auto& e : h.entries()) {
        if (e.type == "retry_park")
            out.push_back("retry_park{" + json::serialize(e.raw.at("until")) + "," +
                          json::serialize(e.raw.at("attempt")) + "," +
                          std::string(e.raw.at("limit").as_string()) + "," +
                          std::string(e.raw.at("errorMessage").as_string()) + "}");
        else if (e.type == "retry_park_end")
            out.push_back("retry_park_end{" + std::string(e.raw.at("outcome").as_string()) + "}");
        else if (e.type == "retry_end")
            out.push_back(std::string("retry_end{") +
                          (e.raw.at("success").as_bool() ? "ok" : "fail") + "}");
    }
    return out;
}

settings park_settings() {
    settings s = long_wait_settings(long_wait_policy::park, false);
    return s;
}

void jump(harness& h, std::int64_t ms) {
    manual_clock::advance(std::chrono::milliseconds(ms));
    h.run_ready();
}

const strings parked_prefix = {"agent_start",
                               "turn_start",
                               "message_start:user",
                               "message_end:user",
                               "message_start:assistant",
                               "message_end:assistant:error",
                               "turn_end",
                               "agent_end{retry}",
                               "auto_retry_start{1}",
                               "retry_parked"};

}  // namespace

TEST_CASE("a parked prompt: exact events and entries, it resumes at until + spread",
          "[long_wait][session][spec-11]") {
    temp_dir dir;
    harness h(std::string("[") + quota_error + R"(,{"text":"back"}])", park_settings(),
              [&](session_options& o) {
                  o.session_dir = dir.path;
                  o.random = [] { return 0.5; };
              });
    h.prompt("hi");
    CHECK(brief(h.events) == parked_prefix);
    CHECK(h.of("auto_retry_start")[0].at("delayMs").as_int64() == two_hours);
    CHECK(h.of("auto_retry_start")[0].at("limit") == "quota");
    CHECK(
        h.of("retry_parked")[0] ==
        obj(R"({"type":"retry_parked","until":1700007200000,"limit":"quota","errorMessage":"429 You have reached your usage limit for this period retry-after-ms=7200000"})"));
    CHECK(h.session->parked_until() == t0 + two_hours);
    CHECK(h.session->is_retrying());
    CHECK(h.session->retry_attempt() == 1);
    CHECK(park_entries(h.session->history()) ==
          strings{"retry_park{1700007200000,1,quota,429 You have reached your usage limit for "
                  "this period retry-after-ms=7200000}"});
    jump(h, two_hours + 30'000 - 1);  // until + 0.5 × 60 s, less 1 ms
    CHECK_FALSE(h.done());
    CHECK(h.requests().size() == 1);
    jump(h, 1);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    REQUIRE(h.requests().size() == 2);
    CHECK(h.requests()[1].messages.size() == 1);  // the failed reply is not sent back
    const strings all = brief(h.events);
    const strings tail(all.begin() + static_cast<std::ptrdiff_t>(parked_prefix.size()), all.end());
    CHECK(tail == strings{"agent_start", "turn_start", "message_start:assistant",
                          "message_end:assistant:stop", "auto_retry_end{ok,1}", "turn_end",
                          "agent_end{final}", "agent_settled"});
    CHECK_FALSE(h.session->parked_until());
    CHECK(park_entries(h.session->history()) ==
          strings{"retry_park{1700007200000,1,quota,429 You have reached your usage limit for "
                  "this period retry-after-ms=7200000}",
                  "retry_park_end{resumed}", "retry_end{ok}"});
    CHECK_FALSE(h.session->open_park_in_history());
}

TEST_CASE("a park is cancelled like a backoff and ended by retry_now or a joining prompt",
          "[long_wait][session][spec-11]") {
    temp_dir dir;
    harness h(std::string("[") + quota_error + R"(,{"text":"back"}])", park_settings(),
              [&](session_options& o) { o.session_dir = dir.path; });
    h.prompt("hi");
    REQUIRE(h.session->parked_until());
    SECTION("abort_retry") {
        h.session->abort_retry();
        h.run_ready();
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::failed);
        CHECK(h.result->error == "Retry cancelled");
        const strings all = brief(h.events);
        const strings tail(all.begin() + static_cast<std::ptrdiff_t>(parked_prefix.size()),
                           all.end());
        CHECK(tail == strings{"auto_retry_end{fail,1}", "agent_settled"});
        CHECK(h.of("auto_retry_end")[0].at("finalError") == "Retry cancelled");
        CHECK(park_entries(h.session->history()).back() == "retry_park_end{cancelled}");
        CHECK(park_entries(h.session->history()).size() == 3);  // park, retry_end, park_end
        CHECK(h.requests().size() == 1);
        CHECK_FALSE(h.session->open_park_in_history());
    }
    SECTION("abort") {
        h.session->abort();
        h.run_ready();
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::aborted);
        CHECK(park_entries(h.session->history()).back() == "retry_park_end{cancelled}");
        CHECK(h.requests().size() == 1);
    }
    SECTION("retry_now") {
        CHECK(h.session->retry_now());
        h.run_ready();
        REQUIRE(h.done());
        CHECK(h.result->outcome == prompt_result::status::succeeded);
        CHECK(h.requests().size() == 2);
        CHECK(park_entries(h.session->history())[1] == "retry_park_end{resumed}");
    }
    SECTION("a prompt joins the park and goes out at once") {
        std::optional<prompt_result> second;
        h.prompt_into("still there?", streaming_behavior::none, second);
        REQUIRE(h.done());
        REQUIRE(second);
        CHECK(second->outcome == prompt_result::status::succeeded);
        REQUIRE(h.requests().size() == 2);
        CHECK(h.requests()[1].messages.size() == 2);  // both user messages, not the error
    }
}

TEST_CASE(
    "a resumed session re-enters its open park and continues at until, with a prompt's events",
    "[long_wait][session][spec-11]") {
    temp_dir dir;
    fs::path copy = dir.path / "copy";
    fs::create_directories(copy);
    {
        harness a(std::string("[") + quota_error + "]", park_settings(),
                  [&](session_options& o) { o.session_dir = dir.path; });
        a.prompt("hi");
        REQUIRE(a.session->parked_until());
        // what a kill -9 leaves: the file as it is now
        fs::copy_file(*a.session->history().file(), copy / "parked.jsonl");
    }
    harness b(R"([{"text":"back"}])", park_settings(), [&](session_options& o) {
        o.resume_file = copy / "parked.jsonl";
        o.now_ms = [] { return t0 + 1000; };  // 1 s later
        o.random = [] { return 0.0; };
    });
    const auto open = b.session->open_park_in_history();
    REQUIRE(open);
    CHECK(open->until == t0 + two_hours);
    CHECK(open->attempt == 1);
    CHECK(open->limit == limit_kind::quota);
    CHECK(open->provider == "faux");
    std::optional<prompt_result> r;
    asio::co_spawn(b.io, b.session->resume_park(), [&](std::exception_ptr e, prompt_result x) {
        if (e) std::rethrow_exception(e);
        r = std::move(x);
    });
    b.run_ready();
    CHECK(brief(b.events) == strings{"retry_parked"});
    CHECK(b.of("retry_parked")[0].at("until").as_int64() == t0 + two_hours);
    CHECK(b.session->parked_until() == t0 + two_hours);
    CHECK(b.session->is_busy());
    jump(b, two_hours - 1000 - 1);
    CHECK_FALSE(r);
    CHECK(b.requests().empty());
    jump(b, 1);
    REQUIRE(r);
    CHECK(r->outcome == prompt_result::status::succeeded);
    CHECK(brief(b.events) == strings{"retry_parked", "agent_start", "turn_start",
                                     "message_start:assistant", "message_end:assistant:stop",
                                     "auto_retry_end{ok,1}", "turn_end", "agent_end{final}",
                                     "agent_settled"});
    REQUIRE(b.requests().size() == 1);
    CHECK(b.requests()[0].messages.size() == 1);  // the user message; the failed reply left
    const strings entries = park_entries(b.session->history());
    CHECK(entries.size() == 4);  // the first park, its re-entry, the end, the chain's end
    CHECK(entries[2] == "retry_park_end{resumed}");
    CHECK_FALSE(b.session->open_park_in_history());
    // nothing left to re-enter
    std::optional<prompt_result> again;
    asio::co_spawn(b.io, b.session->resume_park(),
                   [&](std::exception_ptr, prompt_result x) { again = std::move(x); });
    b.run_ready();
    REQUIRE(again);
    CHECK(again->outcome == prompt_result::status::refused);
    CHECK(again->error == "The session has no open park");
    CHECK_FALSE(b.session->is_busy());
}

namespace {

// several sessions of one account ("faux") on one io_context, sharing a limit store
struct fleet {
    asio::io_context io;
    std::shared_ptr<local_limit_store> store = std::make_shared<local_limit_store>();
    std::vector<std::shared_ptr<faux_provider>> faux;
    std::vector<std::unique_ptr<agent_session>> sessions;
    std::vector<std::vector<std::string>> events;
    std::vector<subscription> subs;
    std::vector<std::optional<prompt_result>> results;

    fleet(const std::vector<std::string>& scripts, const std::vector<double>& draws) {
        manual_clock::reset();
        events.resize(scripts.size());
        results.resize(scripts.size());
        for (std::size_t i = 0; i < scripts.size(); ++i) {
            faux_options fo;
            fo.script = faux_script::parse(scripts[i], "<test>");
            fo.clock = clock_kind::manual;
            faux.push_back(std::make_shared<faux_provider>(std::move(fo)));
            session_options so;
            so.executor = io.get_executor();
            so.model_provider = faux.back();
            so.config = park_settings();
            so.clock = clock_kind::manual;
            so.now_ms = [] {
                return manual_clock::now().time_since_epoch().count() / 1'000'000 + t0;
            };
            so.limits = store;
            const double u = draws[i];
            so.random = [u] { return u; };
            sessions.push_back(std::make_unique<agent_session>(std::move(so)));
            subs.push_back(sessions.back()->subscribe([this, i](const event& e) {
                auto j = to_json(e);
                std::string t(j.at("type").as_string());
                if (t == "retry_parked") t += "{" + json::serialize(j.at("until")) + "}";
                if (t == "message_update" || t.starts_with("message_") || t == "turn_start" ||
                    t == "turn_end")
                    return;
                events[i].push_back(std::move(t));
            }));
        }
        for (std::size_t i = 0; i < sessions.size(); ++i)
            asio::co_spawn(io, sessions[i]->prompt("hi"),
                           [this, i](std::exception_ptr e, prompt_result r) {
                               if (e) std::rethrow_exception(e);
                               results[i] = std::move(r);
                           });
        run_ready();
    }
    void run_ready() {
        for (int i = 0; i < 1000; ++i) {
            io.restart();
            if (io.poll() == 0) break;
        }
    }
    void jump(std::int64_t ms) {
        manual_clock::advance(std::chrono::milliseconds(ms));
        run_ready();
    }
    std::vector<std::size_t> request_counts() const {
        std::vector<std::size_t> n;
        for (const auto& f : faux) n.push_back(f->requests().size());
        return n;
    }
};

}  // namespace

TEST_CASE("parked sessions sharing a store: the first to wake probes, the others wait for it",
          "[long_wait][session][park_probe][spec-11]") {
    // spreads of 0.1, 0.5 and 0.9 × 60 s: session 0 wakes first (at until + 6 s)
    const std::vector<double> draws = {0.1, 0.5, 0.9};
    const strings parked = {"agent_start", "agent_end", "auto_retry_start",
                            "retry_parked{1700007200000}"};
    SECTION("the probe succeeds: all continue") {
        const std::string script = std::string("[") + quota_error + R"(,{"text":"back"}])";
        fleet f({script, script, script}, draws);
        for (const auto& e : f.events) CHECK(e == parked);
        f.jump(two_hours + 6'000);
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 1, 1});  // one probe
        REQUIRE(f.results[0]);
        CHECK(f.results[0]->outcome == prompt_result::status::succeeded);
        // sessions 1 and 2 wake after the probe's success and continue at once
        f.jump(24'000);
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 2, 1});
        f.jump(24'000);
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 2, 2});
        for (std::size_t i = 0; i < 3; ++i) {
            REQUIRE(f.results[i]);
            CHECK(f.results[i]->outcome == prompt_result::status::succeeded);
            CHECK(f.events[i] == strings{"agent_start", "agent_end", "auto_retry_start",
                                         "retry_parked{1700007200000}", "agent_start",
                                         "auto_retry_end", "agent_end", "agent_settled"});
        }
    }
    SECTION("the others wake while the probe is in flight: they wait for its outcome") {
        // the probe's reply takes 50 s: sessions 1 and 2 wake meanwhile and wait
        const std::string slow =
            std::string("[") + quota_error + R"(,{"text":"back","delayMs":50000}])";
        const std::string script = std::string("[") + quota_error + R"(,{"text":"back"}])";
        fleet f({slow, script, script}, draws);
        f.jump(two_hours + 6'000);
        f.jump(50'000 - 1);  // everyone is awake; only the probe went out
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 1, 1});
        CHECK_FALSE(f.results[1]);
        f.jump(1);  // the probe succeeds; the others see it at their next look (≤ 1 s)
        REQUIRE(f.results[0]);
        f.jump(park_probe_poll_ms);
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 2, 2});
        REQUIRE(f.results[1]);
        REQUIRE(f.results[2]);
        CHECK(f.results[2]->outcome == prompt_result::status::succeeded);
    }
    SECTION("the probe meets the limit again: all stay parked until the new reset") {
        const std::string probe_again =
            std::string("[") + quota_error + "," + quota_error + R"(,{"text":"back"}])";
        const std::string script = std::string("[") + quota_error + R"(,{"text":"back"}])";
        fleet f({probe_again, script, script}, draws);
        f.jump(two_hours + 6'000);
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 1, 1});
        // the prober parks again (attempt 2) until now + 2 h; the others, waking later, follow it
        const std::int64_t until2 = t0 + two_hours + 6'000 + two_hours;
        CHECK(f.events[0].back() == "retry_parked{" + std::to_string(until2) + "}");
        f.jump(60'000);
        CHECK(f.request_counts() == std::vector<std::size_t>{2, 1, 1});  // no request: reparked
        CHECK(f.events[1].back() == "retry_parked{" + std::to_string(until2) + "}");
        CHECK(f.events[2].back() == "retry_parked{" + std::to_string(until2) + "}");
        CHECK(f.sessions[1]->parked_until() == until2);
        CHECK(f.sessions[1]->retry_attempt() == 1);  // no attempt was made
        CHECK(f.sessions[0]->retry_attempt() == 2);
    }
}

TEST_CASE("a resumed park is cancelled like a live one: abort_retry, abort, its slot",
          "[long_wait][session][spec-11]") {
    temp_dir dir;
    fs::path copy = dir.path / "copy";
    fs::create_directories(copy);
    {
        harness a(std::string("[") + quota_error + "]", park_settings(),
                  [&](session_options& o) { o.session_dir = dir.path; });
        a.prompt("hi");
        REQUIRE(a.session->parked_until());
        fs::copy_file(*a.session->history().file(), copy / "parked.jsonl");
    }
    harness b(R"([{"text":"back"}])", park_settings(), [&](session_options& o) {
        o.resume_file = copy / "parked.jsonl";
        o.now_ms = [] { return t0 + 1000; };
    });
    // abort_retry(), abort(), or a terminal cancellation of the awaiting coroutine
    const int how = GENERATE(0, 1, 2);
    const bool user_abort = how != 0;
    std::optional<prompt_result> r;
    asio::cancellation_signal cancel;
    asio::co_spawn(
        b.io, b.session->resume_park(),
        asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e, prompt_result x) {
            if (e) std::rethrow_exception(e);
            r = std::move(x);
        }));
    b.run_ready();
    REQUIRE(b.session->parked_until());
    if (how == 0) b.session->abort_retry();
    if (how == 1) b.session->abort();
    if (how == 2) cancel.emit(asio::cancellation_type::terminal);
    b.run_ready();
    REQUIRE(r);
    CHECK(r->outcome ==
          (user_abort ? prompt_result::status::aborted : prompt_result::status::failed));
    CHECK(r->error == "Retry cancelled");
    CHECK(brief(b.events) == strings{"retry_parked", "auto_retry_end{fail,1}", "agent_settled"});
    CHECK(b.of("auto_retry_end")[0].at("finalError") == "Retry cancelled");
    const strings entries = park_entries(b.session->history());
    REQUIRE(entries.size() == 4);  // the first park, its re-entry, the chain's end, the park's end
    CHECK(entries[2] == "retry_end{fail}");
    CHECK(entries[3] == "retry_park_end{cancelled}");
    CHECK(b.requests().empty());
    CHECK_FALSE(b.session->parked_until());
    CHECK_FALSE(b.session->is_busy());
    CHECK_FALSE(b.session->open_park_in_history());
}

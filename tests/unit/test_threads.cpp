// Sessions on a shared asio::thread_pool, each behind a strand, driven from other threads at
// random moments: prompt() (none / steer / followUp), abort(), abort_retry() and
// set_auto_retry_enabled(). A session is not thread-safe itself; the documented rule is that
// calls are made on its executor, so every call here is posted onto the session's strand.
// Checked: no data race (CI runs this file in a ThreadSanitizer tree: scripts/ci-extra.sh), no
// event off the session's strand, every prompt completes; each busy period (agent_start ..
// agent_settled) is started by one prompt's message and ends with exactly one agent_settled
// before that prompt completes; queued prompts complete after a settle; only prompts without a
// streaming behaviour are refused and their message never runs; every retry chain is closed
// (attempts 1..n, one auto_retry_end) before its agent_settled.
//
// Real threads need real time: the faux provider and the backoff use the steady clock with
// delays of a few milliseconds, and a real-time cap turns a hang into a failure.

#include <coagent/providers/faux_provider.hpp>
#include <coagent/session/agent_session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace coagent;
namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

using strand_t = asio::strand<asio::thread_pool::executor_type>;

/// A random faux script: retryable errors, non-retryable errors, overflow, slow and stalled
/// replies, successes, tool calls.
std::string random_script(std::mt19937_64& rng, int steps) {
    json::array a;
    for (int i = 0; i < steps; ++i) {
        json::object s;
        switch (rng() % 8) {
            case 0:
            case 1:
                s["error"] = "503 Service Unavailable: upstream overloaded";
                s["status"] = 503;
                break;
            case 2:
                s["error"] = "400 invalid request: bad field";
                s["status"] = 400;
                break;
            case 3:
                s["error"] = "You have reached your usage limit for this period";
                break;
            case 4: {
                json::object call;
                call["name"] = "echo";
                call["arguments"] = json::object{{"text", "x"}};
                s["toolCall"] = std::move(call);
                break;
            }
            case 5:
                s["text"] = "slow reply in several words";
                s["stallMs"] = 2;
                break;
            default:
                s["text"] = "reply number " + std::to_string(i);
                break;
        }
        if (rng() % 3 == 0) s["delayMs"] = static_cast<std::int64_t>(rng() % 4);
        if (rng() % 5 == 0) s["times"] = static_cast<std::int64_t>(1 + rng() % 3);
        a.push_back(std::move(s));
    }
    return json::serialize(a);
}

struct probe {
    explicit probe(asio::thread_pool& pool, std::uint64_t seed) : strand(asio::make_strand(pool)) {
        std::mt19937_64 rng(seed);
        faux_options fo;
        fo.script = faux_script::parse(random_script(rng, 400), "<threads>");
        fo.clock = clock_kind::steady;
        fo.stream_idle_timeout_ms = 50;
        faux = std::make_shared<faux_provider>(std::move(fo));
        session_options so;
        so.executor = strand;
        so.model_provider = faux;
        so.config.retry.base_delay_ms = 1 + static_cast<std::int64_t>(seed % 2);
        so.config.retry.max_retries = static_cast<int>(seed % 4);
        so.config.compaction.enabled = false;
        so.clock = clock_kind::steady;
        session = std::make_unique<agent_session>(std::move(so));
        session->register_tool(tool_definition{"echo", "echoes", {}},
                               [](json::object args) -> asio::awaitable<tool_output> {
                                   co_return tool_output{json::serialize(args), false};
                               });
        sub = session->subscribe([this](const event& e) { on_event(e); });
    }

    // ---- everything below runs on the strand ----
    void on_event(const event& e) {
        if (!strand.running_in_this_thread())
            fail(std::string(event_type(e)) + " emitted off the session's strand");
        if (std::holds_alternative<agent_start_event>(e) && !in_period) {
            in_period = true;
            period_has_primary = false;
            ++periods;
        }
        if (const auto* m = std::get_if<message_end_event>(&e);
            m && m->message->role == message_role::user) {
            const std::string text = text_of(*m->message);
            if (!ran.insert(text).second) fail("message " + text + " ran twice");
            if (in_period && !period_has_primary) {
                period_has_primary = true;
                primary_settled_before[text] = settled;
            }
        }
        if (const auto* s = std::get_if<auto_retry_start_event>(&e)) {
            if (!chain_open && s->attempt != 1)
                fail("a chain started at attempt " + std::to_string(s->attempt));
            if (chain_open && s->attempt != last_attempt + 1)
                fail("attempt " + std::to_string(s->attempt) + " after " +
                     std::to_string(last_attempt));
            chain_open = true;
            last_attempt = s->attempt;
            if (!session->is_retrying()) fail("auto_retry_start while is_retrying() is false");
        } else if (const auto* x = std::get_if<auto_retry_end_event>(&e)) {
            if (chain_open && x->attempt != last_attempt)
                fail("auto_retry_end attempt " + std::to_string(x->attempt) + " after start " +
                     std::to_string(last_attempt));
            if (!chain_open && (x->attempt != 0 || x->success))
                fail("auto_retry_end without a chain");
            chain_open = false;
            last_attempt = 0;
        } else if (std::holds_alternative<agent_settled_event>(e)) {
            ++settled;
            if (!in_period || !period_has_primary)
                fail("agent_settled without a busy period started by a prompt");
            in_period = false;
            if (chain_open) fail("agent_settled with a retry chain still open");
            if (session->is_retrying() || session->retry_attempt() != 0)
                fail("agent_settled while is_retrying()");
            if (session->is_busy()) fail("agent_settled while busy");
        }
    }

    void fail(std::string what) {
        std::lock_guard lock(violations_mutex);
        violations.push_back(std::move(what));
    }

    strand_t strand;
    std::shared_ptr<faux_provider> faux;
    std::unique_ptr<agent_session> session;
    subscription sub;
    int settled = 0;  // agent_settled events
    int periods = 0;  // busy periods (first agent_start after a settle)
    bool in_period = false;
    bool period_has_primary = false;
    std::set<std::string> ran;  // user messages that ran
    std::map<std::string, int>
        primary_settled_before;  // prompt that started a period → settles before it
    bool chain_open = false;
    int last_attempt = 0;

    std::atomic<int> started{0};
    std::atomic<int> completed{0};
    std::atomic<int> refused{0};
    std::mutex violations_mutex;
    std::vector<std::string> violations;
};

/// One prompt, sent on the strand; checked on the strand when it completes.
asio::awaitable<void> run_prompt(probe* p, std::string text, streaming_behavior b) {
    const int settled_at_call = p->settled;
    prompt_result r = co_await p->session->prompt(text, b);
    if (!p->strand.running_in_this_thread()) p->fail("prompt() completed off the session's strand");
    const bool ran = p->ran.count(text) > 0;
    if (r.outcome == prompt_result::status::refused) {
        ++p->refused;
        if (b != streaming_behavior::none) p->fail("refused although it could queue: " + r.error);
        if (ran) p->fail("a refused prompt's message ran: " + text);
    } else if (auto it = p->primary_settled_before.find(text);
               it != p->primary_settled_before.end()) {
        // it started a busy period: that period settled (exactly once) before it completed
        if (p->settled < it->second + 1)
            p->fail("a prompt completed before its busy period settled");
    } else {
        // a plain prompt that neither was refused nor started a period joined a backoff
        // (issue 26): its message is in the conversation
        if (b == streaming_behavior::none && !ran)
            p->fail("a prompt joined a backoff but its message never appeared: " + text);
        if (p->settled < settled_at_call + 1)
            p->fail("a queued prompt completed before any agent_settled");
    }
    ++p->completed;
}

}  // namespace

TEST_CASE("threads: sessions on a thread pool behind strands, poked from other threads",
          "[threads]") {
    constexpr int sessions = 8;
    constexpr int drivers = 3;
    constexpr int actions_per_driver = 1000;

    asio::thread_pool pool(4);
    std::vector<std::unique_ptr<probe>> probes;
    for (int i = 0; i < sessions; ++i)
        probes.push_back(std::make_unique<probe>(pool, 1000 + static_cast<std::uint64_t>(i)));

    std::atomic<int> failures{0};
    auto on_done = [&failures](std::exception_ptr e) {
        if (e) ++failures;
    };

    std::vector<std::thread> threads;
    for (int d = 0; d < drivers; ++d) {
        threads.emplace_back([&, d] {
            std::mt19937_64 rng(77 + static_cast<std::uint64_t>(d));
            for (int i = 0; i < actions_per_driver; ++i) {
                probe* p = probes[rng() % sessions].get();
                switch (rng() % 10) {
                    case 0:
                    case 1:
                    case 2:
                    case 3: {
                        static constexpr streaming_behavior behaviors[] = {
                            streaming_behavior::none, streaming_behavior::steer,
                            streaming_behavior::follow_up};
                        const auto b = behaviors[rng() % 3];
                        const int n = p->started++;
                        asio::co_spawn(
                            p->strand,
                            run_prompt(p, "prompt " + std::to_string(d) + "." + std::to_string(n),
                                       b),
                            on_done);
                        break;
                    }
                    case 4:
                    case 5:
                        asio::post(p->strand, [p] { p->session->abort(); });
                        break;
                    case 6:
                    case 7:
                        asio::post(p->strand, [p] { p->session->abort_retry(); });
                        break;
                    case 8:
                        asio::post(p->strand, [p, on = rng() % 4 != 0] {
                            p->session->set_auto_retry_enabled(on);
                        });
                        break;
                    default:
                        break;  // just wait
                }
                std::this_thread::sleep_for(std::chrono::microseconds(rng() % 700));
            }
        });
    }
    for (auto& t : threads) t.join();

    // every prompt completes (real-time cap: a hang fails instead of stalling CI)
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    auto all_done = [&] {
        for (auto& p : probes)
            if (p->completed.load() != p->started.load()) return false;
        return true;
    };
    while (!all_done() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(5ms);
    REQUIRE(all_done());

    // read the strand-only counters on their strands
    int total_started = 0, total_refused = 0, total_settled = 0;
    for (auto& p : probes) {
        struct snapshot {
            int settled, periods, primaries;
            bool chain_open, busy, retrying;
        };
        std::promise<snapshot> read;
        asio::post(p->strand, [&] {
            read.set_value({p->settled, p->periods,
                            static_cast<int>(p->primary_settled_before.size()), p->chain_open,
                            p->session->is_busy(), p->session->is_retrying()});
        });
        const snapshot s = read.get_future().get();
        CHECK(s.settled == s.periods);    // one agent_settled per busy period
        CHECK(s.primaries == s.periods);  // each started by one prompt
        CHECK_FALSE(s.chain_open);
        CHECK_FALSE(s.busy);
        CHECK_FALSE(s.retrying);
        std::lock_guard lock(p->violations_mutex);
        for (const auto& v : p->violations) FAIL_CHECK(v);
        total_started += p->started;
        total_refused += p->refused;
        total_settled += s.settled;
    }
    CHECK(failures.load() == 0);
    pool.join();
    probes.clear();
    WARN("threads: " << total_started << " prompts (" << total_refused << " refused), "
                     << total_settled << " agent_settled over " << sessions
                     << " sessions on 4 threads");
}

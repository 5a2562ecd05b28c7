// Model fallback on the usage-limit path (retry.fallbackChains, docs/settings.md) and runtime model
// switching (set_model): the plain rules of model_fallback, then the session performing them
// on a manual clock with exact event sequences and the requests each model received.

#include "support/session_harness.hpp"

#include <coagent/retry/model_fallback.hpp>
#include <coagent/session/auth_storage.hpp>
#include <coagent/session/limit_store.hpp>
#include <coagent/session/settings_store.hpp>

#include <catch2/catch.hpp>

#include <fstream>

using namespace coagent;
using namespace coagent::test;
using strings = std::vector<std::string>;

namespace {

constexpr std::int64_t t0 = 1'700'000'000'000;
constexpr const char* usage_error =
    R"({"error":"429 You have reached your usage limit for this period","status":429})";

retry_settings with_chains(fallback_chains chains) {
    retry_settings s;
    s.fallback = std::make_shared<const fallback_chains>(std::move(chains));
    return s;
}

const auto all_usable = [](std::string_view) { return true; };

// A faux provider that answers as another provider/model.
class named_provider final : public provider {
  public:
    named_provider(std::string prov, std::string id, const std::string& script) {
        faux_options fo;
        fo.script = faux_script::parse(script, "<test>");
        fo.clock = clock_kind::manual;
        inner_ = std::make_shared<faux_provider>(std::move(fo));
        model_ = inner_->model();
        model_.provider = std::move(prov);
        model_.id = std::move(id);
    }
    model_info model() const override { return model_; }
    boost::asio::awaitable<void> stream(const provider_request& req, message& out,
                                        stream_observer& obs, abort_signal& abort) override {
        return inner_->stream(req, out, obs, abort);
    }
    std::vector<faux_request> requests() const { return inner_->requests(); }

  private:
    std::shared_ptr<faux_provider> inner_;
    model_info model_;
};

class test_catalog final : public model_catalog {
  public:
    void add(std::shared_ptr<named_provider> p) { providers_.push_back(std::move(p)); }
    std::shared_ptr<provider> resolve(std::string_view prov, std::string_view id,
                                      std::string& error) override {
        ++resolves;
        for (const auto& p : providers_)
            if (p->model().provider == prov && p->model().id == id) return p;
        error = "Model not found: " + std::string(prov) + "/" + std::string(id);
        return nullptr;
    }
    std::vector<model_info> available() override {
        std::vector<model_info> out;
        for (const auto& p : providers_) out.push_back(p->model());
        return out;
    }
    int resolves = 0;

  private:
    std::vector<std::shared_ptr<named_provider>> providers_;
};

// A session on model a/m1 with the fallbacks b/m2 and c/m3 in a catalog; wall time `now`.
struct fallback_fixture {
    std::shared_ptr<named_provider> a, b, c;
    std::shared_ptr<test_catalog> catalog = std::make_shared<test_catalog>();
    std::int64_t now = t0;
    std::unique_ptr<harness> h;

    fallback_fixture(const std::string& a_script, const std::string& b_script,
                     const std::string& c_script, settings cfg,
                     std::function<void(session_options&)> tweak = {}) {
        a = std::make_shared<named_provider>("a", "m1", a_script);
        b = std::make_shared<named_provider>("b", "m2", b_script);
        c = std::make_shared<named_provider>("c", "m3", c_script);
        for (const auto& p : {a, b, c}) catalog->add(p);
        h = std::make_unique<harness>("[]", cfg, [&](session_options& o) {
            o.model_provider = a;
            o.models = catalog;
            o.now_ms = [this] { return now; };
            if (tweak) tweak(o);
        });
    }
};

settings chain_settings(fallback_chains chains) {
    settings s;
    s.retry.fallback = std::make_shared<const fallback_chains>(std::move(chains));
    return s;
}

std::vector<std::string> user_texts(const std::vector<faux_request>& reqs) {
    std::vector<std::string> out;
    for (const auto& r : reqs) out.push_back(std::to_string(r.messages.size()));
    return out;
}

}  // namespace

// ---- the plain rules ----------------------------------------------------------------------

TEST_CASE("model_fallback: the next usable entry of the chain that lists the current model",
          "[fallback]") {
    model_fallback f;
    const auto s = with_chains({{"fast", {"x/1", "y/2"}}, {"smart", {"a/m1", "b/m2", "c/m3"}}});
    auto sw = f.on_usage_limit("a/m1", std::nullopt, t0, s, all_usable);
    REQUIRE(sw);
    CHECK(sw->from == "a/m1");
    CHECK(sw->to == "b/m2");
    CHECK(sw->role == "smart");
    CHECK(f.active());
    CHECK(f.primary() == "a/m1");
    CHECK(f.suppressed_until("a/m1") ==
          t0 + model_fallback::default_cooldown_ms);  // 60 s without a hint

    // the fallback hits the limit too: the next one, the primary stays the primary
    sw = f.on_usage_limit("b/m2", 5000, t0 + 10, s, all_usable);
    REQUIRE(sw);
    CHECK(sw->to == "c/m3");
    CHECK(f.primary() == "a/m1");
    CHECK(f.suppressed_until("b/m2") == t0 + 10 + 5000);  // the hint

    // all put aside: nothing left
    CHECK_FALSE(f.on_usage_limit("c/m3", std::nullopt, t0 + 20, s, all_usable));
}

TEST_CASE(
    "model_fallback: the default role covers a model no chain lists, unusable entries are skipped",
    "[fallback]") {
    model_fallback f;
    const auto s = with_chains({{"other", {"x/1"}}, {"default", {"b/m2", "c/m3"}}});
    auto sw =
        f.on_usage_limit("a/m1", 1000, t0, s, [](std::string_view sel) { return sel != "b/m2"; });
    REQUIRE(sw);
    CHECK(sw->to == "c/m3");
    CHECK(sw->role == "default");

    model_fallback none;
    CHECK_FALSE(
        none.on_usage_limit("a/m1", 1000, t0, with_chains({{"other", {"x/1"}}}), all_usable));
    CHECK_FALSE(none.active());
    CHECK_FALSE(
        none.on_usage_limit("a/m1", 1000, t0, retry_settings{}, all_usable));  // no chains: off
}

TEST_CASE("model_fallback: the primary comes back after its cooldown", "[fallback]") {
    model_fallback f;
    auto s = with_chains({{"default", {"b/m2"}}});
    REQUIRE(f.on_usage_limit("a/m1", 30'000, t0, s, all_usable));

    CHECK_FALSE(f.primary_to_restore(t0 + 29'999, s));
    s.fallback_revert = fallback_revert_policy::never;
    CHECK_FALSE(f.primary_to_restore(t0 + 30'000, s));
    s.fallback_revert = fallback_revert_policy::cooldown_expiry;
    CHECK(f.primary_to_restore(t0 + 30'000, s) == std::optional<std::string>("a/m1"));
    CHECK_FALSE(f.active());
    CHECK_FALSE(f.primary_to_restore(t0 + 30'000, s));
}

TEST_CASE("model_fallback: a huge hint saturates instead of overflowing", "[fallback]") {
    model_fallback f;
    REQUIRE(f.on_usage_limit("a/m1", std::numeric_limits<std::int64_t>::max(), t0,
                             with_chains({{"default", {"b/m2"}}}), all_usable));
    CHECK(f.suppressed_until("a/m1") == std::numeric_limits<std::int64_t>::max());
}

// ---- the session --------------------------------------------------------------------------

TEST_CASE("usage limit with one credential and a fallback chain: switch at once, report success",
          "[fallback][session][usage-limit]") {
    auto auth = std::make_shared<in_memory_auth_storage>([] { return t0; });
    auth->add_credential("a", "only-key");
    fallback_fixture f(std::string("[") + usage_error + "]", R"([{"text":"from b"}])", "[]",
                       chain_settings({{"default", {"b/m2", "c/m3"}}}),
                       [&](session_options& o) { o.auth = auth; });
    auto& h = *f.h;
    (void)auth->api_key("a",
                        h.session->session_id());  // as an HTTP provider would before its request
    h.prompt("hi");
    REQUIRE(h.done());  // no virtual time: the switch makes the wait 0
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(brief(h.events) ==
          strings{"agent_start", "turn_start", "message_start:user", "message_end:user",
                  "message_start:assistant", "message_end:assistant:error", "turn_end",
                  "agent_end{retry}", "retry_fallback_applied", "auto_retry_start{1}",
                  "agent_start", "turn_start", "message_start:assistant",
                  "message_end:assistant:stop", "retry_fallback_succeeded", "auto_retry_end{ok,1}",
                  "turn_end", "agent_end{final}", "agent_settled"});
    CHECK(h.of("retry_fallback_applied")[0] ==
          obj(R"({"type":"retry_fallback_applied","from":"a/m1","to":"b/m2","role":"default"})"));
    CHECK(h.of("auto_retry_start")[0].at("delayMs").as_int64() == 0);
    CHECK(h.of("retry_fallback_succeeded")[0] ==
          obj(R"({"type":"retry_fallback_succeeded","model":"b/m2","role":"default"})"));
    // one request each; b's request does not carry a's error
    REQUIRE(f.a->requests().size() == 1);
    REQUIRE(f.b->requests().size() == 1);
    CHECK(user_texts(f.b->requests()) == strings{"1"});
    CHECK(f.c->requests().empty());
    CHECK(h.session->model().provider == "b");
    // the credential was asked first (blocked for 60 s), then the model put aside
    CHECK(auth->blocked_until("a", 0) == t0 + 60'000);
    CHECK(h.session->fallback()->suppressed_until("a/m1") == t0 + 60'000);
    // the history keeps the error and records the temporary switch
    bool temporary_change = false;
    for (const auto& e : h.session->history().entries())
        if (e.type == "model_change")
            temporary_change = e.raw.at("provider") == "b" && e.raw.at("modelId") == "m2" &&
                               e.raw.at("temporary") == true;
    CHECK(temporary_change);
}

TEST_CASE("a credential switch wins over the model fallback", "[fallback][session][usage-limit]") {
    auto auth = std::make_shared<in_memory_auth_storage>([] { return t0; });
    auth->add_credential("a", "key-1");
    auth->add_credential("a", "key-2");
    fallback_fixture f(std::string("[") + usage_error + R"(,{"text":"again a"}])",
                       R"([{"text":"from b"}])", "[]", chain_settings({{"default", {"b/m2"}}}),
                       [&](session_options& o) { o.auth = auth; });
    (void)auth->api_key("a", f.h->session->session_id());
    f.h->prompt("hi");
    REQUIRE(f.h->done());
    CHECK(f.h->of("retry_fallback_applied").empty());
    CHECK(f.h->of("retry_fallback_succeeded").empty());
    CHECK(f.a->requests().size() == 2);
    CHECK(f.b->requests().empty());
    CHECK(f.h->session->fallback() == nullptr);
}

TEST_CASE("without a usable fallback the usage limit keeps the spec's backoff",
          "[fallback][session][usage-limit]") {
    // the chain names a model the catalog does not know
    fallback_fixture f(std::string("[") + usage_error + R"(,{"text":"a again"}])", "[]", "[]",
                       chain_settings({{"default", {"z/unknown"}}}));
    auto& h = *f.h;
    h.prompt("hi");
    CHECK(h.of("retry_fallback_applied").empty());
    CHECK(h.of("auto_retry_start")[0].at("delayMs").as_int64() == 2000);
    h.advance(2000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(f.a->requests().size() == 2);
    CHECK(h.of("retry_fallback_succeeded").empty());
}

TEST_CASE("the fallback that also hits its limit moves down the chain, exhausted chains back off",
          "[fallback][session][usage-limit]") {
    settings cfg = chain_settings({{"default", {"b/m2", "c/m3"}}});
    cfg.retry.max_retries = 3;
    fallback_fixture f(std::string("[") + usage_error + "]", std::string("[") + usage_error + "]",
                       std::string("[") + usage_error + R"(,{"text":"c at last"}])", cfg);
    auto& h = *f.h;
    h.prompt("hi");
    // a → b (0 ms), b → c (0 ms), c: nothing left → the backoff of attempt 3 (8000 ms)
    const auto applied = h.of("retry_fallback_applied");
    REQUIRE(applied.size() == 2);
    CHECK(applied[0].at("to") == "b/m2");
    CHECK(applied[1].at("from") == "b/m2");
    CHECK(applied[1].at("to") == "c/m3");
    const auto starts = h.of("auto_retry_start");
    REQUIRE(starts.size() == 3);
    CHECK(starts[0].at("delayMs").as_int64() == 0);
    CHECK(starts[1].at("delayMs").as_int64() == 0);
    CHECK(starts[2].at("delayMs").as_int64() == 8000);
    CHECK_FALSE(h.done());
    h.advance(8000ms);
    REQUIRE(h.done());
    CHECK(h.result->outcome == prompt_result::status::succeeded);
    CHECK(h.of("retry_fallback_succeeded")[0].at("model") == "c/m3");
    CHECK(h.of("auto_retry_end")[0] ==
          obj(R"({"type":"auto_retry_end","success":true,"attempt":3})"));
}

TEST_CASE("the primary comes back once its cooldown expired, unless the revert policy is never",
          "[fallback][session]") {
    const bool never = GENERATE(false, true);
    settings cfg = chain_settings({{"default", {"b/m2"}}});
    if (never) cfg.retry.fallback_revert = fallback_revert_policy::never;
    fallback_fixture f(std::string("[") + usage_error + R"(,{"text":"a is back"}])",
                       R"([{"text":"b 1"},{"text":"b 2"},{"text":"b 3"}])", "[]", cfg);
    auto& h = *f.h;
    h.prompt("one");
    REQUIRE(h.done());
    CHECK(h.session->model().provider == "b");

    h.result.reset();
    f.now = t0 + 59'999;  // still cooling down
    h.prompt("two");
    REQUIRE(h.done());
    CHECK(f.b->requests().size() == 2);

    h.result.reset();
    f.now = t0 + 60'000;
    h.prompt("three");
    REQUIRE(h.done());
    if (never) {
        CHECK(f.b->requests().size() == 3);
        CHECK(h.session->model().provider == "b");
    } else {
        CHECK(f.a->requests().size() == 2);
        CHECK(text_of(*h.result->last_assistant) == "a is back");
        CHECK(h.session->model().provider == "a");
        CHECK_FALSE(h.session->fallback()->active());
    }
}

TEST_CASE("set_model switches the next request, unknown models are refused",
          "[fallback][session][set-model]") {
    fallback_fixture f(R"([{"text":"a"}])", R"([{"text":"b"}])", "[]", settings{});
    auto& h = *f.h;
    CHECK(h.session->set_model("b", "m2").empty());
    CHECK(h.session->model().id == "m2");
    CHECK(h.session->set_model("nope", "x") == "Model not found: nope/x");
    CHECK(h.session->model().id == "m2");  // unchanged
    h.prompt("hi");
    REQUIRE(h.done());
    CHECK(text_of(*h.result->last_assistant) == "b");
    CHECK(h.result->last_assistant->provider == "b");
    CHECK(f.a->requests().empty());
    int changes = 0;
    for (const auto& e : h.session->history().entries())
        if (e.type == "model_change") {
            ++changes;
            CHECK(e.raw.at("provider") == "b");
            CHECK_FALSE(e.raw.contains("temporary"));
        }
    CHECK(changes == 1);

    harness plain(R"([{"text":"x"}])");
    CHECK(plain.session->set_model("b", "m2") ==
          "Model not found: b/m2 (this session has no model catalog)");
}

// ---- settings -----------------------------------------------------------------------------

TEST_CASE("retry.fallbackChains and retry.fallbackRevertPolicy in settings files",
          "[fallback][settings]") {
    const auto dir =
        std::filesystem::temp_directory_path() / ("coagent-fallback-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir / "p");
    const auto global = dir / "settings.json";
    const auto project = dir / "p" / "settings.json";
    const auto write = [](const std::filesystem::path& p, std::string_view text) {
        std::ofstream(p) << text;
    };

    write(
        global,
        R"({"retry":{"fallbackChains":{"default":["b/m2","c/m3"],"fast":["x/1"]},"fallbackRevertPolicy":"never"}})");
    write(project, R"({"retry":{"fallbackChains":{"fast":["y/2"]}}})");
    auto store = settings_store::load(global, project);
    REQUIRE(store.current().retry.fallback);
    CHECK(
        *store.current().retry.fallback ==
        fallback_chains{{"default", {"b/m2", "c/m3"}}, {"fast", {"y/2"}}});  // merged role by role
    CHECK(store.current().retry.fallback_revert == fallback_revert_policy::never);
    CHECK(setting_value(store.current(), "retry.fallbackChains") ==
          json::parse(R"({"default":["b/m2","c/m3"],"fast":["y/2"]})"));
    CHECK(store.warnings().empty());

    const std::vector<std::pair<std::string, std::string>> bad = {
        {R"({"retry":{"fallbackChains":["b/m2"]}})",
         R"(key "retry.fallbackChains": expected an object of role -> array of "provider/model" strings)"},
        {R"({"retry":{"fallbackChains":{"default":"b/m2"}}})",
         R"(key "retry.fallbackChains.default": expected an array of "provider/model" strings, found "b/m2")"},
        {R"({"retry":{"fallbackChains":{"default":["b/m2","m3"]}}})",
         R"(key "retry.fallbackChains.default": expected a "provider/model" string, found "m3")"},
        {R"({"retry":{"fallbackChains":{"default":["b/"]}}})",
         R"(key "retry.fallbackChains.default": expected a "provider/model" string, found "b/")"},
        {R"({"retry":{"fallbackChains":{"default":[3]}}})",
         R"(key "retry.fallbackChains.default": expected a "provider/model" string, found 3)"},
        {R"({"retry":{"fallbackRevertPolicy":"sometimes"}})",
         R"(key "retry.fallbackRevertPolicy": expected one of "cooldown-expiry" or "never", found "sometimes")"},
    };
    for (const auto& [text, message] : bad) {
        INFO(text);
        write(global, text);
        try {
            (void)settings_store::load(global, project);
            FAIL("accepted");
        } catch (const settings_error& e) {
            CHECK_THAT(e.what(), Catch::Contains(global.string() + ": " + message));
        }
    }
    std::filesystem::remove_all(dir);
}

// ---- limit state shared across sessions and processes (issue 19, docs/limits.md) -----------

TEST_CASE("choose_credential §11.29: the credential available earliest, the first of those",
          "[limits][usage-limit]") {
    using cs = credential_state;
    const std::int64_t now = t0;
    CHECK(choose_credential(std::vector<cs>{{0}, {0}, {0}}, now) == 0);
    CHECK(choose_credential(std::vector<cs>{{now + 1}, {0}, {0}}, now) == 1);
    CHECK(choose_credential(std::vector<cs>{{now}, {0}}, now) == 0);  // an end at now is free
    // all blocked: the one free soonest; a tie: the first of those
    CHECK(choose_credential(std::vector<cs>{{now + 30}, {now + 10}, {now + 20}}, now) == 1);
    CHECK(choose_credential(std::vector<cs>{{now + 30}, {now + 10}, {now + 10}}, now) == 1);
    CHECK(choose_credential(std::vector<cs>{{now + 5}}, now) == 0);
}

TEST_CASE("usage_block_until: 60 s without a hint, clamped to 7 days, saturating",
          "[limits][usage-limit]") {
    CHECK(usage_block_until(std::nullopt, t0) == t0 + 60'000);
    CHECK(usage_block_until(30'000, t0) == t0 + 30'000);
    CHECK(usage_block_until(-5, t0) == t0);
    CHECK(usage_block_until(std::int64_t{99'999'999'999'000}, t0) == t0 + max_usage_block_ms);
    CHECK(usage_block_until(max_usage_block_ms, INT64_MAX - 10) == INT64_MAX);
    CHECK(clamp_block(t0 + 10 * max_usage_block_ms, t0) == t0 + max_usage_block_ms);
    CHECK(clamp_block(t0 + 5, t0) == t0 + 5);
}

TEST_CASE("credential_fingerprint: the hex SHA-256 of the key, never the key", "[limits]") {
    CHECK(credential_fingerprint("abc") ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    CHECK(credential_fingerprint("sk-A").size() == 64);
    CHECK(credential_fingerprint("sk-A") != credential_fingerprint("sk-B"));
}

TEST_CASE("local_limit_store: blocks and cooldowns keep the later end, expire, cleared by provider",
          "[limits]") {
    local_limit_store st;
    st.block_credential("a", "fa", t0 + 100, t0);
    st.block_credential("a", "fa", t0 + 50, t0);  // an earlier end does not shorten it
    st.block_credential("b", "fb", t0 + 200, t0);
    st.block_credential("a", "gone", t0, t0);  // already over: not kept
    CHECK(st.credential_blocked_until("a", "fa") == t0 + 100);
    CHECK(st.credential_blocked_until("a", "fb") == 0);
    CHECK(st.credential_blocked_until("a", "gone") == 0);
    st.cool_down_model("a/m1", t0 + 300, t0);
    st.cool_down_model("ab/m1", t0 + 300, t0);
    CHECK(st.model_cooldown_until("a/m1") == t0 + 300);
    CHECK(st.credential_blocks(t0).size() == 2);
    CHECK(st.credential_blocks(t0 + 100).size() == 1);  // fa's end has come
    CHECK(st.model_cooldowns(t0 + 299).size() == 2);
    st.clear("a");  // a's credentials and a's models only ("ab/m1" is provider ab's)
    CHECK(st.credential_blocked_until("a", "fa") == 0);
    CHECK(st.credential_blocked_until("b", "fb") == t0 + 200);
    CHECK(st.model_cooldown_until("a/m1") == 0);
    CHECK(st.model_cooldown_until("ab/m1") == t0 + 300);
    st.clear(std::nullopt);
    CHECK(st.credential_blocks(t0).empty());
    CHECK(st.model_cooldowns(t0).empty());
}

TEST_CASE(
    "shared credential blocks §11.29: a block set in one process moves the other's sessions "
    "off it at their next request",
    "[limits][usage-limit]") {
    std::int64_t now = t0;
    const auto clock = [&] { return now; };
    auto store = std::make_shared<local_limit_store>();  // what two processes share
    const bool shared = GENERATE(true, false);
    auto p1 = std::make_shared<in_memory_auth_storage>(clock);
    auto p2 = std::make_shared<in_memory_auth_storage>(clock);
    for (const auto& p : {p1, p2}) {
        for (const char* k : {"key-A", "key-B", "key-C"}) p->add_credential("a", k);
        if (shared) p->share_limits(store);
    }
    // before the block: A has a session in each process (with the pool, §11.31, B and C
    // have one each in process 1 first)
    CHECK(p1->api_key("a", "s1") == "key-A");
    CHECK(p1->api_key("a", "x1") == (shared ? "key-B" : "key-A"));
    CHECK(p1->api_key("a", "x2") == (shared ? "key-C" : "key-A"));
    CHECK(p2->api_key("a", "old") == "key-A");
    CHECK(p1->mark_usage_limit_reached("a", "s1", 30'000));  // retry-after: 30
    CHECK(p1->api_key("a", "s1") == "key-B");
    if (!shared) {
        // without a shared store process 2 knows nothing of it (today's behaviour)
        CHECK(p2->api_key("a", "old") == "key-A");
        CHECK(p2->api_key("a", "new") == "key-A");
        CHECK(store->credential_blocks(now).empty());
        return;
    }
    // the store holds the fingerprint, never the key
    const auto blocks = store->credential_blocks(now);
    REQUIRE(blocks.size() == 1);
    CHECK(blocks[0].provider == "a");
    CHECK(blocks[0].fingerprint == credential_fingerprint("key-A"));
    CHECK(blocks[0].until_ms == t0 + 30'000);
    // process 2: the session on A moves at its next request (to C: B has two sessions, C one),
    // a new session never takes A (B and C have two each: B)
    CHECK(p2->api_key("a", "old") == "key-C");
    CHECK(p2->api_key("a", "new") == "key-B");
    // a block process 1 did not set itself moves its session too: B blocked → C
    CHECK(p2->mark_usage_limit_reached("a", "new", 10'000));
    CHECK(p2->api_key("a", "new") == "key-C");
    CHECK(p1->api_key("a", "s1") == "key-C");  // process 1 learns of B's block
    // every credential blocked: a usage limit moves the session to the one free soonest (B, at
    // +10 s) and is no switch; a session on a blocked credential keeps it when none is free
    CHECK_FALSE(p1->mark_usage_limit_reached("a", "s1", 20'000));
    CHECK(p1->api_key("a", "s1") == "key-B");
    CHECK(p2->api_key("a", "old") == "key-C");
    // after the blocks, a new session takes A again (no session on it any more)
    now = t0 + 30'000;
    CHECK(p2->api_key("a", "later") == "key-A");
}

TEST_CASE(
    "shared model cooldowns §11.30: a model put aside by one session is put aside for "
    "another session of the store",
    "[limits][fallback][session][usage-limit]") {
    const bool shared = GENERATE(true, false);
    auto store = std::make_shared<local_limit_store>();
    const settings cfg = chain_settings({{"default", {"a/m1", "b/m2"}}});
    // session 1 on a/m1 meets a usage limit: a/m1 is put aside for 60 s, it falls back to b/m2
    fallback_fixture one(std::string("[") + usage_error + "]", R"([{"text":"b for one"}])", "[]",
                         cfg, [&](session_options& o) {
                             if (shared) o.limits = store;
                         });
    one.h->prompt("hi");
    REQUIRE(one.h->done());
    CHECK(one.h->session->model().provider == "b");
    CHECK(store->model_cooldown_until("a/m1") == (shared ? t0 + 60'000 : 0));
    // session 2 on c/m3 meets a usage limit: its chain's first entry is a/m1
    fallback_fixture two(R"([{"text":"a for two"}])", R"([{"text":"b for two"}])",
                         std::string("[") + usage_error + "]", cfg, [&](session_options& o) {
                             if (shared) o.limits = store;
                         });
    REQUIRE(two.h->session->set_model("c", "m3").empty());
    two.now = t0 + 1'000;
    two.h->prompt("hi");
    REQUIRE(two.h->done());
    const auto applied = two.h->of("retry_fallback_applied");
    REQUIRE(applied.size() == 1);
    CHECK(
        applied[0] ==
        obj(shared
                ? R"({"type":"retry_fallback_applied","from":"c/m3","to":"b/m2","role":"default"})"
                : R"({"type":"retry_fallback_applied","from":"c/m3","to":"a/m1","role":"default"})"));
    CHECK(two.a->requests().size() == (shared ? 0u : 1u));
    CHECK(two.b->requests().size() == (shared ? 1u : 0u));
    CHECK(two.h->result->outcome == prompt_result::status::succeeded);
    // and c/m3's cooldown is the store's too, dated by session 2's clock
    CHECK(store->model_cooldown_until("c/m3") == (shared ? t0 + 61'000 : 0));
}

TEST_CASE("choose_credential §11.31: of the credentials available earliest, the fewest sessions",
          "[limits][usage-limit][pool]") {
    using cs = credential_state;
    const std::int64_t now = t0;
    CHECK(choose_credential(std::vector<cs>{{0, 2}, {0, 1}, {0, 1}}, now) == 1);
    CHECK(choose_credential(std::vector<cs>{{0, 1}, {0, 1}, {0, 1}}, now) == 0);
    CHECK(choose_credential(std::vector<cs>{{0, 3}, {now + 1, 0}, {0, 5}}, now) ==
          0);                                                                         // free first
    CHECK(choose_credential(std::vector<cs>{{now + 9, 0}, {now + 5, 7}}, now) == 1);  // earliest
    CHECK(choose_credential(std::vector<cs>{{now + 5, 2}, {now + 5, 1}}, now) == 1);
}

TEST_CASE(
    "credential pool §11.31: a new session takes the free credential with the fewest "
    "sessions, a session keeps its own, an ended session leaves the pool",
    "[limits][usage-limit][pool]") {
    std::int64_t now = t0;
    const auto clock = [&] { return now; };
    auto store = std::make_shared<local_limit_store>();
    const bool shared = GENERATE(true, false);
    auto p1 = std::make_shared<in_memory_auth_storage>(clock);
    auto p2 = std::make_shared<in_memory_auth_storage>(clock);
    for (const auto& p : {p1, p2}) {
        for (const char* k : {"key-A", "key-B", "key-C"}) p->add_credential("a", k);
        if (shared) p->share_limits(store);
    }
    // process 1 starts on A, meets a usage limit, switches to B and stays
    CHECK(p1->api_key("a", "s1") == "key-A");
    CHECK(p1->mark_usage_limit_reached("a", "s1", 30'000));
    CHECK(p1->api_key("a", "s1") == "key-B");
    if (!shared) {
        CHECK(p2->api_key("a", "s2") == "key-A");  // no pool, no shared block: today's choice
        return;
    }
    const auto fa = credential_fingerprint("key-A");
    const auto fb = credential_fingerprint("key-B");
    const auto fc = credential_fingerprint("key-C");
    CHECK(store->credential_sessions("a", fa) == 0);
    CHECK(store->credential_sessions("a", fb) == 1);
    // process 2: A is blocked, B has a session, C none → C
    CHECK(p2->api_key("a", "s2") == "key-C");
    // then B and C have one each: the first of them
    CHECK(p2->api_key("a", "s3") == "key-B");
    CHECK(store->credential_sessions("a", fb) == 2);
    // a session keeps its credential though another now has fewer sessions
    p1->end_session("s1");
    CHECK(store->credential_sessions("a", fb) == 1);
    CHECK(p2->api_key("a", "s2") == "key-C");
    CHECK(p2->api_key("a", "s3") == "key-B");
    // the block over: A has no session → A; then every credential has one → the first
    now = t0 + 30'000;
    CHECK(p1->api_key("a", "s4") == "key-A");
    CHECK(p1->api_key("a", "s5") == "key-A");
    const auto leases = store->credential_leases();
    REQUIRE(leases.size() == 3);
    CHECK(leases[0].provider == "a");
    std::int64_t total = 0;
    for (const auto& l : leases) total += l.sessions;
    CHECK(total == 4);
    // a usage-limit switch takes the free credential with the fewest sessions: s4 leaves A
    // (A: s5), B has s3, C has s2 → B, the first of the two
    CHECK(p1->mark_usage_limit_reached("a", "s4", 1'000));
    CHECK(p1->api_key("a", "s4") == "key-B");
    CHECK(store->credential_sessions("a", fa) == 1);
    CHECK(store->credential_sessions("a", fb) == 2);
    CHECK(store->credential_sessions("a", fc) == 1);
}

TEST_CASE("credential pool §11.31: a session that ends gives its lease back",
          "[limits][session][pool]") {
    auto store = std::make_shared<local_limit_store>();
    auto auth = std::make_shared<in_memory_auth_storage>([] { return t0; });
    auth->add_credential("faux", "key-A");
    auth->share_limits(store);
    auto h = std::make_unique<harness>(R"([{"text":"ok"}])", settings{},
                                       [&](session_options& o) { o.auth = auth; });
    CHECK(auth->api_key("faux", h->session->session_id()) == "key-A");
    CHECK(store->credential_sessions("faux", credential_fingerprint("key-A")) == 1);
    h->session.reset();
    CHECK(store->credential_sessions("faux", credential_fingerprint("key-A")) == 0);
}

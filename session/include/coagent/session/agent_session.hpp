#pragma once
// agent_session: one conversation with a model on one executor, with the automatic retry
// policy of docs/retry-policy.md. `co_await session.prompt(text)` completes only when the
// turn, any retry chain started in it, any compaction continuation and queued follow-ups
// have ended; `agent_settled` is its last event.

#include <coagent/classify/classify.hpp>
#include <coagent/retry/model_fallback.hpp>
#include <coagent/retry/retry_machine.hpp>
#include <coagent/runtime/abort_signal.hpp>
#include <coagent/runtime/cancellable_wait.hpp>
#include <coagent/runtime/event.hpp>
#include <coagent/runtime/listener_list.hpp>
#include <coagent/runtime/settings.hpp>
#include <coagent/runtime/streaming_behavior.hpp>
#include <coagent/session/auth_storage.hpp>
#include <coagent/session/compaction.hpp>
#include <coagent/session/detail/prompt_queue.hpp>
#include <coagent/session/extension_runner.hpp>
#include <coagent/session/history.hpp>
#include <coagent/session/limit_store.hpp>
#include <coagent/session/model_catalog.hpp>
#include <coagent/session/provider.hpp>
#include <coagent/session/run_policy.hpp>
#include <coagent/session/telemetry.hpp>
#include <coagent/session/tool_runner.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace spdlog {
class logger;
}

namespace coagent {

struct session_options {
    boost::asio::any_io_executor executor;
    std::shared_ptr<provider> model_provider;  ///< required
    settings config;                           ///< effective settings (see settings_store)
    clock_kind clock = clock_kind::steady;     ///< manual in tests
    std::shared_ptr<auth_storage>
        auth;  ///< optional: usage-limit switching (default: the provider's credentials())
    std::shared_ptr<model_catalog> models;  ///< optional: set_model by name, retry.fallbackChains
    std::shared_ptr<compaction_hook> compaction;       ///< optional: default model_summarizer
    std::optional<std::filesystem::path> session_dir;  ///< none: history kept in memory only
    std::optional<std::filesystem::path> resume_file;  ///< continue this session file
    std::string cwd;                                   ///< recorded in the session header
    std::string system_prompt;
    std::shared_ptr<spdlog::logger> logger;  ///< default: warnings to stderr
    std::function<std::int64_t()> now_ms;    ///< epoch ms for dated retry hints
    /// optional: the limit state shared with other sessions (docs/limits.md): the retry budget
    /// and the fallback chain's model cooldowns (credential blocks are shared by the auth
    /// storage given the same store, auth_storage::share_limits). Default: the budget in one
    /// local store per process (process_limit_store()), cooldowns kept by the session alone.
    std::shared_ptr<limit_store> limits;
    /// optional: told of prompts, chats, attempts and decisions (docs/observability.md)
    std::shared_ptr<coagent::telemetry> telemetry;
    /// optional, for tests: the uniform draw in [0, 1) of retry.jitter and of a park's wake
    /// spread (default: a PRNG seeded from std::random_device)
    std::function<double()> random;
};

/// The result of a manual compaction.
struct compact_result {
    bool ok = false;
    std::string error;  ///< when !ok (the compaction_end event has the details)
};

class agent_session : private event_sink {
  public:
    using listener = std::function<void(const event&)>;

    /// The refusal text of a prompt sent while a request streams without a streaming behaviour
    /// (during a backoff such a prompt joins the chain: join_backoff()).
    static constexpr const char* busy_message =
        "Agent is busy (a request is streaming). Send the message with streamingBehavior "
        "\"steer\" (joins the context before the next request) or \"followUp\" (runs after the "
        "current prompt), or wait for agent_settled.";

    /// Throws std::invalid_argument without a provider or executor; std::system_error when
    /// the session file cannot be created; std::runtime_error when resume_file is not a
    /// session file.
    explicit agent_session(session_options opts);
    ~agent_session();
    agent_session(const agent_session&) = delete;
    agent_session& operator=(const agent_session&) = delete;

    /// Runs one user prompt. Completes with the prompt's result once the turn, its retry chain
    /// (success, exhaustion, cancel), compaction continuation and queued follow-ups have
    /// ended, right after `agent_settled` was emitted. While busy: `steer` / `follow_up` queue
    /// the message and complete when the session settles; `none` completes at once with
    /// status refused. The same as async_prompt(text, behavior, use_awaitable): cancelling the
    /// awaiting coroutine (terminal or partial, e.g. through awaitable operators) aborts the
    /// turn cleanly — see async_prompt. The session must outlive the operation.
    boost::asio::awaitable<prompt_result> prompt(
        std::string text, streaming_behavior behavior = streaming_behavior::none);
    /// prompt() of `text` followed by `images` (see async_prompt with images).
    boost::asio::awaitable<prompt_result> prompt(
        std::string text, std::vector<image_block> images,
        streaming_behavior behavior = streaming_behavior::none);

    /// prompt() for any Asio completion token (callback, use_future, use_awaitable, deferred).
    /// Completion signature: void(std::exception_ptr, prompt_result); the exception_ptr is set
    /// only for a bug (a provider, tool or listener that threw). The handler is invoked through
    /// its associated executor (default: the session's). The session must outlive the
    /// operation; `text` is moved in.
    /// Cancellation through a slot bound to the token: terminal and partial are honoured —
    /// for a running prompt they call abort() on the session's executor (the pending retry is
    /// cancelled first, then the stream) and the operation completes with status aborted; for
    /// a prompt still queued (steer / follow_up) only its own message is dropped and it
    /// completes at once with status aborted. Total cancellation is not honoured (an abort has
    /// visible effects). A cancellation that arrives after completion has no effect.
    template <typename CompletionToken>
    auto async_prompt(std::string text, streaming_behavior behavior, CompletionToken&& token) {
        return async_prompt(std::move(text), std::vector<image_block>{}, behavior,
                            std::forward<CompletionToken>(token));
    }
    /// async_prompt() of a user message with images: `text` then `images`, one content block
    /// each, as the reference builds it (RPC `images`, `--image`).
    template <typename CompletionToken>
    auto async_prompt(std::string text, std::vector<image_block> images,
                      streaming_behavior behavior, CompletionToken&& token) {
        namespace asio = boost::asio;
        return asio::async_initiate<CompletionToken, void(std::exception_ptr, prompt_result)>(
            [this](auto handler, message_ptr user, streaming_behavior b) {
                const std::uint64_t id = next_prompt_id_++;
                auto slot = asio::get_associated_cancellation_slot(handler);
                std::shared_ptr<bool> pending = bind_prompt_slot(slot, id);
                // co_spawn must not take over the slot: hand it an unconnected one, and
                // disconnect ours when the operation completes
                using completion = prompt_completion<decltype(handler)>;
                asio::co_spawn(executor_,
                               perform(loop_start{
                                   loop_start::kind::prompt, b, id, std::move(user), nullptr, {}}),
                               asio::bind_cancellation_slot(
                                   asio::cancellation_slot(),
                                   completion{std::move(handler), slot, std::move(pending), this}));
            },
            token,
            std::make_shared<const message>(make_user_message(std::move(text), std::move(images))),
            behavior);
    }
    template <typename CompletionToken>
    auto async_prompt(std::string text, CompletionToken&& token) {
        return async_prompt(std::move(text), streaming_behavior::none,
                            std::forward<CompletionToken>(token));
    }

    /// Cancels a pending retry (its auto_retry_end says "Retry cancelled"), then aborts the
    /// stream in flight and drops queued messages: their prompts complete with status aborted
    /// ("Aborted before it ran") at the settle. The running prompt completes with status
    /// aborted. No effect when idle.
    /// A steer / follow_up prompt sent after abort() while the aborted run still winds down
    /// (a tool still running, say) is not dropped: it runs like any follow-up, after the
    /// aborted run and before the settle, and completes with its own run's result — nothing
    /// is lost and nothing runs inside a later prompt. To drop it, cancel that prompt.
    void abort();
    /// Cancels the retry backoff in progress (or the retried attempt in flight, which is
    /// aborted too). Not an abort: the prompt completes with status failed ("Retry cancelled")
    /// and its queued follow-ups still run. Inside a compaction (the summary request is retried
    /// under the policy) it fails the compaction — compaction_end{aborted:false, errorMessage:
    /// "Compaction failed: Retry cancelled"} — and an overflow's prompt then completes failed
    /// with the overflow's error, as after any failed overflow recovery.
    void abort_retry();
    /// Ends the backoff wait in progress at once: the next attempt starts exactly as if the
    /// timer had fired (no new auto_retry_start; the chain's events keep their order). Returns
    /// false, with no effect, when no backoff is running (also during a retried attempt, or
    /// after abort_retry()).
    bool retry_now();
    /// A message from the user during a backoff is a reason to try now: when a backoff is
    /// running, `text` joins the conversation (appended to the context and persisted;
    /// message_start/message_end(user) are emitted at once), the wait ends as with retry_now()
    /// and the next attempt's request carries it. Returns false, with no effect, when no
    /// backoff is running. prompt(text) without a streaming behaviour does this during a
    /// backoff and completes with the chain's result at its settle; RPC's `prompt` uses it.
    bool join_backoff(std::string text);
    /// join_backoff() of `text` followed by `images`.
    bool join_backoff(std::string text, std::vector<image_block> images);
    /// retry.longWait "park": the park in progress ends at this time (epoch ms); nullopt when
    /// not parked (RPC get_state's parkedUntil).
    std::optional<std::int64_t> parked_until() const noexcept;
    /// The park a resumed session file left open (a retry_park entry with no retry_park_end
    /// after it), if any.
    std::optional<open_park> open_park_in_history() const;
    /// Re-enters the open park of a resumed session (docs/retry-policy.md §11.28): the busy
    /// period begins parked (retry_parked again), wakes at the park's `until` (plus the spread)
    /// and continues the turn as a prompt does (agent_start … agent_settled); completes with its
    /// result, on the session's executor. Completes at once with status refused when the
    /// session is busy or has no open park. Cancelled like a backoff (abort_retry(), abort():
    /// status failed / aborted, "Retry cancelled"); retry_now() and a joining prompt end the park
    /// at once. The same as async_resume_park(use_awaitable): cancelling the awaiting coroutine
    /// aborts it as it aborts a prompt. The session must outlive it.
    boost::asio::awaitable<prompt_result> resume_park();
    /// resume_park() for any Asio completion token; signature void(std::exception_ptr,
    /// prompt_result). Cancellation through a slot bound to the token is the prompt's
    /// (async_prompt): terminal and partial call abort() on the session's executor, the park ends
    /// cancelled (auto_retry_end "Retry cancelled", retry_park_end cancelled) and the operation
    /// completes with status aborted; total is not honoured.
    template <typename CompletionToken>
    auto async_resume_park(CompletionToken&& token) {
        namespace asio = boost::asio;
        return asio::async_initiate<CompletionToken, void(std::exception_ptr, prompt_result)>(
            [this](auto handler) {
                const std::uint64_t id = next_prompt_id_++;
                auto slot = asio::get_associated_cancellation_slot(handler);
                std::shared_ptr<bool> pending = bind_prompt_slot(slot, id);
                using completion = prompt_completion<decltype(handler)>;
                asio::co_spawn(executor_,
                               perform(loop_start{loop_start::kind::resume_park,
                                                  streaming_behavior::none,
                                                  id,
                                                  {},
                                                  nullptr,
                                                  {}}),
                               asio::bind_cancellation_slot(
                                   asio::cancellation_slot(),
                                   completion{std::move(handler), slot, std::move(pending), this}));
            },
            token);
    }
    /// join_backoff() would succeed now.
    bool can_join_backoff() const noexcept { return policy_.backoff_running(); }

    /// Runtime override of retry.enabled for this session (turning it off does not cancel a
    /// wait in progress).
    void set_auto_retry_enabled(bool enabled) noexcept { config_.retry.enabled = enabled; }
    bool auto_retry_enabled() const noexcept { return config_.retry.enabled; }
    bool is_retrying() const noexcept { return policy_.machine().is_retrying(); }
    int retry_attempt() const noexcept { return policy_.machine().attempt(); }
    bool is_streaming() const noexcept { return streaming_; }
    bool is_busy() const noexcept { return busy_; }
    bool is_compacting() const noexcept { return compacting_; }
    /// thinkingLevel for this session (a runtime override of the setting): the next request
    /// is sent with it. Returns the note to show when the current model does not reason (the
    /// level is kept and ignored, never sent), else an empty string.
    std::string set_thinking_level(thinking_level level);
    thinking_level configured_thinking_level() const noexcept { return config_.selection.thinking; }
    /// The level requests go out with: the configured one, or off on a model that does not
    /// reason (effective_thinking_level).
    thinking_level thinking_level_in_use() const {
        return effective_thinking_level(model(), config_.selection.thinking);
    }
    void set_auto_compaction_enabled(bool enabled) noexcept {
        config_.compaction.enabled = enabled;
    }
    bool auto_compaction_enabled() const noexcept { return config_.compaction.enabled; }

    /// Manual compaction: summarises the older part of the context with the current model
    /// (compaction_start/end{reason:"manual"}). Only while idle; abort() cancels it. Completes
    /// on the session's executor right after compaction_end; the session must outlive it.
    /// Prompts queued (steer / follow_up) while it runs run after it exactly as after a prompt
    /// (the first of them runs the queue and settles); when abort() dropped them, agent_settled
    /// follows compaction_end at once.
    boost::asio::awaitable<compact_result> compact(std::string custom_instructions = {});

    const settings& config() const noexcept { return config_; }
    void set_config(const settings& s) noexcept { config_ = s; }

    /// Listeners run synchronously, after the extensions, in subscription order. A message
    /// in an event may be the one still being streamed: copy it to keep it.
    /// The subscription must not outlive the session.
    [[nodiscard]] subscription subscribe(listener l) { return listeners_.add(std::move(l)); }
    /// Adds an in-process extension (gets every event before the listeners).
    void add_extension(std::string path, extension_runner::handler h);
    /// Registers a tool the model may call. A call that abort() interrupts (the tool's waits
    /// get terminal cancellation) ends with the result interrupted_tool_text(name), an error. A
    /// call a crash left without a result gets that result before the next request of a resumed
    /// session, or, with `o.idempotent`, runs once more (docs/sessions.md "Interrupted tools").
    void register_tool(tool_definition def, tool_function fn, tool_options o = {});

    /// The runtime context (what the next request is built from, before failed replies are
    /// filtered out).
    const std::vector<message_ptr>& messages() const noexcept { return messages_; }
    const session_history& history() const noexcept { return history_; }
    /// Names the session: a session_info{name} entry in its history (the latest one wins on
    /// resume). An I/O failure writing it is returned; the name is kept either way.
    std::error_code set_session_name(std::string name);
    const std::optional<std::string>& session_name() const noexcept;
    model_info model() const { return provider_->model(); }
    /// Switches the model for the next request (one in flight finishes on the old one); a
    /// model_change entry goes to the history; an active model fallback is forgotten.
    void set_model(std::shared_ptr<provider> p);
    /// set_model through the catalog: "" on success, else why not (no catalog, unknown model,
    /// no key).
    std::string set_model(std::string_view provider_name, std::string_view model_id);
    /// The catalog given in session_options (may be null).
    const std::shared_ptr<model_catalog>& catalog() const noexcept;
    /// The limit store given in session_options, else process_limit_store().
    const std::shared_ptr<limit_store>& limits() const noexcept;
    /// The model fallback state (retry.fallbackChains); null until a usage limit met a chain.
    const model_fallback* fallback() const noexcept { return fallback_.get(); }
    std::size_t pending_message_count() const noexcept { return queue_.size(); }
    /// Wasted tokens and cost, backoff time, retries by limit (all zero until an attempt failed).
    const session_usage& usage() const noexcept;
    const std::string& session_id() const noexcept { return history_.session_id(); }
    boost::asio::any_io_executor get_executor() const noexcept { return executor_; }

  private:
    // a connected slot of prompt `id`'s completion: terminal and partial cancel it
    // (cancel_prompt, posted); returns the flag its completion clears (null: no slot)
    std::shared_ptr<bool> bind_prompt_slot(boost::asio::cancellation_slot& slot, std::uint64_t id) {
        namespace asio = boost::asio;
        if (!slot.is_connected()) return nullptr;
        auto pending = std::make_shared<bool>(true);
        slot.assign([this, pending, id](asio::cancellation_type type) {
            if ((type & (asio::cancellation_type::terminal | asio::cancellation_type::partial)) ==
                asio::cancellation_type::none)
                return;
            asio::post(executor_, [this, pending, id] {
                if (*pending) cancel_prompt(id);
            });
        });
        return pending;
    }

    // async_prompt's completion handler: it reports through the handler's associated executor
    // (default: the session's), computed when asked rather than stored in co_spawn's frame
    template <typename Handler>
    struct prompt_completion {
        Handler h;
        boost::asio::cancellation_slot slot;
        std::shared_ptr<bool> pending;
        agent_session* session;

        using executor_type =
            boost::asio::associated_executor_t<Handler, boost::asio::any_io_executor>;
        executor_type get_executor() const noexcept {
            return boost::asio::get_associated_executor(h, session->executor_);
        }
        void operator()(std::exception_ptr e, prompt_result r) {
            if (pending) *pending = false;
            if (slot.is_connected()) slot.clear();
            std::move(h)(std::move(e), std::move(r));
        }
    };
    class observer;
    // event_sink: the run policy's events go to emit()
    void operator()(event e) override;
    event_sink& sink() noexcept { return *this; }
    void record_retry_end(const auto_retry_end_event& end);  // the session file's retry_end
    void record_park(const retry_parked_event& p);           // retry_park
    void record_park_end(run_action::park_end how);          // retry_park_end
    park_context park_ctx() const;
    // what the one loop (perform) carries between the policy's actions
    struct run_state;    // session/src/session_parts.hpp
    struct run_outcome;  // session/src/session_parts.hpp
    struct summary_state;
    // how perform's loop begins: a prompt (its busy check first), a resumed park, or an action of
    // a caller that keeps the run's state itself (the queue's prompt, a summary request)
    struct loop_start {
        enum class kind : unsigned char { prompt, resume_park, action };
        kind what = kind::prompt;
        streaming_behavior behavior = streaming_behavior::none;  // prompt
        std::uint64_t id = 0;                                    // prompt, resume_park
        message_ptr user;                                        // prompt
        run_state* st = nullptr;                                 // action: the caller's state
        run_action first{};                                      // action
    };
    // the session's one loop: performs the run policy's actions until the busy period settles
    // (a prompt) or the summary request's reply is final (a compaction's summary). A prompt's
    // and a resumed park's coroutine is this loop itself, made when async_prompt /
    // async_resume_park is called: one frame for a session parked in a backoff
    boost::asio::awaitable<prompt_result> perform(loop_start s);
    bool begin_prompt_loop(loop_start& s, run_state& st);   // false: busy, prompt_while_busy
    bool begin_resumed_park(loop_start& s, run_state& st);  // false: refused
    // perform's steps that are coroutines of their own, so that what they keep is not in the
    // frame of a session parked in a backoff
    boost::asio::awaitable<void> run_step(run_state& st, run_action& a);
    boost::asio::awaitable<void> compact_step(run_action& a);
    std::int64_t begin_backoff(const run_action& a, run_state& st);
    run_action end_wait(run_action::kind what, bool elapsed, std::int64_t wait_from);
    boost::asio::awaitable<bool> compact_context(compaction_reason reason, std::string instructions,
                                                 bool will_continue);
    boost::asio::awaitable<message_ptr> request_summary(provider_request req);
    boost::asio::awaitable<run_action> stream_summary(summary_state& st);
    // plain parts of the loop (their locals stay out of the coroutine frames)
    run_action end_run(run_outcome& out);
    void drop_failed_reply(run_state& st);  // a wait or park begins: §3.9
    run_action next_queued(run_state& st, bool prompt_over_aborted);
    void settle(bool has_result);
    boost::asio::awaitable<prompt_result> prompt_while_busy(message_ptr user, streaming_behavior b,
                                                            std::uint64_t id);
    boost::asio::awaitable<prompt_result> queue_while_busy(message_ptr user, streaming_behavior b,
                                                           std::uint64_t id);
    bool join_backoff_message(message_ptr user);
    void omit_older_images();
    // a prompt whose message joined a backoff: parked until the settle, with the chain's result
    boost::asio::awaitable<prompt_result> wait_for_settle(std::uint64_t id);
    void settle_after_compaction();
    void cancel_prompt(std::uint64_t id);
    boost::asio::awaitable<bool> post_continue();
    boost::asio::awaitable<void> run_agent(message_ptr user, run_outcome& out,
                                           message_ptr continue_from);
    bool prefill_rejected(const model_info& m) const;
    boost::asio::awaitable<void> execute_tools(const message& assistant, run_outcome& out);
    boost::asio::awaitable<void> execute_tool(const tool_call_block& call, run_outcome& out);
    void add_tool_result(const tool_call_block& call, tool_output result, run_outcome& out);
    // a resumed session: the tool calls a crash left without a result get one (once)
    boost::asio::awaitable<void> repair_tool_calls(run_outcome& out);
    bool has_queued() const noexcept { return !queue_.empty(); }
    void append(message_ptr m);
    void emit(event e);
    void drop_trailing_failed_assistant();
    // the usage-limit switches the policy asks for: a credential (auth storage), else a model
    bool switch_credential(const std::string& provider_name, std::optional<std::int64_t> hint_ms);
    std::optional<retry_fallback_applied_event> switch_model(std::optional<std::int64_t> hint_ms);
    void restore_fallback_primary();
    void switch_provider(std::shared_ptr<provider> p, bool temporary);
    provider_request build_request() const;
    // telemetry and usage accounting (a pointer test each when there is no telemetry)
    struct telemetry_state;
    std::int64_t tel_now() const;
    void tel_prompt_start();
    void tel_prompt_end();
    void tel_refused(prompt_result::status outcome);
    void tel_attempt_start(const model_info& m);
    void tel_attempt_end(const message& reply);
    void tel_classified(const message& last, const classification& c);
    void tel_decided(const run_action& a);
    void tel_retry(const auto_retry_start_event& e);
    session_usage& usage_mut();

    boost::asio::any_io_executor executor_;
    std::shared_ptr<provider> provider_;
    settings config_;
    clock_kind clock_;
    std::shared_ptr<compaction_hook> compaction_;
    std::shared_ptr<spdlog::logger> logger_;

    run_policy policy_;  // every decision at the end of a run
    std::unique_ptr<model_fallback>
        fallback_;  // created on first use: a parked session stays small
    // the usage accounting, from the first failed attempt (not in rare_: a session parked in
    // backoff would pay for all of rare_members)
    std::unique_ptr<session_usage> usage_;
    cancellable_wait backoff_;  // inline: one allocation less per session
    abort_signal abort_;
    // the result of the latest busy period, for the prompts queued in it; allocated at the first
    // settle (a session parked in its first backoff stays small)
    std::unique_ptr<prompt_result> last_result_;
    prompt_result last_result() const { return last_result_ ? *last_result_ : prompt_result{}; }

    std::vector<message_ptr> messages_;
    // the codec's text of each message, kept between requests (created at the first request
    // of two messages or more: a session parked in its first backoff has none)
    mutable std::unique_ptr<wire_fragments> fragments_;
    session_history history_;
    detail::prompt_queue queue_;  // steer / follow_up messages and their parked prompts
    std::uint64_t next_prompt_id_ = 1;
    std::uint64_t running_id_ = 0;

    listener_list<const event&> listeners_;

    // what many sessions never set, out of line, created on first use (a parked session stays
    // small); defined in session/src/session_parts.hpp
    struct rare_members;
    std::unique_ptr<rare_members> rare_;
    rare_members& rare();
    std::int64_t now_ms() const;
    model_catalog* catalog_ptr() const noexcept;
    limit_store* budget_store() const noexcept;  // null unless retry.budget.enabled
    bool busy_ = false;
    bool streaming_ = false;
    bool compacting_ = false;
    bool check_tool_calls_ = false;  // resumed: the next run first repairs dangling tool calls
};

}  // namespace coagent

#include <coagent/runtime/json_input.hpp>
#include <coagent/session/agent_session.hpp>
#include <coagent/session/compaction.hpp>

#include "session_parts.hpp"

#include <spdlog/logger.h>

#include <boost/json/serialize.hpp>

namespace coagent {

std::string summary_message_text(std::string_view summary) {
    std::string s(summary_prefix);
    s.append(summary);
    return s;
}

std::optional<std::string> summary_of(const message& m) {
    if (m.role != message_role::user) return std::nullopt;
    std::string t = text_of(m);
    if (!std::string_view(t).starts_with(summary_prefix)) return std::nullopt;
    return t.substr(summary_prefix.size());
}

std::int64_t estimate_tokens(const message& m) {
    std::size_t chars = 0;
    for (const auto& b : m.content) {
        if (const auto* t = std::get_if<text_block>(&b))
            chars += t->text.size();
        else if (const auto* c = std::get_if<tool_call_block>(&b))
            chars += c->name.size() + json::serialize(c->arguments).size();
        else if (const auto* th = std::get_if<thinking_block>(&b))
            chars += th->thinking.size();
        else
            chars += image_estimate_chars;  // an image: a fixed estimate, whatever its size
    }
    return static_cast<std::int64_t>((chars + 3) / 4);
}

std::int64_t context_tokens(const message& r) {
    if (r.usage.total_tokens > 0) return r.usage.total_tokens;
    return saturating_add(saturating_add(r.usage.input, r.usage.output),
                          saturating_add(r.usage.cache_read, r.usage.cache_write));
}

bool over_threshold(const message& r, const model_info& model, const compaction_settings& s) {
    if (model.context_window <= 0 || r.role != message_role::assistant || is_failed_assistant(r))
        return false;
    return context_tokens(r) > model.context_window - s.reserve_tokens;
}

std::optional<compaction_plan> plan_compaction(const std::vector<message_ptr>& context,
                                               std::int64_t keep_recent_tokens) {
    compaction_plan p;
    std::size_t begin = 0;
    if (!context.empty())
        if (auto s = summary_of(*context.front())) {
            p.previous_summary = std::move(s);
            begin = 1;
        }
    for (const auto& m : context) p.tokens_before += estimate_tokens(*m);

    // walk back from the end while the recent messages fit
    std::size_t cut = context.size();
    std::int64_t kept = 0;
    while (cut > begin) {
        const auto t = estimate_tokens(*context[cut - 1]);
        if (kept + t > keep_recent_tokens) break;
        kept += t;
        --cut;
    }
    // start the kept part at a user message (a turn boundary)
    while (cut < context.size() && context[cut]->role != message_role::user) ++cut;

    for (std::size_t i = begin; i < cut; ++i)
        if (!is_failed_assistant(*context[i])) p.to_summarize.push_back(context[i]);
    if (p.to_summarize.empty()) return std::nullopt;
    p.first_kept = cut;
    return p;
}

provider_request model_summarizer::build_request(const compaction_request& req) {
    provider_request r;
    r.model = req.model;
    r.system_prompt =
        "You summarize conversations between a user and an AI assistant so the assistant can "
        "continue without the full history. Keep every fact, decision, open task, file name "
        "and number that later turns may need. Answer with the summary only.";
    std::string body;
    if (req.plan.previous_summary) {
        body += "Summary of the conversation before this part:\n";
        body += *req.plan.previous_summary;
        body += "\n\n";
    }
    body += "Conversation to summarize:\n";
    for (const auto& m : req.plan.to_summarize) {
        body += '[';
        body += to_string(m->role);
        body += "] ";
        body += text_of(*m);
        for (const auto* c : tool_calls_of(*m)) {
            body += " (tool call ";
            body += c->name;
            body += ' ';
            body += json::serialize(c->arguments);
            body += ')';
        }
        body += '\n';
    }
    if (!req.custom_instructions.empty()) {
        body += "\nAdditional instructions: ";
        body += req.custom_instructions;
        body += '\n';
    }
    r.messages.push_back(std::make_shared<message>(make_user_message(std::move(body))));
    return r;
}

boost::asio::awaitable<compaction_outcome> model_summarizer::compact(compaction_request req,
                                                                     abort_signal& abort) {
    provider_request r = build_request(req);
    message_ptr reply = co_await req.complete(std::move(r));
    compaction_outcome o;
    if (abort.requested() || reply->stop == stop_reason::aborted) {
        o.aborted = true;
        o.error_message = "Compaction aborted";
    } else if (reply->stop == stop_reason::error) {
        o.error_message = "Compaction failed: " + reply->error_message.value_or("Unknown error");
    } else if (text_of(*reply).empty()) {
        o.error_message = "Compaction failed: the model returned an empty summary";
    } else {
        o.ok = true;
        o.summary = text_of(*reply);
    }
    co_return o;
}

std::string nothing_to_compact_message(std::int64_t keep_recent_tokens) {
    return "Nothing to compact: the conversation is already within compaction.keepRecentTokens (" +
           std::to_string(keep_recent_tokens) + " tokens)";
}

std::vector<message_ptr> compacted_context(const std::vector<message_ptr>& context,
                                           std::size_t first_kept, std::string_view summary) {
    std::vector<message_ptr> next;
    next.reserve(context.size() - std::min(first_kept, context.size()) + 1);
    next.push_back(std::make_shared<message>(make_user_message(summary_message_text(summary))));
    if (first_kept < context.size())
        next.insert(next.end(), context.begin() + static_cast<std::ptrdiff_t>(first_kept),
                    context.end());
    return next;
}

// ---- the session's compaction: orchestration (the decisions are the run policy's) ---------

namespace asio = boost::asio;

asio::awaitable<bool> agent_session::compact_context(compaction_reason reason,
                                                     std::string instructions, bool will_continue) {
    compacting_ = true;
    emit(compaction_start_event{std::string(to_string(reason))});
    compaction_end_event e;
    e.reason = to_string(reason);

    std::vector<message_ptr> context = messages_;  // nothing changes until the summary is there
    if (reason == compaction_reason::overflow && !context.empty() &&
        is_failed_assistant(*context.back()))
        context.pop_back();
    auto plan = plan_compaction(context, config_.compaction.keep_recent_tokens);
    if (!plan) {
        compacting_ = false;
        e.error_message = nothing_to_compact_message(config_.compaction.keep_recent_tokens);
        emit(std::move(e));
        co_return false;
    }
    compaction_request req;
    req.reason = e.reason;
    req.model = provider_->model();
    req.custom_instructions = std::move(instructions);
    req.complete = [this](provider_request r) { return request_summary(std::move(r)); };
    const std::size_t first_kept = plan->first_kept;
    const std::int64_t tokens_before = plan->tokens_before;
    req.plan = std::move(*plan);
    compaction_outcome o = co_await compaction_->compact(std::move(req), abort_);
    compacting_ = false;
    if (!o.ok || abort_.requested()) {
        auto f = policy_.compaction_failed(o.ok, o.aborted, std::move(o.error_message),
                                           abort_.requested());
        e.aborted = f.aborted;
        e.error_message = std::move(f.error);
        emit(std::move(e));
        co_return false;
    }

    // persist, then swap the context in one step
    std::string first_kept_id;
    if (first_kept < context.size())
        for (const auto& entry : history_.entries())
            if (entry.msg == context[first_kept]) first_kept_id = entry.id;
    json::object fields;
    fields["summary"] = o.summary;
    if (first_kept_id.empty())
        fields["firstKeptEntryId"] = nullptr;
    else
        fields["firstKeptEntryId"] = first_kept_id;
    fields["tokensBefore"] = tokens_before;
    json::object result = fields;
    if (auto ec = history_.append_entry("compaction", std::move(fields)))
        logger_->error("session file: cannot write the compaction entry: {}", ec.message());
    messages_ = compacted_context(context, first_kept, o.summary);

    e.result = json::value(std::move(result));
    e.will_retry = will_continue;
    emit(std::move(e));
    co_return true;
}

asio::awaitable<compact_result> agent_session::compact(std::string custom_instructions) {
    compact_result r;
    if (busy_ || compacting_) {
        r.error = "Agent is busy: compact when the session is idle (after agent_settled).";
        co_return r;
    }
    busy_ = true;
    abort_.reset();
    policy_.begin_compaction();
    if (check_tool_calls_) {  // resumed: the summary request gets no dangling tool call either
        run_outcome repaired;
        co_await repair_tool_calls(repaired);
    }
    r.ok =
        co_await compact_context(compaction_reason::manual, std::move(custom_instructions), false);
    if (rare_ && rare_->tel)
        rare_->tel->sink->compaction(tel_now(), compaction_reason::manual, r.ok);
    if (!r.ok)
        r.error = policy_.user_aborted() ? "Compaction aborted"
                                         : "Compaction failed or had nothing to compact";
    settle_after_compaction();
    co_return r;
}
void agent_session::settle_after_compaction() {
    // prompts queued during a manual compaction run after it exactly as after a prompt
    // (docs/architecture.md "Compaction"): the first queued one takes over, stays busy, runs the
    // queue and settles
    if (queue_.hand_over()) return;
    busy_ = false;
    // prompts queued during it whose messages abort() dropped: they settle now
    if (queue_.wake_all()) emit(agent_settled_event{});
}

}  // namespace coagent

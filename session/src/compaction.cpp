#include <coagent/runtime/json_input.hpp>
#include <coagent/session/compaction.hpp>

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
        else
            chars += std::get<tool_call_block>(b).name.size() +
                     json::serialize(std::get<tool_call_block>(b).arguments).size();
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

}  // namespace coagent

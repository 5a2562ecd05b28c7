#include <coagent/providers/faux_provider.hpp>
#include <coagent/runtime/json_input.hpp>

#include <boost/asio/this_coro.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <algorithm>

namespace coagent {

namespace asio = boost::asio;

namespace {

using scripted::step_error;

std::int64_t non_negative_int(const json::object& o, std::string_view key,
                              const std::string& source, std::size_t index) {
    const auto* v = o.if_contains(key);
    if (!v) return 0;
    if (v->is_int64() && v->get_int64() >= 0) return v->get_int64();
    if (v->is_uint64()) return *saturating_int64(*v);
    step_error(source, index,
               "\"" + std::string(key) + "\" must be a non-negative integer, found " +
                   json::serialize(*v));
}

// a step's "usage": {input, output, cacheRead, cacheWrite} (error and text steps)
token_usage usage_of(const json::value& u, const std::string& source, std::size_t index) {
    if (!u.is_object()) step_error(source, index, "\"usage\" must be an object");
    token_usage tu;
    const auto& uo = u.get_object();
    tu.input = non_negative_int(uo, "input", source, index);
    tu.output = non_negative_int(uo, "output", source, index);
    tu.cache_read = non_negative_int(uo, "cacheRead", source, index);
    tu.cache_write = non_negative_int(uo, "cacheWrite", source, index);
    tu.total_tokens = saturating_add(saturating_add(tu.input, tu.output),
                                     saturating_add(tu.cache_read, tu.cache_write));
    return tu;
}

}  // namespace

std::vector<faux_step> faux_syntax::parse_steps(std::string_view text, const std::string& source) {
    auto parsed = parse_json_strict(text);
    if (const auto& e = parsed.error) {
        if (e->non_finite) throw faux_script_error(source + ": " + e->describe());
        throw faux_script_error(source + ":" + std::to_string(e->line) + ":" +
                                std::to_string(e->column) + ": invalid JSON: " + e->message);
    }
    json::value v = std::move(parsed.value);
    if (!v.is_array())
        throw faux_script_error(source + ": the script must be a JSON array of steps");
    std::vector<faux_step> steps;
    const auto& arr = v.get_array();
    for (std::size_t i = 0; i < arr.size(); ++i) {
        if (!arr[i].is_object()) step_error(source, i, "a step must be an object");
        const auto& o = arr[i].get_object();
        faux_step st;
        const int kinds =
            int(o.contains("error")) + int(o.contains("text")) + int(o.contains("toolCall"));
        if (kinds != 1)
            step_error(source, i, "needs exactly one of \"error\", \"text\", \"toolCall\"");
        if (const auto* e = o.if_contains("error")) {
            if (!e->is_string()) step_error(source, i, "\"error\" must be a string");
            st.type = faux_step::kind::error;
            st.text = e->get_string();
            if (const auto* u = o.if_contains("usage")) st.usage = usage_of(*u, source, i);
            if (const auto* sv = o.if_contains("status")) {
                if (!sv->is_int64() || sv->get_int64() < 100 || sv->get_int64() > 599)
                    step_error(source, i, "\"status\" must be an HTTP status (100-599)");
                st.status = static_cast<int>(sv->get_int64());
            }
        } else if (const auto* t = o.if_contains("text")) {
            if (!t->is_string()) step_error(source, i, "\"text\" must be a string");
            st.type = faux_step::kind::text;
            st.text = t->get_string();
            if (const auto* u = o.if_contains("usage")) st.usage = usage_of(*u, source, i);
        } else {
            const auto& tc = o.at("toolCall");
            if (!tc.is_object()) step_error(source, i, "\"toolCall\" must be an object");
            const auto* name = tc.get_object().if_contains("name");
            if (!name || !name->is_string())
                step_error(source, i, "\"toolCall.name\" must be a string");
            st.type = faux_step::kind::tool_call;
            st.tool_name = name->get_string();
            if (const auto* a = tc.get_object().if_contains("arguments")) {
                if (!a->is_object())
                    step_error(source, i, "\"toolCall.arguments\" must be an object");
                st.tool_arguments = a->get_object();
            }
        }
        if (o.contains("times")) {
            auto n = non_negative_int(o, "times", source, i);
            if (n < 1 || n > 1'000'000'000)
                step_error(source, i, "\"times\" must be between 1 and 1e9");
            st.times = static_cast<int>(n);
        }
        st.delay_ms = non_negative_int(o, "delayMs", source, i);
        st.stall_ms = non_negative_int(o, "stallMs", source, i);
        for (const auto& kv : o) {
            static constexpr std::string_view known[] = {
                "error", "status", "text", "usage", "toolCall", "times", "delayMs", "stallMs"};
            if (std::find(std::begin(known), std::end(known), kv.key()) == std::end(known))
                step_error(source, i, "unknown field \"" + std::string(kv.key()) + "\"");
        }
        steps.push_back(std::move(st));
    }
    return steps;
}

faux_provider::faux_provider(faux_options opts) : opts_(std::move(opts)) {
    if (opts_.log_file) {
        log_ = std::fopen(opts_.log_file->c_str(), "ae");
        if (!log_)
            throw std::system_error(errno, std::generic_category(),
                                    "cannot open faux log " + opts_.log_file->string());
    }
}

faux_provider::~faux_provider() {
    if (log_) std::fclose(log_);
}

model_info faux_provider::model() const {
    return model_info{"faux", "faux", "faux", opts_.context_window, 8192};
}

std::optional<faux_step> faux_provider::next_step() {
    std::lock_guard lock(mutex_);
    if (!opts_.script) {
        faux_step s;
        s.text = default_reply;
        return s;
    }
    const faux_step* s = cursor_.next(opts_.script->steps);
    if (!s) return std::nullopt;
    return *s;
}

void faux_provider::record(const provider_request& req) {
    if (!opts_.record_requests && !log_) {
        std::lock_guard lock(mutex_);
        ++unrecorded_;
        return;
    }
    faux_request r;
    r.messages.reserve(req.messages.size());
    for (const auto& m : req.messages)
        r.messages.push_back(
            {std::string(to_string(m->role)), text_of(*m),
             m->role == message_role::assistant ? std::string(to_string(m->stop)) : "",
             image_count(*m)});
    std::lock_guard lock(mutex_);
    if (log_) {
        json::object line;
        line["request"] = requests_.size() + 1;
        json::array ms;
        for (const auto& e : r.messages) {
            json::object m;
            m["role"] = e.role;
            m["text"] = e.text;
            if (!e.stop_reason.empty()) m["stopReason"] = e.stop_reason;
            if (e.images) m["images"] = e.images;
            ms.push_back(std::move(m));
        }
        line["messages"] = std::move(ms);
        std::string s = json::serialize(line);
        s.push_back('\n');
        std::fwrite(s.data(), 1, s.size(), log_);
        std::fflush(log_);
    }
    requests_.push_back(std::move(r));
}

std::vector<faux_request> faux_provider::requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
}

std::size_t faux_provider::request_count() const {
    std::lock_guard lock(mutex_);
    return requests_.size() + unrecorded_;
}

asio::awaitable<void> faux_provider::stream(const provider_request& req, message& out,
                                            stream_observer& observer, abort_signal& abort) {
    record(req);
    auto ex = co_await asio::this_coro::executor;
    std::optional<faux_step> step = next_step();
    if (step && step->delay_ms > 0) {
        const bool elapsed = co_await sleep_for(
            ex, opts_.clock, std::chrono::milliseconds(step->delay_ms), abort.slot());
        if (!elapsed || abort.requested()) {
            out.stop = stop_reason::aborted;
            out.error_message = "Request was aborted";
            co_return;
        }
    }
    observer.on_message_start(out);
    if (!step) {
        out.stop = stop_reason::error;
        out.error_message = exhausted_text;
        co_return;
    }
    switch (step->type) {
        case faux_step::kind::error:
            out.stop = stop_reason::error;
            out.error_message = step->text;
            out.error_status = step->status;
            if (step->usage) out.usage = *step->usage;  // what a failed attempt still cost
            co_return;
        case faux_step::kind::tool_call: {
            std::size_t n;
            {
                std::lock_guard lock(mutex_);
                n = ++tool_calls_;
            }
            out.content.emplace_back(tool_call_block{"faux_call_" + std::to_string(n),
                                                     step->tool_name, step->tool_arguments});
            out.stop = stop_reason::tool_use;
            co_return;
        }
        case faux_step::kind::text:
            break;
    }

    // stream the text word by word; a stall happens halfway
    out.content.emplace_back(text_block{});
    const std::vector<std::string_view> chunks = scripted::split_words(step->text);
    const std::size_t stall_at = chunks.size() / 2;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
        if (i == stall_at && step->stall_ms > 0) {
            const auto idle = opts_.stream_idle_timeout_ms;
            const bool times_out = idle > 0 && step->stall_ms > idle;
            const auto wait_ms = times_out ? idle : step->stall_ms;
            const bool elapsed = co_await sleep_for(
                ex, opts_.clock, std::chrono::milliseconds(wait_ms), abort.slot());
            if (!elapsed || abort.requested()) {
                out.stop = stop_reason::aborted;
                out.error_message = "Request was aborted";
                co_return;
            }
            if (times_out) {
                out.stop = stop_reason::error;
                out.error_message =
                    "Stream idle timeout: no data for " + std::to_string(idle) + " ms (timed out)";
                co_return;
            }
        }
        std::get<text_block>(out.content.back()).text.append(chunks[i]);
        observer.on_text_delta(out, chunks[i]);
    }
    if (step->usage) {
        out.usage = *step->usage;
    } else {
        std::size_t chars = 0;
        for (const auto& m : req.messages) chars += text_of(*m).size();
        out.usage.input = static_cast<std::int64_t>(chars / 4 + 1);
        out.usage.output = static_cast<std::int64_t>(step->text.size() / 4 + 1);
        out.usage.total_tokens = out.usage.input + out.usage.output;
    }
    out.stop = stop_reason::stop;
}

}  // namespace coagent

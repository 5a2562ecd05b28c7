// The RPC output queue's merging rule (see rpc_output_queue.hpp).

#include <coagent/modes/rpc_output_queue.hpp>

#include <variant>

namespace coagent::rpc {

namespace {

const text_block* text_at(const message& m, std::size_t i) {
    return i < m.content.size() ? std::get_if<text_block>(&m.content[i]) : nullptr;
}

}  // namespace

void output_queue::push_line(std::string_view line) {
    freeze();
    pending_.append(line);
}

void output_queue::push_event(const event& e) {
    if (const auto* u = std::get_if<message_update_event>(&e); u && u->message) {
        if (bytes() > limits_.merge_above && try_merge(*u)) return;
        freeze();
        const std::size_t before = pending_.size();
        append_json(pending_, e);
        pending_.push_back('\n');
        last_update_line_ = pending_.size() - before;
        return;
    }
    freeze();
    append_json(pending_, e);
    pending_.push_back('\n');
}

bool output_queue::try_merge(const message_update_event& u) {
    const message& m = *u.message;
    if (open_ && open_->msg == u.message && open_->content_count == m.content.size()) {
        // Exactly one block grew by this delta since the last update: it is the open block
        // when that one grew by the delta's size (and ends with it).
        const text_block* t = text_at(m, open_->block);
        if (t && t->text.size() == open_->block_size + u.delta.size() &&
            std::string_view(t->text).ends_with(u.delta)) {
            open_->delta += u.delta;
            open_->block_size = t->text.size();
            ++merged_;
            return true;
        }
    }
    freeze();
    // Start an open update on the block this delta extended: the last text block that ends
    // with it (a wrong guess only means the next update is not merged).
    for (std::size_t i = m.content.size(); i-- > 0;) {
        const text_block* t = text_at(m, i);
        if (!t || !std::string_view(t->text).ends_with(u.delta)) continue;
        open_ = open_update{u.message, u.delta, i, t->text.size(), m.content.size()};
        return true;
    }
    return false;
}

void output_queue::freeze() {
    if (!open_) return;
    message_update_event u{std::move(open_->msg), std::move(open_->delta)};
    open_.reset();
    const std::size_t before = pending_.size();
    const event e{std::move(u)};
    append_json(pending_, e);
    pending_.push_back('\n');
    last_update_line_ = pending_.size() - before;
}

void output_queue::take(std::string& out) {
    freeze();
    out.swap(pending_);
    pending_.clear();
    in_flight_ = out.size();
}

void output_queue::clear() noexcept {
    open_.reset();
    pending_.clear();
}

std::size_t output_queue::bytes() const noexcept {
    std::size_t n = pending_.size() + in_flight_;
    if (open_) n += last_update_line_ + 2 * open_->delta.size();
    return n;
}

}  // namespace coagent::rpc

// The RPC output queue's merging rule (see rpc_output_queue.hpp).

#include <coagent/modes/rpc_output_queue.hpp>

#include <algorithm>
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
        const std::size_t block = locate(*u);
        // only text deltas merge (a merged update is written as a text_delta)
        if (u->kind == delta_kind::text && bytes() > limits_.merge_above && try_merge(*u, block))
            return;
        freeze();
        const std::size_t before = pending_.size();
        append_json(pending_, e);
        pending_.push_back('\n');
        last_update_line_ = pending_.size() - before;
        return;
    }
    if (const auto* s = std::get_if<message_start_event>(&e); s && s->message) track(s->message);
    freeze();
    append_json(pending_, e);
    pending_.push_back('\n');
}

void output_queue::track(const message_ptr& m) {
    tracked_ = m;
    sizes_.clear();
    for (std::size_t i = 0; i < m->content.size(); ++i) {
        const text_block* t = text_at(*m, i);
        sizes_.push_back(t ? t->text.size() : 0);
    }
    last_block_ = npos;
}

std::size_t output_queue::locate(const message_update_event& u) {
    const message& m = *u.message;
    if (u.message != tracked_) {
        track(u.message);  // a message seen first here: its first update is not placed
        return npos;
    }
    // One block grows per update. The common case first: the block of the last update grew by
    // this delta, and no block was added.
    if (last_block_ != npos && m.content.size() == sizes_.size()) {
        const text_block* t = text_at(m, last_block_);
        if (t && t->text.size() == sizes_[last_block_] + u.delta.size()) {
            sizes_[last_block_] = t->text.size();
            return last_block_;
        }
    }
    // Else the known block that changed (exactly one, by the delta's size), or the one block
    // added since; otherwise unknown (not merged).
    std::size_t found = npos, changed = 0;
    const std::size_t known = std::min(sizes_.size(), m.content.size());
    for (std::size_t i = 0; i < known; ++i) {
        const text_block* t = text_at(m, i);
        const std::size_t n = t ? t->text.size() : 0;
        if (n == sizes_[i]) continue;
        ++changed;
        if (n == sizes_[i] + u.delta.size()) found = i;
    }
    if (changed > 1) found = npos;
    if (changed == 0 && m.content.size() == sizes_.size() + 1) {
        const text_block* t = text_at(m, sizes_.size());
        if (t && std::string_view(t->text).ends_with(u.delta)) found = sizes_.size();
    }
    track(u.message);
    last_block_ = found;
    return found;
}

bool output_queue::try_merge(const message_update_event& u, std::size_t block) {
    if (block == npos) return false;
    if (open_ && open_->msg == u.message && open_->block == block) {
        open_->delta += u.delta;
        ++merged_;
        return true;
    }
    freeze();
    open_ = open_update{u.message, u.delta, block};
    return true;
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

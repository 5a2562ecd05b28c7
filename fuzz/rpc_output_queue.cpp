// Fuzz target: the RPC output queue's merging rule (issue 16, modes/src/rpc_output_queue.cpp).
// The input is a program: each byte opens a text block, appends a delta to a block, queues
// another event or a response, takes the queue (a write), with the merge bound at 0 to 120
// bytes. Invariants: every line is JSON; each output message_update is one or more consecutive
// input updates of one block with nothing between them (its delta their concatenation, its
// message at least as far as its last one); responses and other events come out once each, in
// order; nothing is left once taken.

#include "fuzz_support.hpp"

#include <coagent/modes/rpc_output_queue.hpp>

#include <boost/json/parse.hpp>

#include <vector>

using namespace coagent;
namespace json = boost::json;

namespace {

struct item {
    bool update = false;
    std::size_t block = 0;  // input only
    std::string delta;      // update
    std::string text;       // input: the block's text after it; output: the line's message
    json::array content;    // output: the line's message content
    std::int64_t marker = 0;
};

void read_output(std::string_view out, std::vector<item>& items) {
    for (std::string_view rest = out; !rest.empty();) {
        const auto nl = rest.find('\n');
        FUZZ_CHECK(nl != std::string_view::npos);
        boost::system::error_code ec;
        const json::value v = json::parse(rest.substr(0, nl), ec);
        FUZZ_CHECK(!ec && v.is_object());
        rest.remove_prefix(nl + 1);
        const auto& o = v.get_object();
        const auto& type = o.at("type").as_string();
        item it;
        if (type == "message_update") {
            it.update = true;
            it.delta = o.at("assistantMessageEvent").at("delta").as_string();
            it.content = o.at("message").at("content").as_array();
        } else if (type == "response") {
            it.marker = o.at("id").as_int64();
        } else {
            FUZZ_CHECK(type == "turn_start");
            it.marker = -1;
        }
        items.push_back(std::move(it));
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    rpc::output_queue q({static_cast<std::size_t>(data[0] % 4) * 40, std::size_t{1} << 30});
    auto m = std::make_shared<message>();
    m->role = message_role::assistant;
    const message_ptr msg = m;
    std::vector<item> in, out;
    std::string taken;
    std::int64_t next_id = 0;
    for (std::size_t i = 1; i < size; ++i) {
        const std::uint8_t b = data[i];
        switch (b % 8) {
            case 0:
                if (m->content.size() < 8) m->content.emplace_back(text_block{});
                break;
            case 1:
            case 2:
            case 3:
            case 4: {
                if (m->content.empty()) break;
                const std::size_t block = (b >> 3) % m->content.size();
                std::string delta(1 + (b >> 6), static_cast<char>('a' + (b >> 2) % 26));
                auto& text = std::get<text_block>(m->content[block]).text;
                text += delta;
                item it;
                it.update = true;
                it.block = block;
                it.delta = delta;
                it.text = text;
                in.push_back(std::move(it));
                message_update_event u{msg, delta};
                const event e{std::move(u)};
                q.push_event(e);
                break;
            }
            case 5: {
                const event e{turn_start_event{}};
                q.push_event(e);
                item it;
                it.marker = -1;
                in.push_back(std::move(it));
                break;
            }
            case 6: {
                q.push_line("{\"type\":\"response\",\"id\":" + std::to_string(next_id) + "}\n");
                item it;
                it.marker = next_id++;
                in.push_back(std::move(it));
                break;
            }
            case 7:
                q.take(taken);
                q.written();
                read_output(taken, out);
                break;
        }
    }
    q.take(taken);
    q.written();
    read_output(taken, out);
    FUZZ_CHECK(!q.has_pending());
    FUZZ_CHECK(q.bytes() == 0);

    // match the output against the input
    std::size_t k = 0;
    for (const auto& o : out) {
        FUZZ_CHECK(k < in.size());
        if (!o.update) {
            FUZZ_CHECK(!in[k].update && in[k].marker == o.marker);
            ++k;
            continue;
        }
        FUZZ_CHECK(in[k].update);
        const std::size_t block = in[k].block;
        std::string joined;
        while (joined.size() < o.delta.size()) {
            FUZZ_CHECK(k < in.size() && in[k].update && in[k].block == block);
            joined += in[k].delta;
            ++k;
        }
        FUZZ_CHECK(joined == o.delta);
        // the line's message: that block at least as far as the last update merged into it
        FUZZ_CHECK(block < o.content.size());
        const std::string_view text = o.content[block].at("text").as_string();
        FUZZ_CHECK(text.starts_with(in[k - 1].text));
    }
    FUZZ_CHECK(k == in.size());
    return 0;
}

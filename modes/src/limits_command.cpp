// `coagent limits`: the shared limit state for an operator, and --clear (docs/limits.md).

#include <coagent/modes/app.hpp>
#include <coagent/modes/limits_command.hpp>
#include <coagent/modes/wait_text.hpp>
#include <coagent/providers/file_auth_storage.hpp>
#include <coagent/providers/redis_limit_store.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/session/settings_store.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/json/serialize.hpp>

#include <chrono>
#include <iostream>

namespace coagent {

limits_report make_limits_report(const limit_store& store,
                                 const std::vector<credential_block>& file_blocks,
                                 std::int64_t now_ms) {
    limits_report r;
    r.store = std::string(store.kind());
    r.connected = store.connected();
    for (const auto& b : store.credential_blocks(now_ms))
        r.blocks.push_back({b.provider, b.fingerprint, r.store, b.until_ms - now_ms});
    for (const auto& b : file_blocks)
        if (b.until_ms > now_ms)
            r.blocks.push_back({b.provider, b.fingerprint, "auth.json", b.until_ms - now_ms});
    for (auto c : store.model_cooldowns(now_ms)) {
        c.until_ms -= now_ms;
        r.cooldowns.push_back(std::move(c));
    }
    r.budgets = store.budget_levels();
    r.sessions = store.credential_leases();
    return r;
}

namespace {
std::string tokens_text(std::int64_t milli) {
    std::string s = std::to_string(milli / 1000);
    if (const std::int64_t frac = milli % 1000; frac != 0) {
        std::string f = std::to_string(1000 + frac).substr(1);
        while (f.back() == '0') f.pop_back();
        s += "." + f;
    }
    return s;
}
}  // namespace

std::string format_limits_text(const limits_report& r) {
    std::string out = "store: " + r.store;
    if (r.store == "redis")
        out += " at " + r.where + (r.connected ? " (connected)" : " (unavailable)");
    out += "\n\nblocked credentials:\n";
    if (r.blocks.empty()) out += "  none\n";
    for (const auto& b : r.blocks)
        out += "  " + b.provider + "  " + b.fingerprint + "  " + format_wait(b.left_ms) +
               " left  (" + b.source + ")\n";
    out += "\nmodel cooldowns:\n";
    if (r.cooldowns.empty()) out += "  none\n";
    for (const auto& c : r.cooldowns)
        out += "  " + c.model + "  " + format_wait(c.until_ms) + " left\n";
    out += "\nretry budget (tokens):\n";
    if (r.budgets.empty()) out += "  none used\n";
    for (const auto& b : r.budgets)
        out += "  " + b.provider + "  " + tokens_text(b.tokens_milli) + "\n";
    out += "\nactive sessions:\n";
    if (r.sessions.empty()) out += "  none\n";
    for (const auto& s : r.sessions)
        out += "  " + s.provider + "  " + s.fingerprint + "  " + std::to_string(s.sessions) + "\n";
    if (r.store == "local")
        out +=
            "\n(limits.store is \"local\": budgets, cooldowns and sessions live in each "
            "process; the blocks shown are auth.json's)\n";
    return out;
}

json::object limits_json(const limits_report& r) {
    json::object o;
    o["store"] = r.store;
    o["connected"] = r.connected;
    json::array blocks;
    for (const auto& b : r.blocks) {
        json::object e;
        e["provider"] = b.provider;
        e["fingerprint"] = b.fingerprint;
        e["leftMs"] = b.left_ms;
        e["source"] = b.source;
        blocks.push_back(std::move(e));
    }
    o["blockedCredentials"] = std::move(blocks);
    json::array cooldowns;
    for (const auto& c : r.cooldowns) {
        json::object e;
        e["model"] = c.model;
        e["leftMs"] = c.until_ms;
        cooldowns.push_back(std::move(e));
    }
    o["modelCooldowns"] = std::move(cooldowns);
    json::array budgets;
    for (const auto& b : r.budgets) {
        json::object e;
        e["provider"] = b.provider;
        e["tokens"] = static_cast<double>(b.tokens_milli) / 1000.0;
        budgets.push_back(std::move(e));
    }
    o["budgets"] = std::move(budgets);
    json::array sessions;
    for (const auto& s : r.sessions) {
        json::object e;
        e["provider"] = s.provider;
        e["fingerprint"] = s.fingerprint;
        e["sessions"] = s.sessions;
        sessions.push_back(std::move(e));
    }
    o["activeSessions"] = std::move(sessions);
    return o;
}

int run_limits_command(bool json_out, bool clear, const std::optional<std::string>& provider) {
    try {
        const auto dir = coagent_dir();
        const auto store_settings = settings_store::load(
            global_settings_path(dir), project_settings_path(std::filesystem::current_path()));
        const limits_settings& ls = store_settings.current().limits_or_default();
        file_auth_storage auth(dir / "auth.json");

        boost::asio::io_context io;
        std::shared_ptr<limit_store> store;
        std::shared_ptr<redis_limit_store> redis;
        std::string where;
        if (ls.store == limit_store_kind::redis) {
            redis_limit_store_options ro = redis_store_options(ls);
            where = ro.endpoint.host + ":" + std::to_string(ro.endpoint.port);
            redis = std::make_shared<redis_limit_store>(io.get_executor(), std::move(ro));
            store = redis;
            // connected once the first re-read is done (a few ms; the store's own timeout is
            // 200 ms a step)
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            while (!redis->connected() && std::chrono::steady_clock::now() < deadline)
                io.run_one_for(std::chrono::milliseconds(20));
            if (!redis->connected()) {
                redis->stop();
                io.run_for(std::chrono::milliseconds(500));
                std::cerr << "coagent limits: redis at " << where
                          << " is unavailable: nothing to show or clear\n";
                return 1;
            }
        } else {
            store = std::make_shared<local_limit_store>();  // this process's: empty
        }

        if (clear) {
            const std::optional<std::string_view> p =
                provider ? std::optional<std::string_view>(*provider) : std::nullopt;
            if (redis) {
                store->clear(p);
                redis->stop();  // sends the clear, then closes
                io.run_for(std::chrono::seconds(1));
                std::cout << "redis at " << where << ": cleared the limits of "
                          << (provider ? "provider " + *provider : std::string("every provider"))
                          << "\n";
            }
            std::vector<std::pair<std::string, std::size_t>> lifted;
            try {
                lifted = auth.unblock(p);
            } catch (const settings_error&) {
                if (!provider) throw;  // a provider without credentials there: nothing to lift
            }
            if (lifted.empty())
                std::cout << "no blocked credentials in " << auth.file().string() << "\n";
            for (const auto& [name, n] : lifted)
                std::cout << name << ": " << n << (n == 1 ? " block" : " blocks") << " lifted in "
                          << auth.file().string() << "\n";
            return 0;
        }

        const std::int64_t now = wall_clock_ms();
        limits_report r = make_limits_report(*store, auth.blocks(), now);
        r.where = where;
        if (redis) {
            redis->stop();
            io.run_for(std::chrono::milliseconds(500));
        }
        if (json_out)
            std::cout << json::serialize(limits_json(r)) << "\n";
        else
            std::cout << format_limits_text(r);
        return 0;
    } catch (const settings_error& e) {
        std::cerr << "coagent limits: " << e.what() << "\n";
        return 2;
    }
}

}  // namespace coagent

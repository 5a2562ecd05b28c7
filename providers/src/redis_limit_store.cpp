// The Redis limit store (docs/limits.md): a local copy of the budgets that decides at once, and
// two Asio connections on the caller's executor — one for commands (Lua scripts, the re-read),
// one for the pub/sub subscription. hiredis formats the commands and parses the replies.

#include <coagent/providers/redis_limit_store.hpp>
#include <coagent/runtime/message.hpp>
#include <coagent/session/auth_storage.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <spdlog/logger.h>

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include <unistd.h>

namespace coagent {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

// KEYS[1] the budget hash; ARGV: provider, maxTokens (thousandths), delta (thousandths), channel.
// The bucket of a provider the hash does not hold yet is full. Publishes "<level> <provider>".
constexpr std::string_view budget_script = R"lua(
local max = tonumber(ARGV[2])
local t = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or ARGV[2]) + tonumber(ARGV[3])
if t < 0 then t = 0 end
if t > max then t = max end
redis.call('HSET', KEYS[1], ARGV[1], t)
redis.call('PUBLISH', ARGV[4], t .. ' ' .. ARGV[1])
return t
)lua";

// KEYS[1] a hash of blocks or cooldowns; ARGV: field, duration (ms), the longest a stored end
// may lie ahead (ms), channel, the message's tag ("c" a credential, "m" a model). Dates the end
// with Redis's clock (TIME), keeps a later end already stored (clamped), drops the ends that
// passed, publishes "<tag> <until> <now> <field>" and returns {until, now}.
constexpr std::string_view until_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local untilv = now + tonumber(ARGV[2])
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if old > now + tonumber(ARGV[3]) then old = now + tonumber(ARGV[3]) end
if old > untilv then untilv = old end
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if (tonumber(all[i + 1]) or 0) <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', untilv))
redis.call('PUBLISH', ARGV[4], ARGV[5] .. ' ' .. string.format('%d', untilv) .. ' ' ..
  string.format('%d', now) .. ' ' .. ARGV[1])
return {untilv, now}
)lua";

// KEYS: the budget hash, the blocks, the cooldowns; ARGV: provider ("": every one), channel.
// Forgets the provider's budget, its credentials' blocks and its models' cooldowns; publishes
// "- <provider>".
constexpr std::string_view clear_script = R"lua(
local p = ARGV[1]
if p == '' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
else
  redis.call('HDEL', KEYS[1], p)
  for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do
    if string.sub(f, 1, #p + 1) == p .. ' ' then redis.call('HDEL', KEYS[2], f) end
  end
  for _, f in ipairs(redis.call('HKEYS', KEYS[3])) do
    if string.sub(f, 1, #p + 1) == p .. '/' then redis.call('HDEL', KEYS[3], f) end
  end
end
redis.call('PUBLISH', ARGV[2], '- ' .. p)
return 1
)lua";

// The credential pool's leases. KEYS[1] the leases hash, fields "<provider> <fingerprint>
// <process>" → "<sessions> <expires>"; ARGV: process, ttl (ms), channel, publish ("1"/"0"), then
// pairs "<provider> <fingerprint>", sessions. Replaces this process's fields (expiring ttl ms
// from Redis's clock), drops the expired ones of every process (a process that died), and
// publishes "l <process>" when asked (the process's counts changed).
constexpr std::string_view lease_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me = ' ' .. ARGV[1]
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local exp = tonumber(string.match(all[i + 1], ' (%d+)$') or '0') or 0
  if string.sub(all[i], -#me) == me or exp <= now then redis.call('HDEL', KEYS[1], all[i]) end
end
for i = 5, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i] .. me,
    ARGV[i + 1] .. ' ' .. string.format('%d', now + tonumber(ARGV[2])))
end
if ARGV[4] == '1' then redis.call('PUBLISH', ARGV[3], 'l ' .. ARGV[1]) end
return 1
)lua";

// Park probes (§11.27, §11.37). KEYS[1] the account's claim, KEYS[2] its last outcome ("<tag>
// <until> <at>", Redis's clock); ARGV: owner (this process), ttl (ms), age (ms: how long ago the
// asking session parked). An outcome reported since the session parked answers it (a limit whose
// new reset has passed no longer does); otherwise the
// claim is taken when free (or already this process's: its expiry is renewed). Returns {"o",
// outcome, now}, {"mine", owner, now} or {"theirs", holder, now}.
constexpr std::string_view claim_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local o = redis.call('GET', KEYS[2])
if o then
  local tag, u, at = string.match(o, '^(%S+) (%d+) (%d+)$')
  u = tonumber(u or '0') or 0
  at = tonumber(at or '0') or 0
  if at >= now - tonumber(ARGV[3]) and not (tag == 'l' and u <= now) then
    return {'o', o, now}
  end
end
local holder = redis.call('GET', KEYS[1])
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {'mine', ARGV[1], now}
end
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {'mine', holder, now}
end
return {'theirs', holder, now}
)lua";

// A probe ended. KEYS as above; ARGV: owner, tag ("s" succeeded, "l" limited, "w" switched, "r"
// released), the new reset's distance (ms, limited), how long the outcome is kept (ms), channel,
// account. Frees the claim when it is the owner's, stores the outcome (not a release) dated by
// Redis's clock and publishes "p <owner> <tag> <until> <now> <account>".
constexpr std::string_view probe_done_script = R"lua(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
local untilv = 0
if ARGV[2] == 'l' then untilv = now + tonumber(ARGV[3]) end
local stamp = string.format('%d', untilv) .. ' ' .. string.format('%d', now)
if ARGV[2] ~= 'r' then redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. stamp, 'PX', ARGV[4]) end
redis.call('PUBLISH', ARGV[5], 'p ' .. ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. stamp .. ' ' .. ARGV[6])
return 1
)lua";

// The claims of this process's probes in flight: KEYS the claims; ARGV: owner, ttl (ms).
constexpr std::string_view claim_refresh_script = R"lua(
for _, k in ipairs(KEYS) do
  if redis.call('GET', k) == ARGV[1] then redis.call('PEXPIRE', k, ARGV[2]) end
end
return 1
)lua";

char probe_tag(park_probe_outcome o) noexcept {
    switch (o) {
        case park_probe_outcome::succeeded:
            return 's';
        case park_probe_outcome::limited:
            return 'l';
        case park_probe_outcome::switched:
            return 'w';
        case park_probe_outcome::released:
            break;
    }
    return 'r';
}

std::optional<park_probe_outcome> probe_outcome_of(std::string_view tag) noexcept {
    if (tag == "s") return park_probe_outcome::succeeded;
    if (tag == "l") return park_probe_outcome::limited;
    if (tag == "w") return park_probe_outcome::switched;
    if (tag == "r") return park_probe_outcome::released;
    return std::nullopt;
}

// A name for this process in the leases: host, pid and 32 random bits.
std::string process_name() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    std::random_device rd;
    char tail[16];
    std::snprintf(tail, sizeof tail, "%08x", static_cast<unsigned>(rd()));
    std::string name =
        std::string(host[0] ? host : "host") + ":" + std::to_string(::getpid()) + ":" + tail;
    std::replace(name.begin(), name.end(), ' ', '_');
    return name;
}

struct reply_deleter {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

struct reader_deleter {
    void operator()(redisReader* r) const noexcept { redisReaderFree(r); }
};

std::string_view type_name(int t) noexcept {
    switch (t) {
        case REDIS_REPLY_STRING:
            return "string";
        case REDIS_REPLY_ARRAY:
            return "array";
        case REDIS_REPLY_INTEGER:
            return "integer";
        case REDIS_REPLY_NIL:
            return "nil";
        case REDIS_REPLY_STATUS:
            return "status";
        case REDIS_REPLY_ERROR:
            return "error";
    }
    return "unknown";
}

// One command in RESP, formatted by hiredis.
std::string format_command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const auto& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
    }
    char* out = nullptr;
    const int n =
        redisFormatCommandArgv(&out, static_cast<int>(args.size()), argv.data(), lens.data());
    if (n < 0 || !out) return {};
    std::string s(out, static_cast<std::size_t>(n));
    redisFreeCommand(out);
    return s;
}

std::optional<std::int64_t> to_int(std::string_view s) {
    std::int64_t v = 0;
    const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    if (r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
    return v;
}

struct connection {
    explicit connection(const asio::any_io_executor& ex) : socket(ex) {}
    tcp::socket socket;
    std::unique_ptr<redisReader, reader_deleter> reader{redisReaderCreate()};
    std::array<char, 16384> buf{};
};
using connection_ptr = std::shared_ptr<connection>;

}  // namespace

struct redis_limit_store::state : std::enable_shared_from_this<state> {
    state(asio::any_io_executor e, redis_limit_store_options o)
        : ex(std::move(e)), opts(std::move(o)), wake(ex), sub_wake(ex) {
        where = opts.endpoint.host + ":" + std::to_string(opts.endpoint.port);
        key = opts.key_prefix + "{limits}:budget";
        blocks_key = opts.key_prefix + "{limits}:blocks";
        cooldowns_key = opts.key_prefix + "{limits}:cooldowns";
        chan = opts.key_prefix + "{limits}:events";
        leases_key = opts.key_prefix + "{limits}:leases";
        probe_key = opts.key_prefix + "{limits}:probe:";
        outcome_key = opts.key_prefix + "{limits}:probe-outcome:";
        me = process_name();
    }
    std::string probe_key, outcome_key;  // + the account
    park_probe_book probes{true};        // the park probes, shared through Redis (mutex)
    std::string leases_key, me;
    credential_leases_table own;                              // this process's sessions (mutex)
    std::map<std::string, std::int64_t, std::less<>> others;  // block key → others' sessions
    bool leases_dirty = false;             // own changed since the last send (mutex)
    std::atomic<bool> reread_soon{false};  // another process's leases changed

    asio::any_io_executor ex;
    redis_limit_store_options opts;
    std::string where, key, blocks_key, cooldowns_key, chan;

    enum class op_kind { budget, clear, block, cooldown, claim, probe_done };
    struct op {
        std::string provider;    // budget and clear (empty: every provider); the account of a
                                 // claim or a probe's end; the field otherwise
        std::int64_t delta = 0;  // budget: thousandths; block and cooldown: the duration (ms);
                                 // claim: the asking session's age; probe_done: the new reset's
                                 // distance (ms)
        std::int64_t max = 0;    // probe_done: how long the outcome is kept (ms)
        op_kind kind = op_kind::budget;
        char tag = 0;  // probe_done: the outcome
    };

    using until_map = std::map<std::string, std::int64_t, std::less<>>;

    mutable std::mutex mutex;
    std::map<std::string, std::int64_t, std::less<>> levels;  // the local copy (thousandths)
    until_map blocks;       // "<provider> <fingerprint>" → until (epoch ms, this process's clock)
    until_map cooldowns;    // "provider/model" → until
    std::vector<op> queue;  // failures and clears: sent at once
    std::map<std::string, op, std::less<>> deposits;  // successes: batched
    std::atomic<bool> up{false};
    std::atomic<bool> stopping{false};
    bool down_reported = false;  // on the executor only
    std::string sha;             // the budget script's, once loaded
    std::string until_sha;       // the until script's
    asio::steady_timer wake;
    asio::steady_timer sub_wake;  // the subscription's backoff (cancelled by stop)
    connection_ptr sub;           // the subscription's connection (closed by stop)
    connection_ptr cmd;           // the commands' connection (closed when stop's grace period ends)
    asio::steady_timer stop_timer{ex};

    // stop(): wake both loops; what is still queued has opts.timeout to go out, then both
    // connections are closed, whatever they are doing (no wait of theirs outlives it)
    void shut(bool final) {
        wake.cancel();
        sub_wake.cancel();
        boost::system::error_code ignored;
        if (sub) sub->socket.close(ignored);
        if (final && cmd) cmd->socket.close(ignored);
    }

    // the local copy's level of `provider` (a full bucket when new); with the mutex held
    std::int64_t& level_of(std::string_view provider, const retry_budget_settings& s) {
        auto it = levels.find(provider);
        if (it == levels.end())
            it = levels.emplace(std::string(provider), retry_budget::max_milli(s)).first;
        return it->second;
    }

    void poke() {
        asio::post(ex, [self = shared_from_this()] { self->wake.cancel(); });
    }

    // the level Redis reported for `provider`, with this process's deposits not yet sent
    void learn(std::string_view provider, std::int64_t level) {
        std::lock_guard lock(mutex);
        auto d = deposits.find(provider);
        const std::int64_t pending = d == deposits.end() ? 0 : d->second.delta;
        const std::int64_t max = d == deposits.end() ? INT64_MAX : d->second.max;
        auto it = levels.find(provider);
        if (it == levels.end()) it = levels.emplace(std::string(provider), 0).first;
        it->second = std::clamp<std::int64_t>(level + pending, 0, max);
    }
    void forget(std::string_view provider) {
        std::lock_guard lock(mutex);
        if (provider.empty()) {
            levels.clear();
            blocks.clear();
            cooldowns.clear();
            return;
        }
        if (auto it = levels.find(provider); it != levels.end()) levels.erase(it);
        std::erase_if(blocks, [&](const auto& e) {
            return e.first.size() > provider.size() && e.first.starts_with(provider) &&
                   e.first[provider.size()] == ' ';
        });
        std::erase_if(cooldowns,
                      [&](const auto& e) { return model_of_provider(e.first, provider); });
    }
    // an end Redis dated `until` when its clock said `redis_now`, in this process's clock
    void learn_until(until_map& m, std::string_view field, std::int64_t until,
                     std::int64_t redis_now) {
        const std::int64_t now = wall_clock_ms();
        const std::int64_t local = now + (until - redis_now);
        std::lock_guard lock(mutex);
        std::erase_if(m, [&](const auto& e) { return e.second <= now; });
        if (local <= now) return;
        auto [it, fresh] = m.emplace(std::string(field), local);
        if (!fresh) it->second = std::max(it->second, local);
    }

    // another process's probe ended ("<owner> <tag> <until> <at> <account>")
    void learn_probe(std::string_view text) {
        std::array<std::string_view, 4> f;
        std::size_t pos = 0;
        for (auto& part : f) {
            const auto sp = text.find(' ', pos);
            if (sp == std::string_view::npos) {
                opts.logger->error("limits: redis: unexpected message on channel {}", chan);
                return;
            }
            part = text.substr(pos, sp - pos);
            pos = sp + 1;
        }
        const std::string_view account = text.substr(pos);
        const auto outcome = probe_outcome_of(f[1]);
        const auto until = to_int(f[2]);
        const auto at = to_int(f[3]);
        if (!outcome || !until || !at || account.empty()) {
            opts.logger->error("limits: redis: unexpected message on channel {}", chan);
            return;
        }
        if (f[0] == me) return;  // this process's own: its book has it
        const std::int64_t now = wall_clock_ms();
        std::lock_guard lock(mutex);
        probes.on_remote_done(account, *outcome, *until == 0 ? 0 : now + (*until - *at), now);
    }

    void report_down(const std::string& why) {
        up = false;
        if (down_reported || stopping) return;
        down_reported = true;
        opts.logger->warn("limits: redis at {} unavailable ({}); using local state", where, why);
    }
    void report_up() {
        up = true;
        if (!down_reported) return;
        down_reported = false;
        opts.logger->warn("limits: redis at {} is back", where);
    }

    // ---- I/O -------------------------------------------------------------------------------

    // Reads one reply; with a deadline (`timeout` > 0) the socket is closed when it passes.
    static asio::awaitable<reply_ptr> read_reply(connection_ptr c,
                                                 std::chrono::milliseconds timeout,
                                                 std::string& error) {
        auto timed_out = std::make_shared<bool>(false);
        asio::steady_timer deadline(c->socket.get_executor());
        if (timeout.count() > 0) {
            deadline.expires_after(timeout);
            deadline.async_wait([c, timed_out](boost::system::error_code ec) {
                if (ec) return;
                *timed_out = true;
                boost::system::error_code ignored;
                c->socket.close(ignored);
            });
        }
        for (;;) {
            void* r = nullptr;
            if (redisReaderGetReply(c->reader.get(), &r) != REDIS_OK) {
                error = "a reply hiredis cannot parse";
                co_return nullptr;
            }
            if (r) {
                deadline.cancel();
                co_return reply_ptr(static_cast<redisReply*>(r));
            }
            auto [ec, n] =
                co_await c->socket.async_read_some(asio::buffer(c->buf), tuple_awaitable);
            if (ec) {
                error = *timed_out ? "no answer within " + std::to_string(timeout.count()) + " ms"
                                   : ec.message();
                co_return nullptr;
            }
            redisReaderFeed(c->reader.get(), c->buf.data(), n);
        }
    }

    asio::awaitable<reply_ptr> command(connection_ptr c, std::vector<std::string> args,
                                       std::string& error) {
        const std::string wire = format_command(args);
        auto [ec, n] = co_await asio::async_write(c->socket, asio::buffer(wire), tuple_awaitable);
        (void)n;
        if (ec) {
            error = ec.message();
            co_return nullptr;
        }
        co_return co_await read_reply(c, opts.timeout, error);
    }

    // connect, AUTH, SELECT; false with `error` when it did not work
    asio::awaitable<bool> open(connection_ptr c, std::string& error) {
        tcp::resolver resolver(ex);
        auto [rec, results] = co_await resolver.async_resolve(
            opts.endpoint.host, std::to_string(opts.endpoint.port), tuple_awaitable);
        if (rec) {
            error = rec.message();
            co_return false;
        }
        auto timed_out = std::make_shared<bool>(false);
        asio::steady_timer deadline(ex);
        deadline.expires_after(opts.timeout);
        deadline.async_wait([c, timed_out](boost::system::error_code ec) {
            if (ec) return;
            *timed_out = true;
            boost::system::error_code ignored;
            c->socket.close(ignored);
        });
        auto [cec, ep] = co_await asio::async_connect(c->socket, results, tuple_awaitable);
        (void)ep;
        deadline.cancel();
        if (cec) {
            error = *timed_out ? "no answer within " + std::to_string(opts.timeout.count()) + " ms"
                               : cec.message();
            co_return false;
        }
        if (opts.endpoint.password) {
            std::vector<std::string> auth{"AUTH"};
            if (!opts.endpoint.user.empty()) auth.push_back(opts.endpoint.user);
            auth.push_back(*opts.endpoint.password);
            auto r = co_await command(c, std::move(auth), error);
            if (!r) co_return false;
            if (r->type == REDIS_REPLY_ERROR) {
                error = std::string(r->str, r->len);
                co_return false;
            }
        }
        std::vector<std::string> check{"PING"};
        if (opts.endpoint.db != 0) check = {"SELECT", std::to_string(opts.endpoint.db)};
        auto r = co_await command(c, std::move(check), error);
        if (!r) co_return false;
        if (r->type == REDIS_REPLY_ERROR) {  // NOAUTH, a bad database
            error = std::string(r->str, r->len);
            co_return false;
        }
        co_return true;
    }

    // EVALSHA, EVAL when the script is not in the server's cache; false: the connection failed
    asio::awaitable<bool> apply(connection_ptr c, op o, std::string& error) {
        if (o.kind == op_kind::claim) co_return co_await claim(c, std::move(o), error);
        if (o.kind == op_kind::probe_done) {
            std::vector<std::string> args{"EVAL",
                                          std::string(probe_done_script),
                                          "2",
                                          probe_key + o.provider,
                                          outcome_key + o.provider,
                                          me,
                                          std::string(1, o.tag),
                                          std::to_string(o.delta),
                                          std::to_string(o.max),
                                          chan,
                                          o.provider};
            auto r = co_await command(c, std::move(args), error);
            if (r && r->type == REDIS_REPLY_ERROR)
                opts.logger->error("limits: redis: the probe-end script on key {}{}: {}",
                                   outcome_key, o.provider, std::string(r->str, r->len));
            co_return r != nullptr;
        }
        if (o.kind == op_kind::clear) {
            std::vector<std::string> args{
                "EVAL", std::string(clear_script), "3", key, blocks_key, cooldowns_key, o.provider,
                chan};
            auto r = co_await command(c, std::move(args), error);
            if (r && r->type == REDIS_REPLY_ERROR)
                opts.logger->error("limits: redis: clearing {}: {}", key,
                                   std::string(r->str, r->len));
            co_return r != nullptr;
        }
        if (o.kind == op_kind::block || o.kind == op_kind::cooldown) {
            const bool block = o.kind == op_kind::block;
            const std::string& hash = block ? blocks_key : cooldowns_key;
            std::vector<std::string> args{"EVALSHA",
                                          until_sha.empty() ? "0" : until_sha,
                                          "1",
                                          hash,
                                          o.provider,
                                          std::to_string(o.delta),
                                          std::to_string(o.max),
                                          chan,
                                          block ? "c" : "m"};
            auto r = co_await command(c, args, error);
            if (!r) co_return false;
            if (r->type == REDIS_REPLY_ERROR &&
                std::string_view(r->str, r->len).starts_with("NOSCRIPT")) {
                args[0] = "EVAL";
                args[1] = std::string(until_script);
                r = co_await command(c, args, error);
                if (!r) co_return false;
            }
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
                r->element[0]->type != REDIS_REPLY_INTEGER ||
                r->element[1]->type != REDIS_REPLY_INTEGER) {
                opts.logger->error(
                    "limits: redis: unexpected {} reply to the {} script on key {}{}",
                    type_name(r->type), block ? "block" : "cooldown", hash,
                    r->type == REDIS_REPLY_ERROR ? ": " + std::string(r->str, r->len)
                                                 : std::string());
                co_return true;
            }
            learn_until(block ? blocks : cooldowns, o.provider, r->element[0]->integer,
                        r->element[1]->integer);
            co_return true;
        }
        std::vector<std::string> args{"EVALSHA",
                                      sha.empty() ? "0" : sha,
                                      "1",
                                      key,
                                      o.provider,
                                      std::to_string(o.max),
                                      std::to_string(o.delta),
                                      chan};
        auto r = co_await command(c, args, error);
        if (!r) co_return false;
        if (r->type == REDIS_REPLY_ERROR &&
            std::string_view(r->str, r->len).starts_with("NOSCRIPT")) {
            args[0] = "EVAL";
            args[1] = std::string(budget_script);
            r = co_await command(c, args, error);
            if (!r) co_return false;
        }
        if (r->type != REDIS_REPLY_INTEGER) {
            opts.logger->error(
                "limits: redis: unexpected {} reply to the budget script on key {}{}",
                type_name(r->type), key,
                r->type == REDIS_REPLY_ERROR ? ": " + std::string(r->str, r->len) : std::string());
            co_return true;
        }
        learn(o.provider, r->integer);
        co_return true;
    }

    // a park probe's claim (the claim script); the answer goes to the book
    asio::awaitable<bool> claim(connection_ptr c, op o, std::string& error) {
        std::vector<std::string> args{"EVAL",
                                      std::string(claim_script),
                                      "2",
                                      probe_key + o.provider,
                                      outcome_key + o.provider,
                                      me,
                                      std::to_string(park_claim_ttl_ms),
                                      std::to_string(o.delta)};
        auto r = co_await command(c, std::move(args), error);
        park_claim_answer ans;  // failed unless the reply says otherwise
        const bool ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
                        r->element[0]->type == REDIS_REPLY_STRING &&
                        r->element[1]->type == REDIS_REPLY_STRING &&
                        r->element[2]->type == REDIS_REPLY_INTEGER;
        if (r && !ok)
            opts.logger->error(
                "limits: redis: unexpected {} reply to the claim script on key {}{}{}",
                type_name(r->type), probe_key, o.provider,
                r->type == REDIS_REPLY_ERROR ? ": " + std::string(r->str, r->len) : std::string());
        const std::int64_t local_now = wall_clock_ms();
        if (ok) {
            const std::string_view what(r->element[0]->str, r->element[0]->len);
            const std::string_view value(r->element[1]->str, r->element[1]->len);
            const std::int64_t redis_now = r->element[2]->integer;
            if (what == "mine") {
                ans.what = park_claim_answer::kind::mine;
            } else if (what == "theirs") {
                ans.what = park_claim_answer::kind::theirs;
            } else if (what == "o") {  // "<tag> <until> <at>"
                const auto s1 = value.find(' ');
                const auto s2 = s1 == std::string_view::npos ? s1 : value.find(' ', s1 + 1);
                const auto outcome = s1 == std::string_view::npos
                                         ? std::nullopt
                                         : probe_outcome_of(value.substr(0, s1));
                const auto until = s2 == std::string_view::npos
                                       ? std::nullopt
                                       : to_int(value.substr(s1 + 1, s2 - s1 - 1));
                const auto at =
                    s2 == std::string_view::npos ? std::nullopt : to_int(value.substr(s2 + 1));
                if (outcome && until && at) {
                    ans.what = park_claim_answer::kind::outcome;
                    ans.outcome = *outcome;
                    ans.at = local_now - (redis_now - *at);
                    ans.until = *until == 0 ? 0 : local_now + (*until - redis_now);
                } else {
                    opts.logger->error("limits: redis: unexpected value in key {}{}: {}",
                                       outcome_key, o.provider, std::string(value));
                }
            }
        }
        {
            std::lock_guard lock(mutex);
            probes.on_claim_answer(o.provider, ans, local_now);
        }
        co_return r != nullptr;
    }

    // keeps the claims of this process's probes in flight from lapsing
    asio::awaitable<bool> refresh_claims(connection_ptr c, std::string& error) {
        std::vector<std::string> held;
        {
            std::lock_guard lock(mutex);
            held = probes.held_claims();
        }
        if (held.empty()) co_return true;
        std::vector<std::string> args{"EVAL", std::string(claim_refresh_script),
                                      std::to_string(held.size())};
        for (const auto& a : held) args.push_back(probe_key + a);
        args.push_back(me);
        args.push_back(std::to_string(park_claim_ttl_ms));
        auto r = co_await command(c, std::move(args), error);
        if (r && r->type == REDIS_REPLY_ERROR)
            opts.logger->error("limits: redis: the claim refresh script: {}",
                               std::string(r->str, r->len));
        co_return r != nullptr;
    }

    // this process's leases, all of them (a change, or the refresh); false: the connection failed
    asio::awaitable<bool> send_leases(connection_ptr c, std::string& error) {
        std::vector<std::string> args{"EVAL", std::string(lease_script),
                                      "1",    leases_key,
                                      me,     std::to_string(opts.lease_ttl.count()),
                                      chan};
        {
            std::lock_guard lock(mutex);
            args.push_back(leases_dirty ? "1" : "0");
            leases_dirty = false;
            for (const auto& [k, n] : own.counts()) {
                args.push_back(k);
                args.push_back(std::to_string(n));
            }
        }
        auto r = co_await command(c, std::move(args), error);
        if (!r) {
            std::lock_guard lock(mutex);
            leases_dirty = true;
            co_return false;
        }
        if (r->type == REDIS_REPLY_ERROR)
            opts.logger->error(
                "limits: redis: unexpected error reply to the lease script on key "
                "{}: {}",
                leases_key, std::string(r->str, r->len));
        co_return true;
    }

    // the other processes' leases, as the hash says at `redis_now`
    asio::awaitable<bool> read_leases(connection_ptr c, std::int64_t redis_now,
                                      std::string& error) {
        std::vector<std::string> get{"HGETALL", leases_key};
        auto r = co_await command(c, std::move(get), error);
        if (!r) co_return false;
        if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
            opts.logger->error("limits: redis: unexpected {} reply to HGETALL on key {}",
                               type_name(r->type), leases_key);
            co_return true;
        }
        until_map fresh;
        const std::string mine = " " + me;
        for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply* f = r->element[i];
            const redisReply* v = r->element[i + 1];
            if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING) continue;
            const std::string_view field(f->str, f->len);
            const std::string_view value(v->str, v->len);
            const auto last = field.rfind(' ');
            const auto sp = value.find(' ');
            const auto n =
                sp == std::string_view::npos ? std::nullopt : to_int(value.substr(0, sp));
            const auto exp =
                sp == std::string_view::npos ? std::nullopt : to_int(value.substr(sp + 1));
            if (last == std::string_view::npos || !n || !exp) {
                opts.logger->error("limits: redis: unexpected value in key {} (field {})",
                                   leases_key, std::string(field));
                continue;
            }
            if (field.ends_with(mine) || *exp <= redis_now) continue;
            fresh[std::string(field.substr(0, last))] += *n;
        }
        std::lock_guard lock(mutex);
        others = std::move(fresh);
        co_return true;
    }

    // the full re-read (HGETALL); false: the connection failed
    asio::awaitable<bool> resync(connection_ptr c, std::string& error) {
        std::vector<std::string> args{"HGETALL", key};
        auto r = co_await command(c, std::move(args), error);
        if (!r) co_return false;
        const bool budget_ok = r->type == REDIS_REPLY_ARRAY && r->elements % 2 == 0;
        if (!budget_ok)
            opts.logger->error("limits: redis: unexpected {} reply to HGETALL on key {}",
                               type_name(r->type), key);
        for (std::size_t i = 0; budget_ok && i + 1 < r->elements; i += 2) {
            const redisReply* f = r->element[i];
            const redisReply* v = r->element[i + 1];
            const auto level = v->type == REDIS_REPLY_STRING
                                   ? to_int(std::string_view(v->str, v->len))
                                   : std::nullopt;
            if (f->type != REDIS_REPLY_STRING || !level) {
                opts.logger->error(
                    "limits: redis: unexpected value in key {} (field {})", key,
                    f->type == REDIS_REPLY_STRING ? std::string(f->str, f->len) : std::string("?"));
                continue;
            }
            learn(std::string_view(f->str, f->len), *level);
        }
        std::vector<std::string> time{"TIME"};
        r = co_await command(c, std::move(time), error);
        if (!r) co_return false;
        std::int64_t redis_now = 0;
        if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
            r->element[0]->type == REDIS_REPLY_STRING &&
            r->element[1]->type == REDIS_REPLY_STRING) {
            const auto sec = to_int(std::string_view(r->element[0]->str, r->element[0]->len));
            const auto usec = to_int(std::string_view(r->element[1]->str, r->element[1]->len));
            if (sec && usec) redis_now = *sec * 1000 + *usec / 1000;
        }
        if (redis_now == 0) {
            opts.logger->error("limits: redis: unexpected {} reply to TIME", type_name(r->type));
            co_return true;
        }
        for (const bool block : {true, false}) {
            const std::string& hash = block ? blocks_key : cooldowns_key;
            std::vector<std::string> get{"HGETALL", hash};
            r = co_await command(c, std::move(get), error);
            if (!r) co_return false;
            if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0) {
                opts.logger->error("limits: redis: unexpected {} reply to HGETALL on key {}",
                                   type_name(r->type), hash);
                continue;
            }
            for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
                const redisReply* f = r->element[i];
                const redisReply* v = r->element[i + 1];
                const auto until = v->type == REDIS_REPLY_STRING
                                       ? to_int(std::string_view(v->str, v->len))
                                       : std::nullopt;
                if (f->type != REDIS_REPLY_STRING || !until) {
                    opts.logger->error("limits: redis: unexpected value in key {} (field {})", hash,
                                       f->type == REDIS_REPLY_STRING ? std::string(f->str, f->len)
                                                                     : std::string("?"));
                    continue;
                }
                learn_until(block ? blocks : cooldowns, std::string_view(f->str, f->len), *until,
                            redis_now);
            }
        }
        co_return co_await read_leases(c, redis_now, error);
    }

    asio::awaitable<void> pause(std::chrono::milliseconds d) {
        if (stopping) co_return;
        wake.expires_after(d);
        co_await wake.async_wait(tuple_awaitable);
    }

    std::vector<op> take(bool deposits_due) {
        std::lock_guard lock(mutex);
        std::vector<op> out = std::move(queue);
        queue.clear();
        if (deposits_due) {
            for (auto& [p, o] : deposits) out.push_back(std::move(o));
            deposits.clear();
        }
        return out;
    }
    bool idle() const {
        std::lock_guard lock(mutex);
        return queue.empty() && deposits.empty() && !leases_dirty;
    }
    bool has_queue() const {
        std::lock_guard lock(mutex);
        return !queue.empty() || leases_dirty || reread_soon;
    }
    bool has_deposits() const {
        std::lock_guard lock(mutex);
        return !deposits.empty();
    }

    static asio::awaitable<void> run_commands(std::shared_ptr<state> self) {
        auto backoff = std::chrono::milliseconds(100);
        while (!(self->stopping && self->idle())) {
            auto c = std::make_shared<connection>(self->ex);
            self->cmd = c;
            std::string error;
            bool ok = co_await self->open(c, error);
            if (ok) {
                std::vector<std::string> load{"SCRIPT", "LOAD", std::string(budget_script)};
                auto r = co_await self->command(c, std::move(load), error);
                ok = r != nullptr;
                if (r && r->type == REDIS_REPLY_STRING) self->sha.assign(r->str, r->len);
            }
            if (ok) {
                std::vector<std::string> load{"SCRIPT", "LOAD", std::string(until_script)};
                auto r = co_await self->command(c, std::move(load), error);
                ok = r != nullptr;
                if (r && r->type == REDIS_REPLY_STRING) self->until_sha.assign(r->str, r->len);
            }
            if (!ok) {
                self->report_down(error);
                if (self->stopping) break;
                co_await self->pause(backoff);
                backoff = std::min(backoff * 2, self->opts.max_backoff);
                continue;
            }
            // connected once the state is read: a decision after that sees what others set
            if (!co_await self->resync(c, error)) {
                self->report_down(error);
                if (self->stopping) break;
                co_await self->pause(backoff);
                backoff = std::min(backoff * 2, self->opts.max_backoff);
                continue;
            }
            self->report_up();
            backoff = std::chrono::milliseconds(100);
            auto next_resync = clock_type::now() + self->opts.resync;
            auto next_flush = clock_type::now() + self->opts.deposit_interval;
            for (;;) {
                const auto now = clock_type::now();
                if (now >= next_resync) {  // with the leases' and the probes' claims' refresh
                    if (!co_await self->send_leases(c, error)) break;
                    if (!co_await self->refresh_claims(c, error)) break;
                    if (!co_await self->resync(c, error)) break;
                    next_resync = now + self->opts.resync;
                } else if (self->reread_soon.exchange(false)) {
                    if (!co_await self->resync(c, error)) break;
                }
                bool dirty = false;
                {
                    std::lock_guard lock(self->mutex);
                    dirty = self->leases_dirty;
                }
                if (dirty && !co_await self->send_leases(c, error)) break;
                const bool due = self->stopping || now >= next_flush;
                if (due) next_flush = now + self->opts.deposit_interval;
                bool failed = false;
                for (auto& o : self->take(due))
                    if (!co_await self->apply(c, std::move(o), error)) {
                        failed = true;  // what was not sent stays in the local copy only
                        break;
                    }
                if (failed) break;
                if (self->stopping && self->idle()) {
                    boost::system::error_code ignored;
                    c->socket.close(ignored);
                    co_return;
                }
                // a poke() that came while a command ran found no wait to cancel: the queue
                // is checked here, so no update waits for the next re-read
                if (!self->has_queue() && !self->stopping) {
                    self->wake.expires_at(self->has_deposits() ? std::min(next_resync, next_flush)
                                                               : next_resync);
                    co_await self->wake.async_wait(tuple_awaitable);
                }
            }
            self->report_down(error);
        }
    }

    static asio::awaitable<void> run_subscription(std::shared_ptr<state> self) {
        auto backoff = std::chrono::milliseconds(100);
        while (!self->stopping) {
            auto c = std::make_shared<connection>(self->ex);
            self->sub = c;
            if (self->stopping) break;
            std::string error;
            bool ok = co_await self->open(c, error);
            if (ok) {
                std::vector<std::string> subscribe{"SUBSCRIBE", self->chan};
                const std::string wire = format_command(subscribe);
                auto [ec, n] =
                    co_await asio::async_write(c->socket, asio::buffer(wire), tuple_awaitable);
                (void)n;
                ok = !ec;
            }
            while (ok && !self->stopping) {
                auto r = co_await read_reply(c, std::chrono::milliseconds(0), error);
                if (!r) break;
                if (r->type != REDIS_REPLY_ARRAY || r->elements != 3 ||
                    r->element[0]->type != REDIS_REPLY_STRING ||
                    std::string_view(r->element[0]->str, r->element[0]->len) != "message")
                    continue;  // the subscribe confirmation
                const redisReply* payload = r->element[2];
                if (payload->type != REDIS_REPLY_STRING) continue;
                const std::string_view text(payload->str, payload->len);
                const auto space = text.find(' ');
                if (space == std::string_view::npos) continue;
                const std::string_view provider = text.substr(space + 1);
                const std::string_view tag = text.substr(0, space);
                if (tag == "c" || tag == "m") {  // "<tag> <until> <now> <field>"
                    const auto s2 = provider.find(' ');
                    const auto s3 = s2 == std::string_view::npos ? s2 : provider.find(' ', s2 + 1);
                    const auto until = s2 == std::string_view::npos
                                           ? std::nullopt
                                           : to_int(provider.substr(0, s2));
                    const auto at = s3 == std::string_view::npos
                                        ? std::nullopt
                                        : to_int(provider.substr(s2 + 1, s3 - s2 - 1));
                    if (until && at)
                        self->learn_until(tag == "c" ? self->blocks : self->cooldowns,
                                          provider.substr(s3 + 1), *until, *at);
                    else
                        self->opts.logger->error("limits: redis: unexpected message on channel {}",
                                                 self->chan);
                } else if (tag == "p") {  // "p <owner> <tag> <until> <at> <account>"
                    self->learn_probe(provider);
                } else if (tag == "l") {  // a process's leases changed: re-read them
                    if (provider != self->me) {
                        self->reread_soon = true;
                        asio::post(self->ex, [self] { self->wake.cancel(); });
                    }
                } else if (tag == "-") {
                    self->forget(provider);
                } else if (const auto level = to_int(tag)) {
                    self->learn(provider, *level);
                } else {
                    self->opts.logger->error("limits: redis: unexpected message on channel {}",
                                             self->chan);
                }
            }
            if (self->stopping) break;
            self->sub_wake.expires_after(backoff);  // (stop() cancels it)
            co_await self->sub_wake.async_wait(tuple_awaitable);
            backoff = std::min(backoff * 2, self->opts.max_backoff);
        }
    }
};

namespace {
struct log_exit {
    std::shared_ptr<spdlog::logger> logger;
    const char* what;
    void operator()(std::exception_ptr e) const {
        if (!e) return;
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            logger->error("limits: redis {}: {}", what, x.what());
        }
    }
};
}  // namespace

redis_limit_store::redis_limit_store(asio::any_io_executor ex, redis_limit_store_options opts)
    : state_(std::make_shared<state>(std::move(ex), std::move(opts))) {
    if (!state_->opts.logger) throw std::invalid_argument("redis_limit_store: no logger");
    const log_exit on_commands{state_->opts.logger, "commands"};
    const log_exit on_sub{state_->opts.logger, "subscription"};
    asio::co_spawn(state_->ex, state::run_commands(state_), on_commands);
    asio::co_spawn(state_->ex, state::run_subscription(state_), on_sub);
}

redis_limit_store::~redis_limit_store() {
    stop();
}

void redis_limit_store::stop() {
    {
        std::lock_guard lock(state_->mutex);  // this process leaves the pool
        if (!state_->own.counts().empty()) state_->leases_dirty = true;
        state_->own = credential_leases_table();
    }
    if (state_->stopping.exchange(true)) return;
    asio::post(state_->ex, [s = state_] {
        s->shut(false);
        s->stop_timer.expires_after(s->opts.timeout);
        s->stop_timer.async_wait([s](boost::system::error_code) { s->shut(true); });
    });
}

bool redis_limit_store::budget_on_failure(std::string_view provider,
                                          const retry_budget_settings& s) {
    bool allowed = false;
    {
        std::lock_guard lock(state_->mutex);
        std::int64_t& level = state_->level_of(provider, s);
        retry_budget b(s);
        b.set_tokens_milli(level);
        allowed = b.on_failure(s);
        level = b.tokens_milli();
        state_->queue.push_back(
            {std::string(provider), -1000, retry_budget::max_milli(s), state::op_kind::budget});
    }
    state_->poke();
    return allowed;
}

void redis_limit_store::budget_on_success(std::string_view provider,
                                          const retry_budget_settings& s) {
    std::lock_guard lock(state_->mutex);
    std::int64_t& level = state_->level_of(provider, s);
    retry_budget b(s);
    b.set_tokens_milli(level);
    b.on_success(s);
    level = b.tokens_milli();
    auto d = state_->deposits.find(provider);
    if (d == state_->deposits.end())
        d = state_->deposits.emplace(std::string(provider), state::op{std::string(provider)}).first;
    d->second.delta += s.token_ratio_milli;  // sent by the next flush: no wake-up here
    d->second.max = retry_budget::max_milli(s);
}

std::vector<budget_level> redis_limit_store::budget_levels() const {
    std::lock_guard lock(state_->mutex);
    std::vector<budget_level> out;
    for (const auto& [p, t] : state_->levels) out.push_back({p, t});
    return out;
}

void redis_limit_store::clear(std::optional<std::string_view> provider) {
    {
        std::lock_guard lock(state_->mutex);
        const std::string p = provider ? std::string(*provider) : std::string();
        state_->deposits.erase(p);
        if (p.empty()) state_->deposits.clear();
        state_->queue.push_back({p, 0, 0, state::op_kind::clear});
    }
    state_->forget(provider.value_or(std::string_view()));
    state_->poke();
}

namespace {
std::int64_t until_in(const std::map<std::string, std::int64_t, std::less<>>& m,
                      std::string_view key) {
    const auto it = m.find(key);
    return it == m.end() ? 0 : it->second;
}
}  // namespace

void redis_limit_store::block_credential(std::string_view provider, std::string_view fingerprint,
                                         std::int64_t until_ms, std::int64_t now_ms) {
    if (until_ms <= now_ms) return;
    std::string field = credential_block_key(provider, fingerprint);
    {
        std::lock_guard lock(state_->mutex);
        auto [it, fresh] = state_->blocks.emplace(field, until_ms);
        if (!fresh) it->second = std::max(it->second, until_ms);
        state_->queue.push_back(
            {std::move(field), until_ms - now_ms, max_usage_block_ms, state::op_kind::block});
    }
    state_->poke();
}

std::int64_t redis_limit_store::credential_blocked_until(std::string_view provider,
                                                         std::string_view fingerprint) const {
    const std::string field = credential_block_key(provider, fingerprint);
    std::lock_guard lock(state_->mutex);
    return until_in(state_->blocks, field);
}

void redis_limit_store::cool_down_model(std::string_view model, std::int64_t until_ms,
                                        std::int64_t now_ms) {
    if (until_ms <= now_ms) return;
    {
        std::lock_guard lock(state_->mutex);
        auto [it, fresh] = state_->cooldowns.emplace(std::string(model), until_ms);
        if (!fresh) it->second = std::max(it->second, until_ms);
        state_->queue.push_back(
            {std::string(model), until_ms - now_ms, max_usage_block_ms, state::op_kind::cooldown});
    }
    state_->poke();
}

std::int64_t redis_limit_store::model_cooldown_until(std::string_view model) const {
    std::lock_guard lock(state_->mutex);
    return until_in(state_->cooldowns, model);
}

std::vector<credential_block> redis_limit_store::credential_blocks(std::int64_t now_ms) const {
    std::lock_guard lock(state_->mutex);
    std::vector<credential_block> out;
    for (const auto& [k, until] : state_->blocks)
        if (until > now_ms) {
            const auto space = k.rfind(' ');
            out.push_back({k.substr(0, space), k.substr(space + 1), until});
        }
    return out;
}

std::vector<model_cooldown> redis_limit_store::model_cooldowns(std::int64_t now_ms) const {
    std::lock_guard lock(state_->mutex);
    std::vector<model_cooldown> out;
    for (const auto& [m, until] : state_->cooldowns)
        if (until > now_ms) out.push_back({m, until});
    return out;
}

bool redis_limit_store::connected() const noexcept {
    return state_->up;
}

std::string redis_limit_store::budget_key() const {
    return state_->key;
}
std::string redis_limit_store::channel() const {
    return state_->chan;
}

}  // namespace coagent

namespace coagent {

void redis_limit_store::lease_credential(std::string_view provider, std::string_view fingerprint,
                                         std::string_view session) {
    {
        std::lock_guard lock(state_->mutex);
        if (!state_->own.lease(provider, fingerprint, session)) return;
        state_->leases_dirty = true;
    }
    state_->poke();
}

void redis_limit_store::release_credential(std::string_view provider, std::string_view session) {
    {
        std::lock_guard lock(state_->mutex);
        if (!state_->own.release(provider, session)) return;
        state_->leases_dirty = true;
    }
    state_->poke();
}

std::int64_t redis_limit_store::credential_sessions(std::string_view provider,
                                                    std::string_view fingerprint) const {
    const std::string k = credential_block_key(provider, fingerprint);
    std::lock_guard lock(state_->mutex);
    const auto it = state_->others.find(k);
    return state_->own.count(k) + (it == state_->others.end() ? 0 : it->second);
}

park_wake redis_limit_store::park_probe_wake(std::string_view account, std::string_view session,
                                             std::int64_t parked_at, std::int64_t now) {
    park_wake w;
    bool asked = false;
    {
        std::lock_guard lock(state_->mutex);
        w = state_->probes.wake(account, session, parked_at, now);
        for (auto& a : state_->probes.take_asks()) {
            if (!state_->up) {  // no shared state: this process probes for itself
                park_claim_answer mine;
                mine.what = park_claim_answer::kind::mine;
                state_->probes.on_claim_answer(a.account, mine, now);
                w = state_->probes.wake(account, session, parked_at, now);
                continue;
            }
            state_->queue.push_back({std::move(a.account), a.age_ms, 0, state::op_kind::claim});
            asked = true;
        }
    }
    if (asked) state_->poke();
    return w;
}

void redis_limit_store::park_probe_done(std::string_view account, std::string_view session,
                                        park_probe_outcome outcome, std::int64_t until,
                                        std::int64_t now) {
    {
        std::lock_guard lock(state_->mutex);
        if (!state_->probes.done(account, session, outcome, until, now)) return;
        const std::int64_t ahead =
            outcome == park_probe_outcome::limited && until > now ? until - now : 0;
        state::op o{std::string(account), ahead, ahead + park_probe_stale_ms,
                    state::op_kind::probe_done};
        o.tag = probe_tag(outcome);
        state_->queue.push_back(std::move(o));
    }
    state_->poke();
}

std::vector<credential_lease_count> redis_limit_store::credential_leases() const {
    std::lock_guard lock(state_->mutex);
    std::map<std::string, std::int64_t, std::less<>> all(state_->others.begin(),
                                                         state_->others.end());
    for (const auto& [k, n] : state_->own.counts()) all[k] += n;
    return split_lease_counts(all);
}

}  // namespace coagent

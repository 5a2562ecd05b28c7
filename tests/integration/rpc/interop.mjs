// Interop: the reference agent's own TypeScript RpcClient (@mariozechner/pi-coding-agent
// 0.73.1) drives `coagent --mode rpc` through cli.js, on the faux provider:
//   1. two 503s then success: auto_retry_start attempts 1 and 2, auto_retry_end success,
//      get_state / get_last_assistant_text through the reference client;
//   2. abort_retry during a long backoff: auto_retry_end "Retry cancelled", isRetrying false;
//   3. a plain prompt() during a one-minute backoff: accepted, it joins the conversation and the
//      next attempt goes out at once with both user messages (issue 26);
//   4. prompt() and followUp() with images (the reference's ImageContent): the user messages hold
//      them in the reference's shape, the request carries them (issue 24).
// Usage: node interop.mjs CACHE_DIR COAGENT_BIN. Exit 0 on success, 1 with the reason.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const [cacheArg, binArg] = process.argv.slice(2);
if (!cacheArg || !binArg) {
    console.error("usage: node interop.mjs CACHE_DIR COAGENT_BIN");
    process.exit(2);
}
const cacheDir = resolve(cacheArg);
const coagentBin = resolve(binArg);
const here = dirname(fileURLToPath(import.meta.url));
const pkgIndex = join(cacheDir, "node_modules/@mariozechner/pi-coding-agent/dist/index.js");
const { RpcClient } = await import(pathToFileURL(pkgIndex).href);
assert.equal(typeof RpcClient, "function", "the package exports RpcClient");

const overloaded = "503 Service Unavailable: upstream overloaded";

/// Resolves with the next event of `type`; rejects after the timeout (a rejection nobody
/// awaits yet is marked handled, so it cannot crash node before the test reports it).
function untilEvent(client, type, timeoutMs = 20000) {
    const p = new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
            off();
            reject(new Error(`no ${type} event within ${timeoutMs} ms`));
        }, timeoutMs);
        const off = client.onEvent((e) => {
            if (e.type === type) {
                clearTimeout(timer);
                off();
                resolve(e);
            }
        });
    });
    p.catch(() => {});
    return p;
}

async function withClient(settings, script, body, extraArgs = []) {
    const dir = mkdtempSync(join(tmpdir(), "coagent-interop-"));
    writeFileSync(join(dir, "settings.json"), JSON.stringify(settings));
    const client = new RpcClient({
        cliPath: join(here, "cli.js"),
        cwd: dir,
        env: { COAGENT_BIN: coagentBin, COAGENT_DIR: dir, HOME: dir },
        args: ["--provider", "faux", "--no-session", "--faux-script", JSON.stringify(script), ...extraArgs],
    });
    const events = [];
    try {
        await client.start();
        // fail fast if coagent (or the shim) exits while the test runs
        const died = new Promise((_, reject) =>
            client.process.once("exit", (code, signal) =>
                reject(new Error(`coagent exited during the test: code ${code}, signal ${signal}`)),
            ),
        );
        died.catch(() => {});
        client.onEvent((e) => events.push(e));
        await Promise.race([body(client, events), died]);
    } catch (e) {
        e.message += `\nevents seen: ${events.map((x) => x.type).join(", ")}\ncoagent stderr:\n${client.getStderr()}`;
        throw e;
    } finally {
        await client.stop();
        rmSync(dir, { recursive: true, force: true });
    }
}

function report(e) {
    console.error(`rpc interop FAILED: ${e.stack ?? e}`);
    process.exit(1);
}

// 1. two errors, then success
const nothing = { textChars: 0, thinkingChars: 0, toolCalls: 0 };
await withClient(
    { retry: { baseDelayMs: 100 } },
    [{ error: overloaded, status: 503, times: 2 }, { text: "Hello from coagent" }],
    async (client, events) => {
        const settled = untilEvent(client, "agent_settled");
        await client.prompt("Say hello");
        await settled;
        const starts = events.filter((e) => e.type === "auto_retry_start");
        assert.deepEqual(starts, [
            // the reference's fields, plus coagent's extras `limit` (the kind of limit) and
            // `discarded` (what the failed attempt had streamed: nothing here)
            { type: "auto_retry_start", attempt: 1, maxAttempts: 3, delayMs: 100, errorMessage: overloaded, limit: "capacity", discarded: nothing },
            { type: "auto_retry_start", attempt: 2, maxAttempts: 3, delayMs: 200, errorMessage: overloaded, limit: "capacity", discarded: nothing },
        ]);
        const ends = events.filter((e) => e.type === "auto_retry_end");
        assert.deepEqual(ends, [{ type: "auto_retry_end", success: true, attempt: 2 }]);
        // the end comes right after the successful message_end, before its turn_end
        const endIdx = events.findIndex((e) => e.type === "auto_retry_end");
        assert.equal(events[endIdx - 1].type, "message_end");
        assert.equal(events[endIdx - 1].message.stopReason, "stop");
        assert.equal(events[endIdx + 1].type, "turn_end");
        const agentEnds = events.filter((e) => e.type === "agent_end").map((e) => e.willRetry);
        assert.deepEqual(agentEnds, [true, true, false]);
        assert.equal(await client.getLastAssistantText(), "Hello from coagent");
        const state = await client.getState();
        assert.equal(state.isRetrying, false);
        assert.equal(state.retryAttempt, 0);
        assert.equal(state.autoRetryEnabled, true);
        assert.equal(state.isStreaming, false);
        assert.equal(state.messageCount, 2);
        assert.equal(state.model.id, "faux");
        const stats = await client.getSessionStats();
        assert.equal(stats.assistantMessages, 3);
        console.log("interop 1/4: two retries then success: ok");
    },
).catch(report);

// 2. abort_retry during the backoff
await withClient({ retry: { baseDelayMs: 20000 } }, [{ error: overloaded, status: 503 }], async (client, events) => {
    const started = untilEvent(client, "auto_retry_start");
    const settled = untilEvent(client, "agent_settled");
    await client.prompt("Say hello");
    const start = await started;
    assert.equal(start.attempt, 1);
    assert.equal((await client.getState()).isRetrying, true);
    await client.abortRetry();
    await settled;
    const ends = events.filter((e) => e.type === "auto_retry_end");
    assert.deepEqual(ends, [{ type: "auto_retry_end", success: false, attempt: 1, finalError: "Retry cancelled" }]);
    const state = await client.getState();
    assert.equal(state.isRetrying, false);
    assert.equal(state.retryAttempt, 0);
    console.log("interop 2/4: abort_retry in the backoff: ok");
}).catch(report);

// 3. a plain prompt during the backoff joins the chain and retries now
{
    const logDir = mkdtempSync(join(tmpdir(), "coagent-interop-log-"));
    const log = join(logDir, "requests.jsonl");
    await withClient(
        { retry: { baseDelayMs: 60000 } },
        [{ error: overloaded, status: 503 }, { text: "Both answered" }],
        async (client, events) => {
            const started = untilEvent(client, "auto_retry_start");
            await client.prompt("first question");
            await started;
            const settled = untilEvent(client, "agent_settled");
            // the reference's client ignores a failed response: coagent must accept this one
            await client.prompt("second question");
            await settled; // long before the one-minute wait would have ended
            const users = events
                .filter((e) => e.type === "message_end" && e.message.role === "user")
                .map((e) => (typeof e.message.content === "string" ? e.message.content : e.message.content.map((c) => c.text).join("")));
            assert.deepEqual(users, ["first question", "second question"]);
            const ends = events.filter((e) => e.type === "auto_retry_end");
            assert.deepEqual(ends, [{ type: "auto_retry_end", success: true, attempt: 1 }]);
            assert.equal(events.filter((e) => e.type === "auto_retry_start").length, 1);
            assert.equal(events.filter((e) => e.type === "agent_settled").length, 1);
            assert.equal(await client.getLastAssistantText(), "Both answered");
        },
        ["--faux-log", log],
    ).catch(report);
    const requests = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(requests.length, 2);
    const roles = requests[1].messages.map((m) => m.role);
    assert.deepEqual(roles, ["user", "user"]);
    rmSync(logDir, { recursive: true, force: true });
    console.log("interop 3/4: a prompt during the backoff joins it and goes out at once: ok");
}

// 4. images on prompt and followUp
{
    const logDir = mkdtempSync(join(tmpdir(), "coagent-interop-log-"));
    const log = join(logDir, "requests.jsonl");
    const png = { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" };
    const gif = { type: "image", data: "R0lGODlh", mimeType: "image/gif" };
    await withClient(
        {},
        [{ text: "A logo.", delayMs: 300 }, { text: "A gif." }],
        async (client, events) => {
            const settled = untilEvent(client, "agent_settled");
            await client.prompt("what is this?", [png]);
            await client.followUp("and this?", [gif]);
            await settled;
            const users = events.filter((e) => e.type === "message_end" && e.message.role === "user").map((e) => e.message.content);
            assert.deepEqual(users, [
                [{ type: "text", text: "what is this?" }, png],
                [{ type: "text", text: "and this?" }, gif],
            ]);
            const messages = await client.getMessages();
            assert.deepEqual(messages[0].content, [{ type: "text", text: "what is this?" }, png]);
            assert.equal(await client.getLastAssistantText(), "A gif.");
        },
        ["--faux-log", log],
    ).catch(report);
    const requests = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(requests.length, 2);
    assert.deepEqual(requests[1].messages.map((m) => m.images ?? 0), [1, 0, 1]);
    rmSync(logDir, { recursive: true, force: true });
    console.log("interop 4/4: prompt and followUp with images: ok");
}

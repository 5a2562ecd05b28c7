// Interop: the reference agent's own TypeScript RpcClient (@mariozechner/pi-coding-agent
// 0.73.1) drives `coagent --mode rpc` through cli.js, on the faux provider:
//   1. two 503s then success: auto_retry_start attempts 1 and 2, auto_retry_end success,
//      get_state / get_last_assistant_text through the reference client;
//   2. abort_retry during a long backoff: auto_retry_end "Retry cancelled", isRetrying false;
//   3. a plain prompt() during a one-minute backoff: accepted, it joins the conversation and the
//      next attempt goes out at once with both user messages (issue 26);
//   4. prompt() and followUp() with images (the reference's ImageContent): the user messages hold
//      them in the reference's shape, the request carries them (issue 24);
//   5. a session file written by coagent (an image prompt, a reply with signed thinking from
//      coagent-fakellm's Anthropic stream) loaded by the reference agent (SessionManager.open and
//      createAgentSession, as its --session does): the same messages, and its next request (its
//      own faux provider) gets the image and the thinking with its signature;
//   6. a session file written by the reference agent (createAgentSession on its faux provider:
//      an image prompt, a reply with thinking) loaded by `coagent --mode rpc --session FILE`:
//      get_messages gives the reference's messages, and coagent's next request sends the image.
// Usage: node interop.mjs CACHE_DIR COAGENT_BIN FAKELLM_BIN. Exit 0 on success, 1 with the reason.

import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const [cacheArg, binArg, fakeArg] = process.argv.slice(2);
if (!cacheArg || !binArg || !fakeArg) {
    console.error("usage: node interop.mjs CACHE_DIR COAGENT_BIN FAKELLM_BIN");
    process.exit(2);
}
const cacheDir = resolve(cacheArg);
const coagentBin = resolve(binArg);
const fakellmBin = resolve(fakeArg);
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

/// `opts.dir`: the COAGENT_DIR/HOME/cwd to use (kept; default a temporary one, removed);
/// `opts.args`: coagent's arguments instead of the faux provider's with `script` and no session.
async function withClient(settings, script, body, extraArgs = [], opts = {}) {
    const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "coagent-interop-"));
    writeFileSync(join(dir, "settings.json"), JSON.stringify(settings));
    const client = new RpcClient({
        cliPath: join(here, "cli.js"),
        cwd: dir,
        env: { COAGENT_BIN: coagentBin, COAGENT_DIR: dir, HOME: dir },
        args: [
            ...(opts.args ?? ["--provider", "faux", "--no-session", "--faux-script", JSON.stringify(script)]),
            ...extraArgs,
        ],
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
        if (!opts.dir) rmSync(dir, { recursive: true, force: true });
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
        console.log("interop 1/6: two retries then success: ok");
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
    console.log("interop 2/6: abort_retry in the backoff: ok");
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
    console.log("interop 3/6: a prompt during the backoff joins it and goes out at once: ok");
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
    console.log("interop 4/6: prompt and followUp with images: ok");
}

// the reference agent itself (its SDK) and its faux provider, for 5 and 6
const sdk = await import(pathToFileURL(pkgIndex).href);
const ai = await import(pathToFileURL(join(cacheDir, "node_modules/@mariozechner/pi-ai/dist/index.js")).href);
const png = { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" };
/// The reference's AgentSession on a session file (as its --session FILE), on its faux provider
/// with `responses`; `noTools` keeps its coding tools out of the comparison.
async function referenceSession(dir, sessionManager, responses) {
    const faux = ai.registerFauxProvider({ models: [{ id: "faux-1", reasoning: true, input: ["text", "image"] }] });
    faux.setResponses(responses);
    const authStorage = sdk.AuthStorage.inMemory();
    authStorage.setRuntimeApiKey("faux", "interop");
    const { session } = await sdk.createAgentSession({
        cwd: dir,
        agentDir: join(dir, "ref-agent"),
        model: faux.getModel(),
        sessionManager,
        authStorage,
        noTools: "all",
    });
    return { session, faux };
}
/// What both agents must agree on: each message's role and content blocks.
const shape = (messages) => messages.map((m) => ({ role: m.role, content: m.content }));

/// coagent-fakellm on a free port with `script`; resolves with { port, stop }.
async function startFakellm(script) {
    const { spawn } = await import("node:child_process");
    const child = spawn(fakellmBin, ["--port", "0", "--script", JSON.stringify(script)], { stdio: ["ignore", "pipe", "inherit"] });
    const port = await new Promise((resolvePort, reject) => {
        let out = "";
        const timer = setTimeout(() => reject(new Error("coagent-fakellm did not start")), 10000);
        child.stdout.on("data", (d) => {
            out += d;
            const m = /listening 127\.0\.0\.1:(\d+)/.exec(out);
            if (m) {
                clearTimeout(timer);
                resolvePort(Number(m[1]));
            }
        });
        child.once("exit", (code) => reject(new Error(`coagent-fakellm exited: ${code}`)));
    });
    return { port, stop: () => child.kill("SIGTERM") };
}

// 5. coagent writes a session with an image and signed thinking; the reference loads it
{
    const dir = mkdtempSync(join(tmpdir(), "coagent-interop-session-"));
    const fake = await startFakellm([{ thinking: "I look at the picture.", signature: "sig-abc", text: "A logo." }]);
    writeFileSync(
        join(dir, "models.json"),
        JSON.stringify({
            providers: {
                local: {
                    baseUrl: `http://127.0.0.1:${fake.port}/v1`,
                    api: "anthropic-messages",
                    apiKey: "interop",
                    models: [{ id: "m1", contextWindow: 32000, maxTokens: 4096, reasoning: true }],
                },
            },
        }),
    );
    let file, coagentMessages;
    try {
        await withClient(
            {},
            [],
            async (client) => {
                const settled = untilEvent(client, "agent_settled");
                await client.prompt("what is this?", [png]);
                await settled;
                file = (await client.getState()).sessionFile;
                coagentMessages = await client.getMessages();
            },
            [],
            { dir, args: ["--provider", "local", "--model", "m1"] },
        );
    } catch (e) {
        report(e);
    } finally {
        fake.stop();
    }
    try {
        assert.ok(file, "get_state gives the session file");
        assert.deepEqual(shape(coagentMessages), [
            { role: "user", content: [{ type: "text", text: "what is this?" }, png] },
            {
                role: "assistant",
                content: [
                    { type: "thinking", thinking: "I look at the picture.", thinkingSignature: "sig-abc" },
                    { type: "text", text: "A logo." },
                ],
            },
        ]);
        // the reference's own loader, and its agent on the file
        const sm = sdk.SessionManager.open(file, join(dir, "ref-sessions"));
        assert.deepEqual(shape(sm.buildSessionContext().messages), shape(coagentMessages));
        let seen;
        const { session } = await referenceSession(dir, sm, [
            (context) => {
                seen = context.messages;
                return ai.fauxAssistantMessage("Still a logo.");
            },
        ]);
        assert.deepEqual(shape(session.messages), shape(coagentMessages));
        await session.prompt("and now?");
        assert.deepEqual(shape(seen.slice(0, 2)), shape(coagentMessages));  // image and signature sent on
        assert.equal(seen.length, 3);
    } catch (e) {
        report(e);
    }
    rmSync(dir, { recursive: true, force: true });
    console.log("interop 5/6: a coagent session file with an image and thinking, loaded by the reference: ok");
}

// 6. the reference writes a session with an image and thinking; coagent loads it
{
    const dir = mkdtempSync(join(tmpdir(), "coagent-interop-session-"));
    let file, refMessages;
    try {
        const sm = sdk.SessionManager.create(dir, join(dir, "ref-sessions"));
        const thinking = { type: "thinking", thinking: "I look at the picture.", thinkingSignature: "ref-sig" };
        const { session } = await referenceSession(dir, sm, [ai.fauxAssistantMessage([thinking, ai.fauxText("A logo.")])]);
        await session.prompt("what is this?", { images: [png] });
        file = sm.getSessionFile();
        refMessages = session.messages;
        assert.deepEqual(shape(refMessages), [
            { role: "user", content: [{ type: "text", text: "what is this?" }, png] },
            { role: "assistant", content: [thinking, { type: "text", text: "A logo." }] },
        ]);
    } catch (e) {
        report(e);
    }
    const logDir = mkdtempSync(join(tmpdir(), "coagent-interop-log-"));
    const log = join(logDir, "requests.jsonl");
    await withClient(
        {},
        [],
        async (client) => {
            assert.deepEqual(shape(await client.getMessages()), shape(refMessages));
            const settled = untilEvent(client, "agent_settled");
            await client.prompt("and now?");
            await settled;
            assert.equal(await client.getLastAssistantText(), "Still a logo.");
        },
        [],
        {
            dir,
            args: ["--provider", "faux", "--session", file, "--faux-script", JSON.stringify([{ text: "Still a logo." }]), "--faux-log", log],
        },
    ).catch(report);
    const requests = readFileSync(log, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    assert.equal(requests.length, 1);
    assert.deepEqual(requests[0].messages.map((m) => m.images ?? 0), [1, 0, 0]);
    rmSync(logDir, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
    console.log("interop 6/6: a reference session file with an image and thinking, loaded by coagent: ok");
}

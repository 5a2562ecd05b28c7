// The scale benchmark's reference side (issue 25; bench/scale/run drives it): N AgentSessions of
// the reference's own SDK (@mariozechner/pi-coding-agent 0.73.1: createAgentSession,
// SettingsManager.inMemory, SessionManager.inMemory) in this one Node.js process, prompting at
// once against coagent-fakellm --per-conversation — what a Node.js server embedding the
// reference would run. The same options, phases and output fields as scale_bench.cpp (read its
// header); SDK-level retries are off (retry.provider.maxRetries 0), so every retry is the
// session's own policy, as in coagent.
//
//   node --expose-gc reference-sdk.mjs --sdk DIR/node_modules/@mariozechner/pi-coding-agent
//        --port P --sessions N [--phase stream|parked] [--chunk-delay-ms D]
//        [--base-delay-ms B] [--max-retries R] --agent-dir DIR
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const now = () => performance.now();
const opt = { ports: [], sessions: 100, phase: "stream", chunkDelayMs: 100, baseDelayMs: 100, maxRetries: 3 };
for (let i = 2; i < process.argv.length; ++i) {
    const a = process.argv[i];
    const v = () => {
        if (i + 1 >= process.argv.length) throw new Error(`${a} needs a value`);
        return process.argv[++i];
    };
    if (a === "--sdk") opt.sdk = v();
    else if (a === "--agent-dir") opt.agentDir = v();
    else if (a === "--port") opt.ports.push(Number(v()));
    else if (a === "--sessions") opt.sessions = Number(v());
    else if (a === "--phase") opt.phase = v();
    else if (a === "--chunk-delay-ms") opt.chunkDelayMs = Number(v());
    else if (a === "--base-delay-ms") opt.baseDelayMs = Number(v());
    else if (a === "--max-retries") opt.maxRetries = Number(v());
    else if (a === "--threads") v(); // one thread: Node.js runs JavaScript on one
    else {
        console.error(`reference-sdk.mjs: unknown option ${a}`);
        process.exit(2);
    }
}
if (!opt.sdk || !opt.agentDir || opt.ports.length === 0) {
    console.error("reference-sdk.mjs: --sdk, --agent-dir and --port are required");
    process.exit(2);
}

const sdk = await import(join(opt.sdk, "dist/index.js"));
const { createAgentSession, SettingsManager, SessionManager, AuthStorage, ModelRegistry, DefaultResourceLoader } = sdk;

// one provider per fakellm port, as scale_bench has one http_provider per port
mkdirSync(opt.agentDir, { recursive: true });
const providers = {};
opt.ports.forEach((port, k) => {
    providers[`fake${k}`] = {
        baseUrl: `http://127.0.0.1:${port}/v1`,
        api: "openai-completions",
        apiKey: "dummy-key",
        compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsUsageInStreaming: true },
        models: [{ id: "fake-model", name: "Fake Model", reasoning: false, input: ["text"], contextWindow: 1000000, maxTokens: 4096, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0 } }],
    };
});
writeFileSync(join(opt.agentDir, "models.json"), JSON.stringify({ providers }));
const parked = opt.phase === "parked";
const settings = {
    compaction: { enabled: false },
    retry: { enabled: true, maxRetries: opt.maxRetries, baseDelayMs: parked ? 600000 : opt.baseDelayMs, provider: { maxRetries: 0 } },
    quietStartup: true,
};
// what a server shares between its sessions: one auth storage, model registry, resource loader
const authStorage = AuthStorage.create(join(opt.agentDir, "auth.json"));
const modelRegistry = ModelRegistry.create(authStorage, join(opt.agentDir, "models.json"));
const cwd = opt.agentDir;
const settingsManager = SettingsManager.inMemory(settings);
const resourceLoader = new DefaultResourceLoader({ cwd, agentDir: opt.agentDir, settingsManager });
await resourceLoader.reload();
const models = opt.ports.map((_, k) => modelRegistry.find(`fake${k}`, "fake-model"));
if (models.some((m) => !m)) throw new Error("the fake models are not in the registry");

const rssBytes = () => process.memoryUsage().rss;
const heapBytes = () => {
    const m = process.memoryUsage();
    return m.heapUsed + m.external + m.arrayBuffers;
};
const gc = globalThis.gc ?? (() => {});

// gaps between text deltas beyond the chunk delay, 0.05 ms buckets up to 200 ms (as scale_bench)
const gaps = new Uint32Array(4001);
const gapPercentile = (p) => {
    const total = gaps.reduce((a, b) => a + b, 0);
    if (!total) return 0;
    const rank = Math.floor(p * (total - 1));
    let seen = 0;
    for (let b = 0; b <= 4000; ++b) if ((seen += gaps[b]) > rank) return (b + 1) * 0.05;
    return 200;
};
gc();
const heap0 = heapBytes();
const rss0 = rssBytes();
const all = [];
let streaming = 0, waiting = 0, settled = 0;
let heapAtPeak = 0, rssAtPeak = 0;
const samplePeak = () => {
    heapAtPeak = heapBytes();
    rssAtPeak = rssBytes();
};
let onAllWaiting = null;
for (let i = 0; i < opt.sessions; ++i) {
    const { session } = await createAgentSession({
        cwd,
        agentDir: opt.agentDir,
        authStorage,
        modelRegistry,
        model: models[i % models.length],
        thinkingLevel: "off",
        noTools: "all",
        resourceLoader,
        settingsManager: SettingsManager.inMemory(settings),
        sessionManager: SessionManager.inMemory(cwd),
    });
    const t = { session, deltas: 0, pacingMs: 0, delaysMs: 0, attempts: 0, retryStarts: 0, retryEnds: 0, streaming: false, waiting: false, ok: false, settled: false };
    session.subscribe((e) => {
        if (e.type === "message_start" && e.message.role === "assistant") {
            ++t.attempts;
            t.deltas = 0;
        } else if (e.type === "message_update" && e.assistantMessageEvent?.type === "text_delta") {
            const at = now();
            if (t.deltas > 0) gaps[Math.min(4000, Math.max(0, Math.floor((at - t.lastDelta - opt.chunkDelayMs) / 0.05)))]++;
            t.lastDelta = at;
            if (++t.deltas === 1) t.firstDelta = t.lastDelta;
            if (t.deltas === 1 && !t.streaming) {
                t.streaming = true;
                if (++streaming === opt.sessions) samplePeak();
            }
        } else if (e.type === "message_end" && e.message.role === "assistant") {
            if (t.deltas > 1) t.pacingMs += t.lastDelta - t.firstDelta; // the server's pacing
        } else if (e.type === "auto_retry_start") {
            ++t.retryStarts;
            t.delaysMs += e.delayMs;
            if (parked && !t.waiting) {
                t.waiting = true;
                if (++waiting === opt.sessions) {
                    samplePeak();
                    onAllWaiting?.();
                }
            }
        } else if (e.type === "auto_retry_end") {
            ++t.retryEnds;
        }
    });
    all.push(t);
}
gc();
const heapIdle = heapBytes();

const cpu0 = process.cpuUsage();
const wall0 = now();
let allWaitingAt = 0, allSettledAt = 0;
if (parked)
    onAllWaiting = () => {
        allWaitingAt = now();
        for (const t of all) t.session.abortRetry();
    };
await Promise.all(
    all.map(async (t, i) => {
        t.start = now();
        try {
            await t.session.prompt(`scale ${i}`);
        } catch (err) {
            t.error = String(err);
        }
        t.end = now();
        t.settled = true;
        const last = t.session.messages.at(-1);
        t.ok = !t.error && last?.role === "assistant" && last.stopReason === "stop";
        if (++settled === opt.sessions) allSettledAt = t.end;
    }),
);
const cpuUsed = process.cpuUsage(cpu0);
const cpu = (cpuUsed.user + cpuUsed.system) / 1e6;
const wall = (now() - wall0) / 1000;

const added = [];
let requests = 0, retryStarts = 0, retryEnds = 0, retried = 0, ok = 0;
for (const t of all) {
    requests += t.attempts;
    retryStarts += t.retryStarts;
    retryEnds += t.retryEnds;
    retried += t.retryStarts > 0 ? 1 : 0;
    ok += t.ok ? 1 : 0;
    if (t.settled) added.push(t.end - t.start - (t.pacingMs + t.delaysMs));
}
added.sort((a, b) => a - b);
const pct = (p) => (added.length ? added[Math.min(added.length - 1, Math.round(p * (added.length - 1)))] : 0);
const n = opt.sessions;
const out = {
    agent: "reference-sdk",
    phase: opt.phase,
    sessions: n,
    threads: 1,
    settled,
    succeeded: ok,
    requests,
    retriedPrompts: retried,
    autoRetryStart: retryStarts,
    autoRetryEnd: retryEnds,
    cpuSeconds: cpu,
    wallSeconds: wall,
    promptsPerCpuSecond: cpu > 0 ? settled / cpu : 0,
    cpuMsPerPrompt: settled ? (cpu * 1000) / settled : 0,
    addedLatencyP50Ms: pct(0.5),
    addedLatencyP99Ms: pct(0.99),
    chunkGapP50Ms: gapPercentile(0.5),
    chunkGapP99Ms: gapPercentile(0.99),
    idleHeapBytesPerSession: (heapIdle - heap0) / n,
    [parked ? "parkedHeapBytesPerSession" : "streamingHeapBytesPerSession"]: heapAtPeak ? (heapAtPeak - heap0) / n : -1,
    [parked ? "parkedRssBytesPerSession" : "streamingRssBytesPerSession"]: rssAtPeak ? (rssAtPeak - rss0) / n : -1,
};
if (parked) out.cancelAllMs = allSettledAt - allWaitingAt;
process.stdout.write(JSON.stringify(out) + "\n");
for (const t of all) t.session.dispose();
process.exit(settled === n ? 0 : 1);

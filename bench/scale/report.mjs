// bench/scale/run's report: results.jsonl -> a Markdown table, the plot's data, and the checks
// (every prompt settled; the server logged the requests the agent counted; coagent's requests
// and auto_retry_* counts equal the reference's at the same N). Exit 3 when a check fails.
//   node report.mjs results.jsonl table.md scale.dat
import { readFileSync, writeFileSync } from "node:fs";

const [file, tableFile, datFile] = process.argv.slice(2);
const rows = readFileSync(file, "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
const sizes = [...new Set(rows.map((r) => r.sessions))].sort((a, b) => a - b);
const agents = ["coagent-1t", "coagent-2t", "reference-sdk", "floor"];
const find = (agent, phase, n) => rows.find((r) => r.agent === agent && r.phase === phase && r.sessions === n);
const f = (x, d = 1) => (x === undefined || x < 0 ? "–" : Number(x).toFixed(d));
const kb = (x) => (x === undefined || x < 0 ? "–" : (x / 1024).toFixed(1));
const ok = (r) => r && !r.failed;
const ratio = (a, b, d = 1) => (a > 0 && b > 0 ? (a / b).toFixed(d) + "×" : "–");
const problems = [];
const lines = [];

lines.push("### Streaming: N sessions prompt at once (a share of first attempts fails)", "");
lines.push("| N | agent | settled | requests (server) | auto_retry_start / end | prompts per CPU-s | CPU ms per prompt | added latency p50 / p99 ms | chunk gap beyond D p50 / p99 ms | heap KiB per streaming session | RSS KiB per session | connections (max) | server CPU s |");
lines.push("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const n of sizes)
    for (const a of agents) {
        const r = find(a, "stream", n);
        if (!r) continue;
        if (r.failed) {
            lines.push(`| ${n} | ${a} | failed (exit ${r.exit}) | ${r.serverRequests} | | | | | | | | | |`);
            if (a !== "reference-sdk") problems.push(`${a} stream N=${n} failed`);
            continue;
        }
        lines.push(`| ${n} | ${a} | ${r.settled}/${n} | ${r.requests} (${r.serverRequests}) | ${r.autoRetryStart} / ${r.autoRetryEnd} | ${f(r.promptsPerCpuSecond, 0)} | ${f(r.cpuMsPerPrompt, 3)} | ${f(r.addedLatencyP50Ms)} / ${f(r.addedLatencyP99Ms)} | ${f(r.chunkGapP50Ms, 2)} / ${f(r.chunkGapP99Ms, 2)} | ${kb(r.streamingHeapBytesPerSession)} | ${kb(r.streamingRssBytesPerSession)} | ${r.maxConnections} | ${f(r.serverCpuSeconds, 2)} |`);
        if (r.settled !== n) problems.push(`${a} stream N=${n}: ${r.settled} of ${n} settled`);
        if (r.requests !== r.serverRequests) problems.push(`${a} stream N=${n}: counted ${r.requests} requests, the server logged ${r.serverRequests}`);
    }
lines.push("", "### Parked: N sessions wait in a 10-minute backoff, then abort_retry on all", "");
lines.push("| N | agent | settled | heap KiB per parked session | RSS KiB per parked session | cancel all ms | CPU ms per prompt (one 503, backoff, cancel) |");
lines.push("|---|---|---|---|---|---|---|");
for (const n of sizes)
    for (const a of agents) {
        const r = find(a, "parked", n);
        if (!r) continue;
        if (r.failed) {
            lines.push(`| ${n} | ${a} | failed (exit ${r.exit}) | | | | |`);
            if (a !== "reference-sdk") problems.push(`${a} parked N=${n} failed`);
            continue;
        }
        lines.push(`| ${n} | ${a} | ${r.settled}/${n} | ${kb(r.parkedHeapBytesPerSession)} | ${kb(r.parkedRssBytesPerSession)} | ${f(r.cancelAllMs)} | ${f(r.cpuMsPerPrompt, 3)} |`);
        if (r.settled !== n) problems.push(`${a} parked N=${n}: ${r.settled} of ${n} settled`);
        // one 503 each, then the 10-minute backoff until abort_retry: a retry would mean a wait ended early
        if (r.serverRequests !== n) problems.push(`${a} parked N=${n}: the server logged ${r.serverRequests} requests, not one per session`);
    }
lines.push("", "### coagent against the reference's SDK (same N, same run)", "");
lines.push("| N | prompts per CPU-s, coagent 1 thread / reference | heap per streaming session, reference / coagent | heap per parked session, reference / coagent | requests and auto_retry_* equal |");
lines.push("|---|---|---|---|---|");
const dat = ["# N coagent1t_ppcs coagent2t_ppcs reference_ppcs coagent_heap_kib reference_heap_kib coagent_parked_kib reference_parked_kib floor_ppcs floor_heap_kib"];
for (const n of sizes) {
    const c = find("coagent-1t", "stream", n), c2 = find("coagent-2t", "stream", n), ref = find("reference-sdk", "stream", n);
    const cp = find("coagent-1t", "parked", n), rp = find("reference-sdk", "parked", n);
    let equal = "–";
    if (ok(c) && ok(ref)) {
        const same = ["requests", "autoRetryStart", "autoRetryEnd"].every((k) => c[k] === ref[k] && (!ok(c2) || c2[k] === ref[k]));
        equal = same ? "yes" : `NO (${c.requests}/${c.autoRetryStart}/${c.autoRetryEnd} vs ${ref.requests}/${ref.autoRetryStart}/${ref.autoRetryEnd})`;
        if (!same) problems.push(`N=${n}: coagent and the reference differ in requests or auto_retry_* counts`);
    }
    const fl = find("floor", "stream", n);
    if (ok(c) && ok(fl) && fl.requests !== c.requests) problems.push(`N=${n}: the floor made ${fl.requests} requests, coagent ${c.requests}`);
    lines.push(`| ${n} | ${ok(c) && ok(ref) ? ratio(c.promptsPerCpuSecond, ref.promptsPerCpuSecond) : "–"} | ${ok(c) && ok(ref) ? ratio(ref.streamingHeapBytesPerSession, c.streamingHeapBytesPerSession) : "–"} | ${ok(cp) && ok(rp) ? ratio(rp.parkedHeapBytesPerSession, cp.parkedHeapBytesPerSession) : "–"} | ${equal} |`);
    const v = (r, k) => (ok(r) ? r[k] : "NaN");
    const k = (r, key) => (ok(r) && r[key] > 0 ? (r[key] / 1024).toFixed(2) : "NaN");
    dat.push([n, v(c, "promptsPerCpuSecond"), v(c2, "promptsPerCpuSecond"), v(ref, "promptsPerCpuSecond"), k(c, "streamingHeapBytesPerSession"), k(ref, "streamingHeapBytesPerSession"), k(cp, "parkedHeapBytesPerSession"), k(rp, "parkedHeapBytesPerSession"), v(fl, "promptsPerCpuSecond"), k(fl, "streamingHeapBytesPerSession")].join(" "));
}
lines.push("", "### The harness floor beside them (scale-floor: N bare streams on one thread, no agent)", "");
lines.push("| N | prompts per CPU-s: floor | floor / reference (the widest lead) | coagent 1 thread / floor | heap per streaming session KiB: floor, reference / floor | heap per parked session KiB: floor, coagent / floor | added latency p99 ms: floor, coagent |");
lines.push("|---|---|---|---|---|---|---|");
for (const n of sizes) {
    const fl = find("floor", "stream", n), fp = find("floor", "parked", n);
    const c = find("coagent-1t", "stream", n), ref = find("reference-sdk", "stream", n), cp = find("coagent-1t", "parked", n);
    if (!ok(fl)) continue;
    const r2 = (a, b) => ratio(a, b, 2);
    lines.push(`| ${n} | ${f(fl.promptsPerCpuSecond, 0)} | ${ok(ref) ? r2(fl.promptsPerCpuSecond, ref.promptsPerCpuSecond) : "–"} | ${ok(c) ? r2(c.promptsPerCpuSecond, fl.promptsPerCpuSecond) : "–"} | ${kb(fl.streamingHeapBytesPerSession)}, ${ok(ref) ? r2(ref.streamingHeapBytesPerSession, fl.streamingHeapBytesPerSession) : "–"} | ${ok(fp) ? kb(fp.parkedHeapBytesPerSession) : "–"}, ${ok(fp) && ok(cp) ? r2(cp.parkedHeapBytesPerSession, fp.parkedHeapBytesPerSession) : "–"} | ${f(fl.addedLatencyP99Ms)}, ${ok(c) ? f(c.addedLatencyP99Ms) : "–"} |`);
}
if (problems.length) lines.push("", "**Checks failed:**", ...problems.map((p) => `- ${p}`));
else lines.push("", "Checks: every prompt settled, the server logged the requests each agent counted, requests and auto_retry_* counts equal.");
writeFileSync(tableFile, lines.join("\n") + "\n");
writeFileSync(datFile, dat.join("\n") + "\n");
process.exit(problems.length ? 3 : 0);

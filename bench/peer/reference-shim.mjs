#!/usr/bin/env node
// The reference agent's CLI behind coagent's rpc_client. bench/peer/run copies this file next
// to the npm install (with the absolute node path in the first line, so no extra process is
// started) and peer_bench runs it as `<shim> --mode rpc …`, just as the reference's own
// RpcClient runs `node cli.js --mode rpc …`: process.argv keeps the same shape.
// pi-coding-agent 0.73 writes no {"type":"ready"} line (only oh-my-pi does), and rpc_client
// waits for one before it sends anything; so the shim writes it at once, before the CLI is
// loaded. peer_bench therefore times the reference from spawn to its first get_state
// response, never to this line.
import { writeSync } from "node:fs";

writeSync(1, '{"type":"ready"}\n');
await import("./node_modules/@mariozechner/pi-coding-agent/dist/cli.js");

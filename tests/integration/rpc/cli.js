#!/usr/bin/env node
// Shim for the reference agent's RpcClient, which spawns `node <cliPath> --mode rpc ...`:
// runs $COAGENT_BIN with the same arguments and stdio, forwards signals, exits as it exits.
"use strict";
const { spawn } = require("node:child_process");
const { constants } = require("node:os");

const bin = process.env.COAGENT_BIN;
if (!bin) {
    process.stderr.write("cli.js: COAGENT_BIN is not set\n");
    process.exit(2);
}
const child = spawn(bin, process.argv.slice(2), { stdio: "inherit" });
for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"]) process.on(sig, () => child.kill(sig));
child.on("error", (e) => {
    process.stderr.write(`cli.js: cannot start ${bin}: ${e.message}\n`);
    process.exit(127);
});
child.on("exit", (code, signal) => process.exit(signal ? 128 + (constants.signals[signal] ?? 0) : code ?? 1));

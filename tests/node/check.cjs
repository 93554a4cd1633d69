// The check harness of the tests/node scripts: one "ok   - NAME" or "FAIL - NAME: why" line per
// check, as tests/cli/lib.bash prints them, and the counts for the script's last line.
"use strict";
const counts = { passed: 0, failed: 0 };

async function check(name, fn) {
  try {
    await fn();
    console.log("ok   - " + name);
    ++counts.passed;
  } catch (e) {
    console.log("FAIL - " + name + ": " + (e && e.stack ? e.stack.split("\n").slice(0, 3).join(" | ") : e));
    ++counts.failed;
  }
}
function assert(cond, what) { if (!cond) throw new Error("assertion failed: " + what); }
// Prints "LABEL: N passed, M failed" and exits 1 when a check failed.
function finish(label) {
  console.log(`${label}: ${counts.passed} passed, ${counts.failed} failed`);
  process.exit(counts.failed ? 1 : 0);
}

module.exports = { check, assert, finish };

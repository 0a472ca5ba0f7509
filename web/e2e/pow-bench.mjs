// What a join challenge costs a fan's browser: the built app's own solver (the worker Vite
// emitted into dist/assets) run in Chromium on RUNS fresh challenges of BITS zero bits, each
// as long as a signed challenge (about 300 characters). Prints one JSON line: the median, 90th
// percentile and slowest solve, and the hashes per second. `make bench-join` runs it.
import { readdirSync, readFileSync } from "node:fs";
import { chromium } from "playwright-core";

const { CHROMIUM, BITS = "20", RUNS = "15" } = process.env;
if (!CHROMIUM) throw new Error("CHROMIUM is required");
const dist = new URL("../dist/assets/", import.meta.url);
const file = readdirSync(dist).find((f) => /^pow\.worker-.*\.js$/.test(f));
if (!file) throw new Error("no pow.worker-*.js in web/dist/assets: build the app first (scripts/web.sh)");
const source = readFileSync(new URL(file, dist), "utf8");

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage();
  // A page and the worker served from one (intercepted) origin, as the app serves them.
  await page.route("http://pow.bench/**", (route) =>
    route.request().url().endsWith("/pow.js")
      ? route.fulfill({ body: source, contentType: "text/javascript" })
      : route.fulfill({ body: "<!doctype html><title>pow</title>", contentType: "text/html" }),
  );
  await page.goto("http://pow.bench/");
  const runs = await page.evaluate(
    async ({ bits, runs }) => {
      const url = "/pow.js";
      const out = [];
      for (let i = 0; i < runs; i++) {
        const bytes = crypto.getRandomValues(new Uint8Array(225));
        const challenge = btoa(String.fromCharCode(...bytes)).replace(/[+/=]/g, "x");
        const worker = new Worker(url);
        out.push(
          await new Promise((resolve, reject) => {
            worker.onmessage = (e) => (worker.terminate(), resolve(e.data));
            worker.onerror = (e) => (worker.terminate(), reject(new Error(e.message)));
            worker.postMessage({ challenge, bits });
          }),
        );
      }
      return out;
    },
    { bits: Number(BITS), runs: Number(RUNS) },
  );
  const ms = runs.map((r) => r.ms).sort((a, b) => a - b);
  const at = (q) => ms[Math.round((ms.length - 1) * q)];
  const tries = runs.reduce((n, r) => n + r.tries, 0);
  const total = runs.reduce((n, r) => n + r.ms, 0);
  console.log(
    JSON.stringify({
      client: `Chromium ${browser.version()} (the app's worker)`,
      bits: Number(BITS),
      runs: ms.length,
      solve_ms_median: at(0.5),
      solve_ms_p90: at(0.9),
      solve_ms_max: at(1),
      tries_median: runs.map((r) => r.tries).sort((a, b) => a - b)[Math.floor(runs.length / 2)],
      hashes_per_s: (tries / total) * 1000,
    }),
  );
} finally {
  await browser.close();
}

// The fan app in a real Chromium (Debian's, driven by playwright-core), against a running
// onsale (tests/tests/browser.rs starts it and runs this with BASE, EVENT and CHROMIUM set).
// A fan signs in, finds the show, opens its map live over gRPC-web; another fan holds a seat
// over REST and the page shows one seat fewer within 2 s; at a phone's size the page still
// works and axe-core finds no serious accessibility violation. Exits non-zero with the reason.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

const { BASE, EVENT, CHROMIUM, SCREENSHOTS } = process.env;
if (!BASE || !EVENT || !CHROMIUM) throw new Error("BASE, EVENT and CHROMIUM are required");
const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

async function token(sub, role = "fan") {
  const r = await fetch(`${BASE}/v1/dev/token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ sub, role }),
  });
  if (r.status !== 201) throw new Error(`dev token: ${r.status}`);
  return (await r.json()).token;
}

async function accessible(page, what) {
  await page.addScriptTag({ content: axeSource });
  const result = await page.evaluate(async () => await window.axe.run(document));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (bad.length) {
    throw new Error(`${what}: ${bad.map((v) => `${v.id} (${v.impact}): ${v.help}`).join("; ")}`);
  }
}

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
try {
  for (const viewport of [{ width: 1280, height: 900 }, { width: 390, height: 844 }]) {
    const phone = viewport.width < 500;
    const page = await browser.newPage({ viewport });
    page.setDefaultTimeout(10_000);
    page.on("console", (m) => console.log(`[page ${m.type()}] ${m.text()}`));
    page.on("pageerror", (e) => console.log(`[page error] ${e.message}`));
    await page.goto(`${BASE}/`);
    await accessible(page, "sign-in");
    await page.getByLabel("Account name").fill(phone ? "phone-fan" : "desk-fan");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Shows" }).waitFor();
    const link = page.locator(`a[href="#/events/${EVENT}"]`);
    await link.waitFor();
    await accessible(page, "shows");
    if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/shows${phone ? "-phone" : ""}.png`, fullPage: true });
    await link.click();
    await page.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor();
    const available = page.getByTestId("available-S1");
    const before = Number(await available.textContent());
    // Another fan takes a seat of S1; the page shows it gone within 2 s.
    const other = await token(`other-${phone ? "p" : "d"}`);
    const seat = phone ? "S1-R1-2" : "S1-R1-1";
    const held = await fetch(`${BASE}/v1/events/${EVENT}/holds`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${other}` },
      body: JSON.stringify({ seatIds: [seat] }),
    });
    if (held.status !== 201) throw new Error(`the other fan's hold: ${held.status} ${await held.text()}`);
    const started = Date.now();
    await page.waitForFunction(
      ([el, n]) => Number(document.querySelector(el)?.textContent) === n,
      ['[data-testid="available-S1"]', before - 1],
      { timeout: 2_000 },
    );
    console.log(`${phone ? "phone" : "desktop"}: S1 ${before} -> ${before - 1} in ${Date.now() - started} ms`);
    await accessible(page, "seat map");
    if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/seat-map${phone ? "-phone" : ""}.png`, fullPage: true });
    await page.close();
  }
} finally {
  await browser.close();
}

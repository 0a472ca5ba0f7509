// What the browser scripts share: Chromium from CHROMIUM, the page's console in the output, a
// development token minted over REST, and axe-core's check.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { chromium } from "playwright-core";

export const { BASE, EVENT, CHROMIUM, SCREENSHOTS } = process.env;
if (!BASE || !EVENT || !CHROMIUM) throw new Error("BASE, EVENT and CHROMIUM are required");
const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

export async function launch() {
  return chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
}

export async function newPage(context, name) {
  const page = await context.newPage();
  page.setDefaultTimeout(10_000);
  page.on("console", (m) => console.log(`[${name} ${m.type()}] ${m.text()}`));
  page.on("pageerror", (e) => console.log(`[${name} error] ${e.message}`));
  return page;
}

export async function token(sub, role = "fan") {
  const r = await fetch(`${BASE}/v1/dev/token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ sub, role }),
  });
  if (r.status !== 201) throw new Error(`dev token: ${r.status}`);
  return (await r.json()).token;
}

export async function accessible(page, what) {
  // Evaluated, not added as a <script>: the pages' Content Security Policy refuses inline
  // scripts, and the tests run the pages under it.
  await page.evaluate(axeSource);
  const result = await page.evaluate(async () => await window.axe.run(document));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  if (bad.length) {
    throw new Error(
      `${what}: ${bad.map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ")}`).join("; ")}`,
    );
  }
}

/** Signs in as `sub` and opens the show. */
export async function openShow(page, sub) {
  await page.goto(`${BASE}/`);
  await page.getByLabel("Account name").fill(sub);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator(`a[href="#/events/${EVENT}"]`).click();
  await page.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor();
}

export async function shot(page, name) {
  if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/${name}.png`, fullPage: true });
}

// The API reference at /docs in a real Chromium: Redoc, from the web build, draws the OpenAPI
// document this server serves; nothing is loaded from elsewhere (the page's Content Security
// Policy refuses the one thing Redoc would fetch from a CDN, its attribution logo).
import { BASE, SCREENSHOTS, launch, newPage } from "./common.mjs";

const browser = await launch();
const page = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "docs");
const elsewhere = [];
page.on("response", (r) => {
  const url = r.url();
  if (!url.startsWith(BASE) && !url.startsWith("data:") && !url.startsWith("blob:")) elsewhere.push(url);
});
try {
  await page.goto(`${BASE}/docs`);
  await page.locator('body[data-docs="ready"]').waitFor({ timeout: 30_000 });
  // Operations by their summaries, and the error codes' enum from the document.
  await page.getByText("Hold explicit seats (all or none) or the best available ones.").first().waitFor();
  await page.getByText("Place an order from a hold.", { exact: false }).first().waitFor();
  // Every operation of the document this server serves is drawn.
  const doc = await (await fetch(`${BASE}/openapi.json`)).json();
  const expected = Object.values(doc.paths).reduce((n, ops) => n + Object.keys(ops).length, 0);
  const operations = await page.locator("[data-section-id^='operation/']").count();
  if (operations !== expected) throw new Error(`the reference draws ${operations} operations of ${expected}`);
  console.log(`the reference draws all ${operations} operations of the document`);
  if (elsewhere.length) throw new Error(`the page loaded from elsewhere: ${elsewhere.join(", ")}`);
  // The first screen only: the whole reference is many screens long.
  if (SCREENSHOTS) await page.screenshot({ path: `${SCREENSHOTS}/api-reference.png` });
} finally {
  await browser.close();
}

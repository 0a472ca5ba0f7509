// The venue chart in Chromium: a venue without a chart draws from the generated one and a venue
// with its own draws from that (seats where the chart puts them, coloured by price tier); a fan
// zooms and pans by keyboard (and by a pinch on a phone), picks a seat on the chart and holds it, sees where a best-available
// hold landed, and sees a seat another fan bought turn sold; axe finds no serious violation.
import { BASE, EVENT, accessible, launch, newPage, openShow, token } from "./common.mjs";

const { GIVEN } = process.env;
if (!GIVEN) throw new Error("GIVEN (a show whose venue has its own chart) is required");
const TIER_A = "#0072b2";
const SOLD = "#9aa0a6";

/** The colour the canvas shows at seat `id`'s centre. */
async function colour(page, id) {
  const rgb = await page.evaluate((id) => {
    const c = document.querySelector("canvas.venue");
    const [x, y] = window.__chart.at(id);
    const d = window.devicePixelRatio || 1;
    return [...c.getContext("2d").getImageData(Math.round(x * d), Math.round(y * d), 1, 1).data].slice(0, 3);
  }, id);
  return "#" + rgb.map((v) => v.toString(16).padStart(2, "0")).join("");
}

const shown = (page, id) => page.evaluate((id) => window.__chart?.shown(id), id);
const until = (page, what, fn, arg, timeout = 5_000) =>
  page.waitForFunction(fn, arg, { timeout }).catch((e) => {
    throw new Error(`${what}: ${e.message}`);
  });

/** Clicks seat `id` where the chart draws it. */
async function clickSeat(page, id) {
  const [x, y] = await page.evaluate((id) => window.__chart.at(id), id);
  const box = await page.getByTestId("venue-chart").boundingBox();
  await page.mouse.click(box.x + x, box.y + y);
}

const browser = await launch();
try {
  const page = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "chart");
  await openShow(page, "chart-fan");
  await until(page, "the chart draws", () => (window.__chart?.draws ?? 0) >= 1);
  if ((await shown(page, "S1-R1-1")) !== "free") throw new Error("S1-R1-1 is not drawn free");
  const free = await colour(page, "S1-R1-1");
  if (free !== TIER_A) throw new Error(`a free seat of tier A is drawn ${free}, not ${TIER_A}`);
  await accessible(page, "the chart");

  // Zoom and pan by keyboard; 0 shows the whole venue again.
  const chart = page.getByTestId("venue-chart");
  await chart.focus();
  const whole = await page.evaluate(() => window.__chart.view());
  await page.keyboard.press("+");
  await until(page, "+ zooms in", ([s]) => window.__chart.view().scale > s * 1.4, [whole.scale]);
  const zoomed = await page.evaluate(() => window.__chart.view());
  await page.keyboard.press("ArrowLeft");
  await until(page, "an arrow pans", ([x]) => window.__chart.view().x > x, [zoomed.x]);
  await page.keyboard.press("0");
  await until(page, "0 shows it whole", ([s]) => Math.abs(window.__chart.view().scale - s) < 1e-9, [whole.scale]);
  console.log(`keyboard: scale ${whole.scale.toFixed(4)} -> ${zoomed.scale.toFixed(4)} -> back`);

  // Pick a seat on the chart and hold it.
  await clickSeat(page, "S1-R1-2");
  await page.getByTestId("picked").filter({ hasText: "S1-R1-2" }).waitFor();
  await until(page, "a picked seat is drawn as yours", () => window.__chart.shown("S1-R1-2") === "mine");
  await page.getByRole("button", { name: "Hold 1 picked seat" }).click();
  await page.getByTestId("held-seats").filter({ hasText: "S1-R1-2" }).waitFor();
  await until(page, "a held seat is drawn as yours", () => window.__chart.shown("S1-R1-2") === "mine");

  // Another fan buys a seat: it turns sold on the chart.
  const other = await token("chart-other");
  const post = (path, body, key) =>
    fetch(`${BASE}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${other}`, "idempotency-key": key },
      body: JSON.stringify(body),
    });
  const held = await post(`/v1/events/${EVENT}/holds`, { seatIds: ["S1-R2-3"] }, crypto.randomUUID());
  if (held.status !== 201) throw new Error(`the other fan's hold: ${held.status} ${await held.text()}`);
  const ordered = await post("/v1/orders", { holdId: (await held.json()).holdId, paymentToken: "tok_ok" }, crypto.randomUUID());
  if (ordered.status !== 202) throw new Error(`the other fan's order: ${ordered.status} ${await ordered.text()}`);
  const started = Date.now();
  await until(page, "a seat another fan bought turns sold", () => window.__chart.shown("S1-R2-3") === "sold");
  const took = Date.now() - started;
  const sold = await colour(page, "S1-R2-3");
  if (sold !== SOLD) throw new Error(`a sold seat is drawn ${sold}, not ${SOLD}`);
  console.log(`a seat another fan bought left the chart ${took} ms after the order was acknowledged (the projection's delta tick included)`);

  // A venue with its own chart: its seats where it puts them; a best-available hold shows where it landed.
  await page.goto(`${BASE}/#/events/${GIVEN}`);
  await page.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor();
  await until(page, "the given chart draws", () => window.__chart?.shown("A-1-1") === "free");
  const placed = await page.evaluate(() => {
    const v = window.__chart.view();
    const [x, y] = window.__chart.at("A-1-1");
    return [(x - v.x) / v.scale, (y - v.y) / v.scale];
  });
  if (Math.abs(placed[0] - 1500) > 1 || Math.abs(placed[1] - 3000) > 1)
    throw new Error(`A-1-1 is drawn at ${placed}, not where the venue's chart puts it (1500, 3000)`);
  if (process.env.SCREENSHOTS) await page.locator(".chart").screenshot({ path: `${process.env.SCREENSHOTS}/chart-floor.png` });
  await page.getByRole("button", { name: "Best available", exact: true }).click();
  const landed = (await page.getByTestId("held-seats").textContent()).split(", ");
  await until(page, `best available's seats (${landed}) drawn as yours`, (ids) => ids.every((id) => window.__chart.shown(id) === "mine"), landed);
  console.log(`best available landed on ${landed.join(", ")}, drawn as yours`);
  await accessible(page, "the given chart");

  // The phone: the venue's own chart with its floor, then the generated one, pinched.
  const phone = await newPage(await browser.newContext({ viewport: { width: 390, height: 844 }, hasTouch: true }), "phone");
  await openShow(phone, "chart-phone");
  await phone.goto(`${BASE}/#/events/${GIVEN}`);
  await until(phone, "the given chart draws on a phone", () => window.__chart?.shown("A-1-1") === "free");
  if (process.env.SCREENSHOTS) await phone.locator(".chart").screenshot({ path: `${process.env.SCREENSHOTS}/chart-floor-phone.png` });
  await phone.goto(`${BASE}/#/events/${EVENT}`);
  await phone.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor();
  await until(phone, "the generated chart draws on a phone", () => window.__chart?.shown("S1-R1-1") != null);
  // Two fingers spread apart on the chart zoom it in (touch events, as a phone sends them).
  const box = await phone.getByTestId("venue-chart").boundingBox();
  const [cx, cy] = [box.x + box.width / 2, box.y + box.height / 2];
  const before = await phone.evaluate(() => window.__chart.view().scale);
  const cdp = await phone.context().newCDPSession(phone);
  const touch = (type, d) =>
    cdp.send("Input.dispatchTouchEvent", {
      type,
      touchPoints: type === "touchEnd" ? [] : [{ x: cx - d, y: cy, id: 1 }, { x: cx + d, y: cy, id: 2 }],
    });
  await touch("touchStart", 20);
  for (const d of [30, 45, 60, 80]) await touch("touchMove", d);
  await touch("touchEnd", 0);
  await until(phone, "a pinch zooms in", ([s]) => window.__chart.view().scale > s * 1.5, [before]);
  console.log(`pinch: scale ${before.toFixed(4)} -> ${(await phone.evaluate(() => window.__chart.view().scale)).toFixed(4)}`);
} finally {
  await browser.close();
}

// The ops console in a real Chromium: an admin opens /ops while fans hold seats (some lose
// a race: 409); the tiles show the hold rate and the 409 share moving; the invariant the test
// broke shows as a red tile and as the alert Prometheus fires; the seat inspector shows a
// seat's history.
import { BASE, EVENT, accessible, launch, newPage, shot, token } from "./common.mjs";

const browser = await launch();
const page = await newPage(await browser.newContext({ viewport: { width: 1280, height: 1000 } }), "ops");
try {
  await page.goto(`${BASE}/ops`);
  await page.getByLabel("Account name").fill("ops-admin");
  await page.getByLabel("Role").selectOption("admin");
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByRole("heading", { name: "The on-sale, live" }).waitFor();

  // A running load: fans hold seats, two of them race for each seat.
  const fans = await Promise.all([0, 1, 2, 3].map((i) => token(`load-${i}`)));
  const hold = (t, seat) =>
    fetch(`${BASE}/v1/events/${EVENT}/holds`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${t}` },
      body: JSON.stringify({ seatIds: [seat] }),
    });
  const seats = ["S1-R1-1", "S1-R1-2", "S1-R1-3", "S1-R1-4", "S1-R1-5", "S1-R2-1", "S1-R2-2", "S1-R2-3"];
  const load = (async () => {
    for (const [i, seat] of seats.entries()) {
      const [a, b] = await Promise.all([hold(fans[i % 4], seat), hold(fans[(i + 1) % 4], seat)]);
      if (![a.status, b.status].includes(201)) throw new Error(`nobody got ${seat}: ${a.status} ${b.status}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  // A tile's value rises above zero (no code built from a string: the page's policy refuses eval).
  const moving = (id) =>
    page.waitForFunction(
      (id) => {
        const v = document.querySelector(`[data-testid="tile-${id}"]`)?.getAttribute("data-value");
        return v !== "" && v != null && Number(v) > 0;
      },
      id,
      { timeout: 15_000 },
    );
  await moving("holds");
  await moving("conflicts");
  await load;
  const holds = await page.getByTestId("tile-holds").getAttribute("data-value");
  const conflicts = await page.getByTestId("tile-conflicts").getAttribute("data-value");
  console.log(`the console showed ${Number(holds).toFixed(2)} holds/s, ${Number(conflicts).toFixed(0)}% lost races`);
  await page.locator('[data-testid="tile-invariant"].alarm').waitFor();
  // Prometheus scrapes every second and fires the rule at once (no `for`).
  await page.locator('[data-testid="alert-OnsaleInvariantViolated"][data-state="firing"]').waitFor({ timeout: 20_000 });
  console.log("the console shows OnsaleInvariantViolated firing");
  await accessible(page, "console");
  await shot(page, "ops-console");

  // The seat inspector: a seat's history.
  await page.getByLabel("Show id").fill(EVENT);
  await page.getByLabel("Seat", { exact: true }).fill("S1-R1-1");
  await page.getByRole("button", { name: "Show its history" }).click();
  await page.getByTestId("history").getByText("SeatsHeld").first().waitFor();
  await accessible(page, "inspector");
  await shot(page, "ops-seat-inspector");
} catch (e) {
  console.log(`--- the console:\n${await page.locator("body").innerText().catch(() => "?")}`);
  throw e;
} finally {
  await browser.close();
}

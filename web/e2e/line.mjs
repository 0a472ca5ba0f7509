// Who may join a line, in a real Chromium (issue 18): the show (two seats in S1 and a floor of
// three places) admits verified accounts only and asks each join a proof of work. Eve's account
// is not verified: her page says so and gives her no place. Fay's is: her page solves the
// challenge off its thread, joins, passes the line, enters by itself, and takes the floor's
// three places by quantity (a floor has no seats to pick). Hal holds the two seats. Gina joins
// a line with nothing left to sell: she is held back and told seats may come back.
import { BASE, EVENT, accessible, launch, newPage, shot } from "./common.mjs";

async function open(page, sub, verified) {
  await page.goto(`${BASE}/`);
  await page.getByLabel("Account name").fill(sub);
  await page.getByLabel(/A verified account/).setChecked(verified);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.locator(`a[href="#/events/${EVENT}"]`).click();
}

const browser = await launch();
const eve = await newPage(await browser.newContext({ viewport: { width: 390, height: 844 } }), "eve");
const fay = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "fay");
const hal = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "hal");
const gina = await newPage(await browser.newContext({ viewport: { width: 390, height: 844 } }), "gina");
try {
  await open(eve, "eve", false);
  await eve.getByTestId("refused").filter({ hasText: "verified accounts only" }).waitFor({ timeout: 10_000 });
  if ((await eve.getByTestId("position").innerText()).match(/\d/)) throw new Error("eve got a place");
  await accessible(eve, "refused");
  console.log(`eve is told: ${await eve.getByTestId("refused").innerText()}`);

  const started = Date.now();
  await open(fay, "fay", true);
  await fay.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor({ timeout: 30_000 });
  console.log(`fay solved the challenge, passed the line and entered in ${Date.now() - started} ms`);

  await fay.getByRole("button", { name: /FLOOR/ }).click();
  const before = Number(await fay.getByTestId("available-FLOOR").textContent());
  if (before !== 3) throw new Error(`the floor has ${before} places, not 3`);
  await fay.getByLabel("How many tickets").fill("3");
  await fay.getByRole("button", { name: "Tickets on FLOOR" }).click();
  await fay.getByTestId("hold-countdown").filter({ hasText: "left to pay" }).waitFor();
  await fay.waitForFunction(
    ([n]) => Number(document.querySelector('[data-testid="available-FLOOR"]')?.textContent) === n,
    [before - 3],
    { timeout: 5_000 },
  );
  await accessible(fay, "floor");
  await shot(fay, "floor");
  console.log(`fay holds three places on the floor (${before} -> ${before - 3})`);

  await open(hal, "hal", true);
  await hal.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor({ timeout: 30_000 });
  await hal.getByLabel("How many seats").fill("2");
  await hal.getByRole("button", { name: "Best available", exact: true }).click();
  await hal.getByTestId("hold-countdown").filter({ hasText: "left to pay" }).waitFor();
  console.log("hal holds the two seats: nothing is left to sell, but the holds may lapse");
  // The line reads the sale from the seat map: Gina comes once it shows nothing available.
  await fay.waitForFunction(() => document.querySelector('[data-testid="available-S1"]')?.textContent === "0", null, {
    timeout: 5_000,
  });

  await open(gina, "gina", true);
  await gina
    .locator('[data-testid="availability"][data-availability="SEATS_MAY_RETURN"]')
    .waitFor({ timeout: 20_000 });
  await accessible(gina, "held back");
  await shot(gina, "line-held-back");
  console.log(`gina is told: ${await gina.getByTestId("availability").innerText()}`);
} finally {
  await browser.close();
}

// A purchase in a real Chromium, on a show with a waiting room: each fan joins the line, sees
// its place, and is admitted and enters by itself; a fan picks two seats on the drawn map,
// holds them (the countdown runs), pays with `tok_ok`, sees the order confirmed and two tickets with QR codes,
// and a ticket's code changes after its time step. A second fan in another browser context
// watches the same show: the seats leave its map within 2 s. Then the second fan pays with
// `tok_decline`: the page says declined, and the seats come back on the first fan's map. A
// third fan, behind the two the sale admits at once, waits in the line and is told where.
import { BASE, EVENT, accessible, launch, newPage, openShow, shot } from "./common.mjs";

const browser = await launch();
const ann = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "ann");
const bob = await newPage(await browser.newContext({ viewport: { width: 390, height: 844 } }), "bob");
try {
  await openShow(ann, "ann");
  await openShow(bob, "bob");
  for (const page of [ann, bob]) {
    // The line: a place, then in by itself (the sale admits two at once).
    await page.getByRole("heading", { name: "You are in the line" }).waitFor({ state: "detached", timeout: 20_000 });
  }
  await ann.getByRole("button", { name: /Best available/ }).waitFor();

  // The sale admits two at once: Cat, third in line, waits while Ann and Bob are in, and is
  // told her place and that she is next.
  const cat = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "cat");
  await openShow(cat, "cat");
  await cat.locator('[data-testid="ahead"][data-ahead="0"]').waitFor({ timeout: 10_000 });
  const place = await cat.getByTestId("position").innerText();
  if (!/\b3\b/.test(place)) throw new Error(`cat's place: ${place}`);
  await accessible(cat, "line");
  await shot(cat, "waiting-room");
  console.log(`cat waits: ${place}; ${await cat.getByTestId("ahead").innerText()}`);

  for (const page of [ann, bob]) {
    await page.getByRole("button", { name: "S2", exact: true }).click();
    await page.locator('[data-seat="S2-R1-1"]').waitFor();
  }
  const before = Number(await bob.getByTestId("available-S2").textContent());

  // Ann picks two seats on the map and holds them.
  await ann.locator('[data-seat="S2-R1-1"]').click();
  await ann.locator('[data-seat="S2-R1-2"]').focus();
  await ann.keyboard.press("Enter"); // the keyboard picks too
  await ann.getByRole("button", { name: "Hold 2 picked seats" }).click();
  await ann.getByTestId("hold-countdown").filter({ hasText: "left to pay" }).waitFor();
  await accessible(ann, "hold");
  await shot(ann, "hold");

  // Bob's map shows them gone within 2 s.
  const started = Date.now();
  await bob.waitForFunction(
    ([n]) => Number(document.querySelector('[data-testid="available-S2"]')?.textContent) === n,
    [before - 2],
    { timeout: 2_000 },
  );
  console.log(`bob saw ann's two seats go in ${Date.now() - started} ms`);

  // Ann pays; the order is confirmed and two tickets come with QR codes.
  await ann.getByLabel("Card").selectOption("tok_ok");
  await ann.getByRole("button", { name: "Pay" }).click();
  await ann.locator('[data-testid="order-status"][data-status="CONFIRMED"]').waitFor({ timeout: 30_000 });
  const tickets = ann.getByTestId("ticket");
  await ann.waitForFunction(() => document.querySelectorAll('[data-testid="ticket"] img').length === 2, null, { timeout: 30_000 });
  if ((await tickets.count()) !== 2) throw new Error("two tickets");
  await accessible(ann, "order");
  await shot(ann, "tickets");
  const first = await tickets.first().getAttribute("data-code");
  // The code rotates with its time step (15 s): the page fetches the next one by itself.
  await ann.waitForFunction(
    (code) => {
      const now = document.querySelector('[data-testid="ticket"]')?.getAttribute("data-code");
      return now && now !== code;
    },
    first,
    { timeout: 20_000 },
  );
  console.log("the ticket's code rotated");

  // Bob holds the best two available of S2 and pays with a card that is declined.
  await bob.getByLabel("How many seats").fill("2");
  await bob.getByRole("button", { name: "Best available in S2" }).click();
  await bob.getByTestId("hold-countdown").waitFor();
  await bob.getByLabel("Card").selectOption("tok_decline");
  await bob.getByRole("button", { name: "Pay" }).click();
  const failed = bob.locator('[data-testid="order-status"][data-status="FAILED"]');
  await failed.waitFor({ timeout: 30_000 });
  const words = await failed.innerText();
  if ((await failed.getAttribute("data-reason")) !== "CARD_DECLINED" || !/declined/i.test(words))
    throw new Error(`a declined card is not shown as declined: ${words}`);
  console.log(`bob is told: ${words}`);
  await shot(bob, "declined-phone");
  // The seats come back: S2 counts what Ann bought only.
  await ann.goto(`${BASE}/#/events/${EVENT}`);
  await ann.waitForFunction(
    ([n]) => Number(document.querySelector('[data-testid="available-S2"]')?.textContent) === n,
    [before - 2],
    { timeout: 10_000 },
  );
  console.log("bob's declined seats came back");
} catch (e) {
  // What each fan saw when it failed.
  for (const [name, page] of [["ann", ann], ["bob", bob]]) {
    console.log(`--- ${name}'s page:\n${await page.locator("body").innerText().catch(() => "?")}`);
  }
  throw e;
} finally {
  await browser.close();
}

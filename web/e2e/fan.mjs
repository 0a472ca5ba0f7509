// The fan app in a real Chromium, at desktop and phone sizes: a fan signs in, misspells a
// performer and takes the did-you-mean, types the first letters of the performer and takes the
// suggestion with the keyboard, finds the show, opens its
// map live over gRPC-web; another fan holds a seat over REST and the page shows one
// seat fewer within 2 s; axe-core finds no serious accessibility violation on any screen.
import { BASE, EVENT, accessible, launch, newPage, shot, token } from "./common.mjs";

const browser = await launch();
try {
  for (const viewport of [{ width: 1280, height: 900 }, { width: 390, height: 844 }]) {
    const phone = viewport.width < 500;
    const page = await newPage(await browser.newContext({ viewport }), phone ? "phone" : "desktop");
    await page.goto(`${BASE}/`);
    await accessible(page, "sign-in");
    await shot(page, `sign-in${phone ? "-phone" : ""}`);
    await page.getByLabel("Account name").fill(phone ? "phone-fan" : "desk-fan");
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Shows" }).waitFor();
    // Type-ahead: four letters of the performer offer the performer; the keyboard takes it.
    const { performer } = await (await fetch(`${BASE}/v1/events/${EVENT}`)).json();
    const box = page.getByRole("combobox", { name: /Search performers/ });
    // Nothing found: the performer nearest to what was typed is offered, and taken.
    await box.fill(`${performer}x zzzz`);
    await page.getByText("No show matches.").waitFor();
    await page.getByRole("button", { name: performer, exact: true }).click();
    if ((await box.inputValue()) !== performer) throw new Error(`did-you-mean left ${await box.inputValue()}`);
    await page.locator(`a[href="#/events/${EVENT}"]`).waitFor();
    await box.fill("");
    await box.pressSequentially(performer.slice(0, 4), { delay: 30 });
    const options = page.getByRole("listbox").getByRole("option");
    await options.filter({ hasText: performer }).first().waitFor();
    await accessible(page, "type-ahead");
    const texts = await options.allTextContents();
    const at = texts.findIndex((t) => t.startsWith("Performer") && t.includes(performer));
    if (at < 0) throw new Error(`no performer among the suggestions: ${texts.join(" | ")}`);
    for (let i = 0; i <= at; i++) await box.press("ArrowDown");
    const activeId = await box.getAttribute("aria-activedescendant");
    if (activeId !== `suggestion-${at}`) throw new Error(`the keyboard is on ${activeId}, not suggestion-${at}`);
    await box.press("Enter");
    await page.getByRole("listbox").waitFor({ state: "hidden" });
    if ((await box.inputValue()) !== performer) throw new Error(`the box says ${await box.inputValue()}`);
    const link = page.locator(`a[href="#/events/${EVENT}"]`);
    await link.waitFor();
    await accessible(page, "shows");
    await shot(page, `shows${phone ? "-phone" : ""}`);
    await link.click();
    await page.getByTestId("map-live").filter({ hasText: "grpc-web" }).waitFor();
    const before = Number(await page.getByTestId("available-S1").textContent());
    // Another fan takes a seat of S1; the page shows it gone within 2 s.
    const other = await token(`other-${phone ? "p" : "d"}`);
    const held = await fetch(`${BASE}/v1/events/${EVENT}/holds`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${other}` },
      body: JSON.stringify({ seatIds: [phone ? "S1-R1-2" : "S1-R1-1"] }),
    });
    if (held.status !== 201) throw new Error(`the other fan's hold: ${held.status} ${await held.text()}`);
    const started = Date.now();
    await page.waitForFunction(
      ([n]) => Number(document.querySelector('[data-testid="available-S1"]')?.textContent) === n,
      [before - 1],
      { timeout: 2_000 },
    );
    console.log(`${phone ? "phone" : "desktop"}: S1 ${before} -> ${before - 1} in ${Date.now() - started} ms`);
    await page.getByRole("button", { name: "S1", exact: true }).click();
    await page.locator('[data-seat="S1-R1-3"]').waitFor();
    await accessible(page, "seat map");
    await shot(page, `seat-map${phone ? "-phone" : ""}`);
    await page.close();
  }
} finally {
  await browser.close();
}

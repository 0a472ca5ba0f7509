// The venue chart at scale in Chromium (issue 34's goals): a 50,000-seat show's first whole draw
// after its snapshot arrives, then 1,000 seat changes a second for 10 s handed to the map as
// deltas arrive (about 100 a second of about 10 seats; `window.__deliver`, the path a gRPC-web delta takes
// from the stream on): the frames' pace (requestAnimationFrame), each delta's time from arrival
// to its seats repainted, and the long tasks. Prints the figures as JSON; fails if a delta is not
// repainted or a figure is past its bound (below).
import { SCREENSHOTS, launch, newPage, openShow } from "./common.mjs";

const { SECTIONS, ROWS, SEATS } = process.env;
const browser = await launch();
try {
  const page = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "perf");
  await openShow(page, "perf-fan");
  await page.waitForFunction(() => (window.__chart?.draws ?? 0) >= 1, null, { timeout: 30_000 });
  const firstDraw = await page.evaluate(() => {
    const arrived = performance.getEntriesByName("snapshot-arrived")[0].startTime;
    const drawn = performance.getEntriesByName("chart-drawn").find((e) => e.startTime >= arrived);
    return drawn.startTime - arrived;
  });
  const figures = await page.evaluate(
    async ([sections, rows, seats]) => {
      const ids = [];
      for (let s = 1; s <= sections; s++)
        for (let r = 1; r <= rows; r++) for (let n = 1; n <= seats; n++) ids.push(`S${s}-R${r}-${n}`);
      const frames = [];
      const longTasks = [];
      new PerformanceObserver((l) => l.getEntries().forEach((e) => longTasks.push(e.duration))).observe({ entryTypes: ["longtask"] });
      const delivered = new Map();
      const repainted = [];
      new PerformanceObserver((l) =>
        l.getEntries().forEach((e) => {
          for (const seq of e.detail?.seqs ?? []) {
            const at = delivered.get(seq);
            if (at !== undefined) repainted.push(e.startTime - at);
          }
        }),
      ).observe({ entryTypes: ["mark"] });
      let last = performance.now();
      let running = true;
      const frame = (t) => {
        frames.push(t - last);
        last = t;
        if (running) requestAnimationFrame(frame);
      };
      requestAnimationFrame(frame);
      // Each seat changed once: the 10,000 a run changes become sold, spread over the venue.
      const start = window.__chart.view();
      let seq = 10_000_000n;
      let k = 0;
      const began = performance.now();
      await new Promise((done) => {
        const timer = setInterval(() => {
          if (performance.now() - began >= 10_000) {
            clearInterval(timer);
            return done();
          }
          // As many changes as are due at 1,000 a second (timers fire late on a busy page).
          const due = Math.floor(performance.now() - began) - k;
          if (due <= 0) return;
          const batch = [];
          for (let j = 0; j < due; j++) batch.push({ seatId: ids[(k++ * 4_999) % ids.length], status: "SOLD" });
          seq += 1n;
          delivered.set(String(seq), performance.now());
          window.__deliver({ seq, seats: batch });
        }, 10);
      });
      // Until every delivered delta was repainted (or 2 s passed: the check below says which).
      const settled = performance.now();
      while (repainted.length < delivered.size && performance.now() - settled < 2_000)
        await new Promise((r) => requestAnimationFrame(r));
      running = false;
      const q = (xs, p) => {
        const s = [...xs].sort((a, b) => a - b);
        return s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))] : NaN;
      };
      const sold = ids.filter((id) => window.__chart.shown(id) === "sold").length;
      return {
        changes: k,
        deltas: delivered.size,
        repaintedDeltas: repainted.length,
        seatsShownSold: sold,
        framesCounted: frames.length,
        frameP50: q(frames.slice(1), 0.5),
        frameP95: q(frames.slice(1), 0.95),
        frameMax: Math.max(...frames.slice(1)),
        repaintP50: q(repainted, 0.5),
        repaintP95: q(repainted, 0.95),
        repaintMax: Math.max(...repainted),
        longTasks: longTasks.length,
        longestTask: longTasks.length ? Math.max(...longTasks) : 0,
        viewUnchanged: window.__chart.view().scale === start.scale,
      };
    },
    [Number(SECTIONS), Number(ROWS), Number(SEATS)],
  );
  const out = { seats: Number(SECTIONS) * Number(ROWS) * Number(SEATS), firstDrawMs: firstDraw, ...figures };
  if (SCREENSHOTS) {
    // The arena after the run (a fifth of its seats sold), whole and zoomed into a section with
    // a seat pointed at; and on a phone.
    const chart = page.locator(".chart");
    await chart.screenshot({ path: `${SCREENSHOTS}/chart-arena.png` });
    // Zoomed by the wheel about a seat of the best section, the pointer resting on it.
    const box = await page.getByTestId("venue-chart").boundingBox();
    for (let i = 0; i < 4; i++) {
      const [x, y] = await page.evaluate(() => window.__chart.at("S1-R10-20"));
      const before = await page.evaluate(() => window.__chart.view().scale);
      await page.mouse.move(box.x + x, box.y + y);
      await page.mouse.wheel(0, -400);
      await page.waitForFunction(([s]) => window.__chart.view().scale > s, [before]);
    }
    const [x, y] = await page.evaluate(() => window.__chart.at("S1-R10-20"));
    await page.mouse.move(box.x + x, box.y + y);
    await page.getByTestId("chart-seat").filter({ hasText: "Section S1" }).waitFor();
    await chart.screenshot({ path: `${SCREENSHOTS}/chart-arena-zoomed.png` });
    const phone = await newPage(await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2 }), "phone");
    await openShow(phone, "perf-phone");
    await phone.waitForFunction(() => (window.__chart?.draws ?? 0) >= 1);
    await phone.locator(".chart").screenshot({ path: `${SCREENSHOTS}/chart-arena-phone.png` });
    await phone.getByTestId("venue-chart").focus();
    for (let i = 0; i < 3; i++) {
      const before = await phone.evaluate(() => window.__chart.view().scale);
      await phone.keyboard.press("+");
      await phone.waitForFunction(([s]) => window.__chart.view().scale > s, [before]);
    }
    await phone.locator(".chart").screenshot({ path: `${SCREENSHOTS}/chart-arena-phone-zoomed.png` });
  }
  console.log(JSON.stringify(out));
  // Issue 34's goals (a draw < 300 ms, frames on time at 60 Hz, a repaint < 500 ms) are what
  // `make bench-chart` reports its medians against; a test run fails only past bounds ten times
  // theirs, which a broken chart crosses (a whole redraw per delta takes every frame) and a
  // busy shared machine does not (one run's frame p95 was 33 ms while nothing was wrong).
  const failed = [];
  if (!(firstDraw < 3000)) failed.push(`first draw ${firstDraw.toFixed(1)} ms (bound 3,000; goal < 300)`);
  if (!(figures.frameP95 < 167)) failed.push(`frame interval p95 ${figures.frameP95.toFixed(1)} ms (bound 167; goal: a 60 Hz frame)`);
  if (!(figures.repaintMax < 5000)) failed.push(`a delta's seats repainted ${figures.repaintMax.toFixed(1)} ms after it arrived (bound 5,000; goal < 500)`);
  if (figures.repaintedDeltas !== figures.deltas) failed.push(`${figures.deltas - figures.repaintedDeltas} deltas never repainted`);
  if (figures.seatsShownSold !== Math.min(figures.changes, out.seats)) failed.push(`${figures.seatsShownSold} seats shown sold, ${figures.changes} changed`);
  if (failed.length) throw new Error(failed.join("; "));
} finally {
  await browser.close();
}

// A line whose status streams are all refused, in a real Chromium (issue 53, item 2): the
// server has no stream slot for the waiting room (every stream answers 503 TOO_MANY_STREAMS).
// Ivy joins; her page asks for her standing instead, sees her turn come and enters by itself.
import { EVENT, launch, newPage, openShow } from "./common.mjs";

const browser = await launch();
const ivy = await newPage(await browser.newContext({ viewport: { width: 1280, height: 900 } }), "ivy");
try {
  const refused = [];
  const asked = [];
  ivy.on("response", (r) => {
    if (!r.url().endsWith(`/v1/events/${EVENT}/waiting-room`) || r.request().method() !== "GET") return;
    if (r.request().headers()["accept"] === "text/event-stream") refused.push(r.status());
    else asked.push(r.status());
  });
  const started = Date.now();
  await openShow(ivy, "ivy");
  await ivy.getByRole("heading", { name: "You are in the line" }).waitFor({ state: "detached", timeout: 30_000 });
  await ivy.getByRole("button", { name: /Best available/ }).waitFor();
  if (!refused.length || refused.some((s) => s !== 503)) throw new Error(`the streams answered ${refused}`);
  if (!asked.includes(200)) throw new Error(`the standing was never read: ${asked}`);
  console.log(
    `ivy entered in ${Date.now() - started} ms: ${refused.length} stream(s) refused, standing asked ${asked.length} time(s)`,
  );
} finally {
  await browser.close();
}

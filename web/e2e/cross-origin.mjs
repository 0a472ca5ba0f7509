// A page on another origin (ORIGIN, served here) buys through a show's waiting room against the
// API at BASE, with Chromium's own CORS: every call carries the headers the fan app sends (the
// bearer token, X-Onsale-Queue-Token, X-Onsale-Session, Idempotency-Key), so each is preflighted
// and must be allowed by the API's CORS policy.
import { createServer } from "node:http";
import { BASE, EVENT, launch, newPage, token } from "./common.mjs";

const ORIGIN = process.env.ORIGIN;
if (!ORIGIN) throw new Error("ORIGIN is required");
const port = Number(new URL(ORIGIN).port);
const server = createServer((_, res) => {
  res.writeHead(200, { "content-type": "text/html" });
  res.end("<!doctype html><html lang=en><title>another origin</title><main>fan app elsewhere</main></html>");
});
await new Promise((ok) => server.listen(port, "127.0.0.1", ok));

const browser = await launch();
try {
  const page = await newPage(await browser.newContext(), "cross-origin");
  await page.goto(`${ORIGIN}/`);
  const bearer = await token("ada");
  const result = await page.evaluate(
    async ({ base, event, bearer }) => {
      const auth = { authorization: `Bearer ${bearer}` };
      const json = { ...auth, "content-type": "application/json" };
      const call = async (path, init) => {
        const r = await fetch(`${base}${path}`, init);
        const text = await r.text();
        return { status: r.status, body: text ? JSON.parse(text) : null };
      };
      const joined = await call(`/v1/events/${event}/waiting-room`, { method: "POST", headers: json, body: "{}" });
      if (joined.status !== 200 && joined.status !== 201) return { step: "join", ...joined };
      let view;
      for (let i = 0; i < 100; i++) {
        view = await call(`/v1/events/${event}/waiting-room`, {
          headers: { ...auth, "x-onsale-queue-token": joined.body.queueToken },
        });
        if (view.body?.status === "ADMITTED") break;
        await new Promise((ok) => setTimeout(ok, 200));
      }
      if (view.body?.status !== "ADMITTED") return { step: "admitted", ...view };
      const entered = await call(`/v1/events/${event}/enter`, {
        method: "POST",
        headers: json,
        body: JSON.stringify({ admissionToken: view.body.admissionToken }),
      });
      if (entered.status !== 200) return { step: "enter", ...entered };
      const session = { "x-onsale-session": entered.body.sessionId };
      const hold = await call(`/v1/events/${event}/holds`, {
        method: "POST",
        headers: { ...json, ...session },
        body: JSON.stringify({ seatIds: ["S1-R1-1"] }),
      });
      if (hold.status !== 201) return { step: "hold", ...hold };
      const order = await call(`/v1/orders`, {
        method: "POST",
        headers: { ...json, ...session, "idempotency-key": "cross-origin-1" },
        body: JSON.stringify({ holdId: hold.body.holdId, paymentToken: "tok_ok" }),
      });
      return { step: "order", ...order };
    },
    { base: BASE, event: EVENT, bearer },
  );
  console.log(JSON.stringify(result));
  if (result.step !== "order" || result.status !== 202) {
    throw new Error(`a page on ${ORIGIN} could not buy through the line: ${JSON.stringify(result)}`);
  }
} finally {
  await browser.close();
  server.close();
}

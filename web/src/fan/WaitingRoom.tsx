// A show's line: joining it (one place per account), the place and the line moving, live; once
// the line passes the fan, entering by itself; then the session is kept alive (heartbeats)
// while the page is open, and every hold carries it (`X-Onsale-Session`).
import { useEffect, useState } from "preact/hooks";
import type { components } from "../gen/api";
import { type ErrorCode, inWords } from "../rest";
import { currentSession } from "../session";
import { sseOver } from "./sse";

/** The session a fan entered the show with (`POST /v1/events/{id}/enter`, and each heartbeat). */
export type Entry = components["schemas"]["Entry"];

/** Where the fan stands in the line (`GET /v1/events/{id}/waiting-room`, and its stream). */
type Standing = components["schemas"]["Standing"];

const KEY = (eventId: string) => `onsale.entry.${eventId}`;

/** The session this tab entered the show with, if it still has one. */
export function entryOf(eventId: string): Entry | null {
  try {
    const e = JSON.parse(sessionStorage.getItem(KEY(eventId)) ?? "null") as Entry | null;
    return e && Date.parse(e.leaseExpiresAt) > Date.now() ? e : null;
  } catch {
    return null;
  }
}

function auth(): Record<string, string> {
  const s = currentSession();
  return s ? { authorization: `Bearer ${s.token}` } : {};
}

/** A refusal of the API: its problem's code and words for the fan. */
class Refused extends Error {
  constructor(
    readonly code: ErrorCode | undefined,
    detail: string,
  ) {
    super(detail);
  }
}

async function call(method: string, url: string, body?: unknown) {
  const r = await fetch(url, {
    method,
    headers: { ...auth(), "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await r.json().catch(() => ({}));
  if (!r.ok) throw new Refused(json.code, inWords({ ...json, status: r.status }));
  return json;
}

const post = (url: string, body?: unknown) => call("POST", url, body);

/** Solves a challenge in a worker. */
function solveOffThread(challenge: string, bits: number): Promise<{ solution: string; tries: number; ms: number }> {
  const worker = new Worker(new URL("./pow.worker.ts", import.meta.url), { type: "module" });
  return new Promise((resolve, reject) => {
    worker.onmessage = (e) => {
      worker.terminate();
      resolve(e.data);
    };
    worker.onerror = (e) => {
      worker.terminate();
      reject(new Error(e.message));
    };
    worker.postMessage({ challenge, bits });
  });
}

/**
 * Joins the line; when the show asks a proof of work (428 CHALLENGE_REQUIRED), asks a
 * challenge, solves it off the page's thread and joins with it.
 */
async function joinLine(eventId: string, solving: (bits: number | null) => void) {
  const url = `/v1/events/${eventId}/waiting-room`;
  try {
    return await post(url, {});
  } catch (e) {
    if (!(e instanceof Refused) || e.code !== "CHALLENGE_REQUIRED") throw e;
  }
  const c = await call("GET", `${url}/challenge`);
  solving(c.bits);
  const solved = await solveOffThread(c.challenge, c.bits);
  solving(null);
  return post(url, { challenge: c.challenge, solution: solved.solution });
}

/** Keeps `entry` alive while the page shows the show. */
export function useHeartbeat(eventId: string, entry: Entry | null) {
  useEffect(() => {
    if (!entry) return;
    const t = setInterval(async () => {
      try {
        const r = await post(`/v1/events/${eventId}/heartbeat`, { sessionId: entry.sessionId });
        sessionStorage.setItem(KEY(eventId), JSON.stringify({ ...entry, leaseExpiresAt: r.leaseExpiresAt }));
      } catch {
        // The next beat tries again; a lapsed session sends the fan back to the line.
      }
    }, 20_000);
    return () => clearInterval(t);
  }, [eventId, entry?.sessionId]);
}

export function WaitingRoom({ eventId, onEntered }: { eventId: string; onEntered: (e: Entry) => void }) {
  const [standing, setStanding] = useState<Standing | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [solving, setSolving] = useState<number | null>(null);
  const [refused, setRefused] = useState<string | null>(null);
  useEffect(() => {
    const ctl = new AbortController();
    (async () => {
      try {
        const joined = await joinLine(eventId, setSolving);
        setStanding({ status: "WAITING", position: joined.position, eta: joined.eta, availability: "UNKNOWN" });
        const url = `/v1/events/${eventId}/waiting-room`;
        const headers = { ...auth(), "x-onsale-queue-token": joined.queueToken };
        // Shows a standing; true once the fan is done with the line (entered, or expired).
        const settle = async (s: Standing) => {
          setStanding(s);
          if (s.status === "ADMITTED" && s.admissionToken) {
            const entry = (await post(`/v1/events/${eventId}/enter`, { admissionToken: s.admissionToken })) as Entry;
            sessionStorage.setItem(KEY(eventId), JSON.stringify(entry));
            onEntered(entry);
            return true;
          }
          return s.status === "EXPIRED";
        };
        for (;;) {
          let polls = 0;
          try {
            for await (const e of sseOver(url, headers, ctl.signal)) {
              setError(null);
              if (await settle(JSON.parse(e.data) as Standing)) return;
            }
            // The server ended it (it is shutting down): a new one in a second.
            await new Promise((r) => setTimeout(r, 1000));
          } catch (e) {
            if (ctl.signal.aborted) return;
            setError(`Reconnecting to the line… (${(e as Error).message})`);
            polls = 5;
          }
          // The stream was refused or broke (a server with no stream slot to spare answers 503,
          // a client with too many open 429): the standing is asked for every 2 s for a while,
          // then the stream tried again.
          for (let i = 0; i < polls; i++) {
            await new Promise((r) => setTimeout(r, 2000));
            if (ctl.signal.aborted) return;
            try {
              const r = await fetch(url, { headers, signal: ctl.signal });
              if (!r.ok) continue;
              setError(null);
              if (await settle((await r.json()) as Standing)) return;
            } catch {
              if (ctl.signal.aborted) return;
            }
          }
        }
      } catch (e) {
        if (!ctl.signal.aborted) setRefused((e as Error).message);
      }
    })();
    return () => ctl.abort();
  }, [eventId]);
  // Positions up to admittedThrough are in; the fans ahead are those between.
  const ahead =
    standing?.status === "WAITING" && standing.position != null && standing.admittedThrough != null
      ? Math.max(0, standing.position - standing.admittedThrough - 1)
      : null;
  return (
    <section class="card room" aria-labelledby="room-title">
      <h1 id="room-title">You are in the line</h1>
      {standing?.status === "EXPIRED" ? (
        <p role="alert">Your turn passed while you were away. Reload to join the line again.</p>
      ) : (
        <>
          <p class="position" data-testid="position">
            Your place: <strong>{standing?.position ?? "…"}</strong>
          </p>
          <p role="status" aria-live="polite" data-testid="ahead" data-ahead={ahead ?? undefined}>
            {lineInWords(standing, ahead)}
          </p>
          {standing?.availability === "SOLD_OUT" || standing?.availability === "SEATS_MAY_RETURN" ? (
            <p role="alert" data-testid="availability" data-availability={standing.availability}>
              {standing.availability === "SOLD_OUT"
                ? "Sold out: every seat is sold. The line waits in case one comes back."
                : "Every seat is taken for now, but some may come back as holds lapse or payments fail: the line moves again if they do."}
            </p>
          ) : null}
          {solving !== null ? (
            <p role="status" data-testid="solving">
              Checking this is a real device before you join: a few seconds of work for it, so that nobody
              can take thousands of places from one machine.
            </p>
          ) : null}
          <p class="meta">Keep this page open: you enter by yourself when the line reaches you.</p>
        </>
      )}
      {refused ? (
        <p role="alert" class="error" data-testid="refused">
          {refused}
        </p>
      ) : error ? (
        <p class="meta">{error}</p>
      ) : null}
    </section>
  );
}

/** Where the fan stands, in words: how many are ahead and how long it may take. */
function lineInWords(standing: Standing | null, ahead: number | null): string {
  if (standing?.status === "ADMITTED") return "It is your turn: entering…";
  if (standing?.status === "PRE_QUEUE") return "The sale has not opened yet: your place is drawn when it does.";
  if (ahead === null) return "Finding your place…";
  const who = ahead === 0 ? "You are next" : ahead === 1 ? "1 fan ahead of you" : `${ahead} fans ahead of you`;
  const when =
    standing?.eta != null
      ? `about ${Math.max(1, Math.ceil(standing.eta / 60))} min`
      : "the line moves as fans in the sale finish";
  return `${who} · ${when}`;
}

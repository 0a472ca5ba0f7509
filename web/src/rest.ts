// The REST API, typed from the OpenAPI document the server serves (openapi-typescript into
// src/gen/api.d.ts, openapi-fetch to call it), and its problem+json errors in a fan's words.
import createClient from "openapi-fetch";
import type { components, paths } from "./gen/api";
import { currentSession } from "./session";

export const rest = createClient<paths>({ baseUrl: location.origin });

rest.use({
  onRequest({ request }) {
    const s = currentSession();
    if (s && !request.headers.has("authorization")) {
      request.headers.set("authorization", `Bearer ${s.token}`);
    }
    return request;
  },
});

/** A failure's code: the union the OpenAPI document lists (the server's `ErrorCode`). */
export type ErrorCode = components["schemas"]["ErrorCode"];

/** An RFC 7807 problem as the API answers it (the document's `Problem`), with the members some
 * codes carry; any member may be missing from an answer that is not the API's. */
export type Problem = Partial<components["schemas"]["Problem"]>;

/** A fan's words for the codes a fan may meet; the others say what the server said. */
const WORDS: Partial<Record<ErrorCode, string>> = {
  SEAT_UNAVAILABLE: "Someone just took that seat. Pick another one.",
  HOLD_LIMIT: "You already hold as many seats as one fan may.",
  ADMISSION_REQUIRED: "This show has a waiting room: join the line first.",
  HOLD_EXPIRED: "Your hold ran out and the seats went back on sale.",
  HOLD_ORDERED: "These seats are already in an order.",
  SALE_NOT_OPEN: "The sale has not opened yet.",
  SALE_CLOSED: "The sale is over.",
  RATE_LIMITED: "Slow down a little and try again.",
  UNAVAILABLE: "We are busy right now. Try again in a moment.",
  OVERLOADED: "We are busy right now. Try again in a moment.",
  SHOW_MOVING: "We are busy right now. Try again in a moment.",
  UNAUTHENTICATED: "Please sign in again.",
  ORDER_NOT_CANCELLABLE: "This order cannot be cancelled any more.",
  BEST_AVAILABLE_ONLY: "Right now this show hands out the best seats available: choose how many you want.",
  GENERAL_ADMISSION: "This area is general admission: choose how many tickets you want.",
  VERIFIED_ACCOUNT_REQUIRED:
    "This show's line is open to verified accounts only: verify your account (a payment method on file) and come back.",
  CHALLENGE_INVALID: "Joining took too long. Reload the page to try again.",
  CHALLENGE_NOT_SOLVED: "Joining did not work. Reload the page to try again.",
  CHALLENGE_REUSED: "Joining did not work. Reload the page to try again.",
};

/** What to tell a fan about a refusal. */
export function inWords(p: Problem | undefined): string {
  if (!p) return "Something went wrong. Try again.";
  return (p.code && WORDS[p.code]) || p.detail || p.title || "Something went wrong.";
}

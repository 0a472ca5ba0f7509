// Solves a join challenge off the page's thread: the page stays responsive for the seconds it
// takes on a phone.
import { solve } from "./pow";

self.onmessage = (e: MessageEvent<{ challenge: string; bits: number }>) => {
  const started = performance.now();
  const solved = solve(e.data.challenge, e.data.bits);
  self.postMessage({ ...solved, ms: performance.now() - started });
};

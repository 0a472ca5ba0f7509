// The join challenge's proof of work (a show may ask one: `joinChallengeBits`): find a counter
// whose SHA-256 with the challenge starts with `bits` zero bits, as the server checks it
// (SHA-256 of the challenge, ":" and the answer). The challenge is hashed once and its state
// copied for each try, as the server's own solver (loadgen, tests) does.
import { sha256 } from "@noble/hashes/sha2.js";

export function leadingZeroBits(d: Uint8Array): number {
  let n = 0;
  for (const b of d) {
    if (b === 0) {
      n += 8;
      continue;
    }
    return n + Math.clz32(b) - 24;
  }
  return n;
}

export interface Solved {
  solution: string;
  tries: number;
}

export function solve(challenge: string, bits: number): Solved {
  const prefix = sha256.create().update(new TextEncoder().encode(`${challenge}:`));
  const work = sha256.create();
  // The counter's decimal digits, written in place: no string or array per try.
  const digits = new Uint8Array(20);
  const out = new Uint8Array(32);
  for (let n = 0; ; n++) {
    let len = 0;
    for (let v = n; ; v = Math.floor(v / 10)) {
      digits[19 - len++] = 48 + (v % 10);
      if (v < 10) break;
    }
    prefix._cloneInto(work).update(digits.subarray(20 - len));
    work.digestInto(out);
    if (leadingZeroBits(out) >= bits) return { solution: String(n), tries: n + 1 };
  }
}

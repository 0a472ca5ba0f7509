// Who is signed in: a bearer token kept for the tab (sessionStorage), minted by the local
// stack's development sign-in. A deployment puts its identity provider's token here.
import { useEffect, useState } from "preact/hooks";
import type { components } from "./gen/api";

/** The signed-in account: what the app keeps of the development sign-in's answer. */
export type Session = Pick<components["schemas"]["DevToken"], "token" | "sub" | "role">;

const KEY = "onsale.session";
const listeners = new Set<() => void>();

export function currentSession(): Session | null {
  try {
    const raw = sessionStorage.getItem(KEY);
    return raw ? (JSON.parse(raw) as Session) : null;
  } catch {
    return null;
  }
}

export function setSession(s: Session | null) {
  if (s) sessionStorage.setItem(KEY, JSON.stringify(s));
  else sessionStorage.removeItem(KEY);
  listeners.forEach((l) => l());
}

/** The session, re-rendering the component when it changes. */
export function useSession(): Session | null {
  const [s, set] = useState(currentSession());
  useEffect(() => {
    const l = () => set(currentSession());
    listeners.add(l);
    return () => void listeners.delete(l);
  }, []);
  return s;
}

// The fan app at `/` (hash routes: `#/` the shows, `#/events/ID` one show, `#/orders/ID`
// an order and its tickets) and the ops console at `/ops`.
import { useEffect, useState } from "preact/hooks";
import { OrderPage } from "./fan/OrderPage";
import { Console } from "./ops/Console";
import { ShowList } from "./fan/ShowList";
import { ShowPage } from "./fan/ShowPage";
import { SignIn } from "./SignIn";
import { setSession, useSession } from "./session";

function useHash(): string {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return hash;
}

export function App() {
  const session = useSession();
  const hash = useHash();
  const show = /^#\/events\/([0-9a-f-]{36})/.exec(hash)?.[1];
  const order = /^#\/orders\/([A-Za-z0-9_-]+)/.exec(hash)?.[1];
  return (
    <>
      <header class="top">
        <a href="#/" class="brand">
          onsale
        </a>
        {session ? (
          <span class="who">
            {session.sub} ({session.role}){" "}
            <button type="button" onClick={() => setSession(null)}>
              Sign out
            </button>
          </span>
        ) : null}
      </header>
      <main>
        {!session ? (
          <SignIn />
        ) : location.pathname === "/ops" ? (
          <Console />
        ) : show ? (
          <ShowPage key={show} eventId={show} />
        ) : order ? (
          <OrderPage orderId={order} />
        ) : (
          <ShowList />
        )}
      </main>
    </>
  );
}

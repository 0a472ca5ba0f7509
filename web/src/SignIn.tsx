// The local stack's sign-in: `POST /v1/dev/token` mints a token (development mode only; a
// production deployment has no such route and signs fans in with its identity provider).
import { useState } from "preact/hooks";
import { setSession, type Session } from "./session";

export function SignIn() {
  const [sub, setSub] = useState("");
  const [role, setRole] = useState<Session["role"]>("fan");
  const [verified, setVerified] = useState(true);
  const [error, setError] = useState<string | null>(null);
  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    const r = await fetch("/v1/dev/token", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ sub, role, verified }),
    });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) {
      setError(r.status === 404 ? "Sign-in is only for the local stack." : body.detail ?? "Sign-in failed.");
      return;
    }
    setSession({ token: body.token, sub: body.sub, role: body.role });
  }
  return (
    <form class="card signin" onSubmit={submit} aria-labelledby="signin-title">
      <h1 id="signin-title">Sign in to the local stack</h1>
      <label>
        Account name
        <input name="sub" required maxLength={128} pattern="[!-~]+" value={sub} onInput={(e) => setSub(e.currentTarget.value)} />
      </label>
      <label>
        Role
        <select name="role" value={role} onChange={(e) => setRole(e.currentTarget.value as Session["role"])}>
          <option value="fan">Fan</option>
          <option value="admin">Admin (the ops console)</option>
          <option value="auditor">Auditor</option>
        </select>
      </label>
      <label class="check">
        <input type="checkbox" name="verified" checked={verified} onChange={(e) => setVerified(e.currentTarget.checked)} />
        A verified account (some shows admit only those to their line)
      </label>
      <button type="submit">Sign in</button>
      {error ? <p role="alert" class="error">{error}</p> : null}
    </form>
  );
}

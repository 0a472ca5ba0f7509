// The local stack's sign-in: `POST /v1/dev/token` mints a token (development mode only; a
// production deployment has no such route and signs fans in with its identity provider).
import { useState } from "preact/hooks";
import { rest, type Problem } from "./rest";
import { setSession, type Session } from "./session";

export function SignIn() {
  const [sub, setSub] = useState("");
  const [role, setRole] = useState<Session["role"]>("fan");
  const [verified, setVerified] = useState(true);
  const [error, setError] = useState<string | null>(null);
  async function submit(e: Event) {
    e.preventDefault();
    setError(null);
    const { data, error: refused, response } = await rest.POST("/v1/dev/token", { body: { sub, role, verified } });
    if (!data) {
      const problem = refused as Problem | undefined;
      setError(response.status === 404 ? "Sign-in is only for the local stack." : problem?.detail ?? "Sign-in failed.");
      return;
    }
    setSession({ token: data.token, sub: data.sub, role: data.role });
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

/** Sign-in with an API key. The key is sent once to POST /v1/session and never stored; the field is cleared after. */
import { useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError } from "../api";
import type { SessionObject } from "../types";

interface Props {
  notice: string | null;
  onSignedIn(session: SessionObject): void;
}

export function SignIn({ notice, onSignedIn }: Props) {
  const [key, setKey] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(notice);
  const input = useRef<HTMLInputElement>(null);

  useEffect(() => {
    input.current?.focus();
  }, []);
  useEffect(() => setError(notice), [notice]);

  const submit = async (event: Event) => {
    event.preventDefault();
    const value = key.trim();
    if (!value || busy) {
      if (!value) setError("Enter your API key.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      const session = await api.signIn(value);
      setKey("");
      if (input.current) input.current.value = "";
      onSignedIn(session);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) setError(err.message || "That API key was not accepted.");
      else if (err instanceof ApiError && err.kind === "network") setError("Network error: the service could not be reached.");
      else setError(err instanceof Error ? err.message : "Sign-in failed.");
      input.current?.focus();
    } finally {
      setBusy(false);
    }
  };

  return (
    <main class="signin">
      <form class="signin-card" onSubmit={submit} noValidate aria-labelledby="signin-title">
        <div class="brand">
          <span class="brand-mark" aria-hidden="true">
            fc
          </span>
          <h1 id="signin-title">fleetchat</h1>
        </div>
        <p class="signin-hint">Sign in with your fleetchat API key. It is used once to start a session and never stored in this browser.</p>
        <label for="api-key" class="field-label">
          API key
        </label>
        <input
          ref={input}
          id="api-key"
          data-testid="api-key"
          type="password"
          name="api_key"
          autocomplete="off"
          spellcheck={false}
          placeholder="sk-…"
          value={key}
          onInput={(e) => setKey((e.currentTarget as HTMLInputElement).value)}
          aria-invalid={error ? "true" : undefined}
          aria-describedby={error ? "sign-in-error" : undefined}
        />
        {error && (
          <p id="sign-in-error" class="signin-error" data-testid="sign-in-error" role="alert">
            {error}
          </p>
        )}
        <button type="submit" class="btn btn-primary" data-testid="sign-in" disabled={busy}>
          {busy ? "Signing in…" : "Sign in"}
        </button>
      </form>
    </main>
  );
}

/** Session gate: the sign-in screen, or the chat. The composer's draft lives here so a session expiry loses nothing. */
import { useCallback, useEffect, useState } from "preact/hooks";
import { api, ApiError, setUnauthorizedHandler } from "../api";
import { setConversationHash } from "../route";
import type { SessionObject } from "../types";
import { ChatApp } from "./ChatApp";
import { SignIn } from "./SignIn";

type Auth = "checking" | "signed-out" | "signed-in";

export function App() {
  const [auth, setAuth] = useState<Auth>("checking");
  const [session, setSession] = useState<SessionObject | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [draft, setDraft] = useState("");

  useEffect(() => {
    setUnauthorizedHandler(() => {
      setSession(null);
      setAuth("signed-out");
      setNotice("Your session has expired. Please sign in again.");
    });
    api
      .getSession()
      .then((s) => {
        setSession(s);
        setAuth("signed-in");
      })
      .catch((err: unknown) => {
        setAuth("signed-out");
        if (!(err instanceof ApiError && err.status === 401)) {
          setNotice(err instanceof Error ? err.message : "Could not reach the service.");
        }
      });
    return () => setUnauthorizedHandler(null);
  }, []);

  const signedIn = useCallback((s: SessionObject) => {
    setNotice(null);
    setSession(s);
    setAuth("signed-in");
  }, []);

  const signOut = useCallback(async () => {
    try {
      await api.signOut();
    } catch {
      /* the cookie is dropped server-side on the next 401 anyway */
    }
    setSession(null);
    setDraft("");
    setNotice(null);
    setConversationHash(null, true);
    setAuth("signed-out");
  }, []);

  if (auth === "checking") {
    return (
      <div class="boot" role="status">
        Loading…
      </div>
    );
  }
  if (auth === "signed-out" || !session) return <SignIn notice={notice} onSignedIn={signedIn} />;
  return <ChatApp session={session} draft={draft} setDraft={setDraft} onSignOut={() => void signOut()} />;
}

/** Share links of the open chat: make one (a read-only snapshot of the branch on screen, for so many days), copy it,
 * see the live ones and revoke any. Personal data in the chat is named before anything is shared: the link is made
 * only after "Share anyway". A link's address is shown once, when it is made (the service keeps only a hash). */
import { useEffect, useState } from "preact/hooks";
import { api, ApiError } from "../api";
import { copyText } from "../clipboard";
import type { ShareLink } from "../types";
import { Modal } from "./Modal";

interface Props {
  conversationId: string;
  onClose(): void;
}

const DAYS = [1, 7, 30, 90];

function message(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  return "The link could not be made.";
}

function day(seconds: number): string {
  return new Date(seconds * 1000).toLocaleDateString(undefined, { day: "numeric", month: "short", year: "numeric" });
}

export function ShareDialog({ conversationId, onClose }: Props) {
  const [days, setDays] = useState(30);
  const [links, setLinks] = useState<ShareLink[] | null>(null);
  const [made, setMade] = useState<string | null>(null);
  const [personal, setPersonal] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [copied, setCopied] = useState(false);
  const [error, setError] = useState<string | null>(null);

  const refresh = () =>
    api
      .listShares(conversationId)
      .then((found) => setLinks(found.data))
      .catch((err) => setError(message(err)));
  useEffect(() => {
    void refresh();
  }, [conversationId]);

  const create = async (acknowledgePii: boolean) => {
    setBusy(true);
    setError(null);
    try {
      const link = await api.createShare(conversationId, days, acknowledgePii);
      setMade(`${window.location.origin}${link.url}`);
      setPersonal(null);
      await refresh();
    } catch (err) {
      if (err instanceof ApiError && err.code === "pii_in_share") setPersonal(err.message);
      else setError(message(err));
    } finally {
      setBusy(false);
    }
  };

  const revoke = async (id: string) => {
    setBusy(true);
    setError(null);
    try {
      await api.revokeShare(id);
      await refresh();
    } catch (err) {
      setError(message(err));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Modal labelledBy="share-title" testId="share-dialog" class="share-dialog" onClose={onClose} initialFocus="#share-days">
      <h2 id="share-title">Share this chat</h2>
      <p class="field-hint">
        Anyone with the link can read a copy of the chat as it is now (the messages on screen; later messages are not
        added). Search engines are asked not to index it. You can revoke it at any time.
      </p>
      <div class="share-make">
        <label for="share-days" class="field-label">
          Link works for
        </label>
        <select id="share-days" data-testid="share-days" value={String(days)} onChange={(e) => setDays(Number((e.currentTarget as HTMLSelectElement).value))}>
          {DAYS.map((d) => (
            <option key={d} value={String(d)}>
              {d === 1 ? "1 day" : `${d} days`}
            </option>
          ))}
        </select>
        <button type="button" class="btn btn-primary" data-testid="share-create" disabled={busy} onClick={() => void create(false)}>
          Create link
        </button>
      </div>
      {personal && (
        <div class="share-warning" role="alert" data-testid="share-pii">
          <p>{personal.replace(/ Send acknowledge_pii: true to share it anyway\.$/, "")}</p>
          <button type="button" class="btn" data-testid="share-anyway" disabled={busy} onClick={() => void create(true)}>
            Share anyway
          </button>
        </div>
      )}
      {made && (
        <div class="share-made">
          <input aria-label="The new link" data-testid="share-url" readOnly value={made} onFocus={(e) => (e.currentTarget as HTMLInputElement).select()} />
          <button
            type="button"
            class="btn"
            data-testid="share-copy"
            onClick={async () => {
              if (await copyText(made)) {
                setCopied(true);
                setTimeout(() => setCopied(false), 1500);
              }
            }}
          >
            {copied ? "Copied" : "Copy"}
          </button>
        </div>
      )}
      {error && (
        <p class="form-error" role="alert" data-testid="share-error">
          {error}
        </p>
      )}
      <h3 class="share-list-title">Links to this chat</h3>
      <ul class="share-links" data-testid="share-links">
        {(links ?? []).map((link) => (
          <li key={link.id} class="share-link" data-testid="share-link">
            <span>
              Made {day(link.created_at)}, works until {day(link.expires_at)}
            </span>
            <button type="button" class="btn btn-small" data-testid="share-revoke" disabled={busy} onClick={() => void revoke(link.id)}>
              Revoke
            </button>
          </li>
        ))}
        {links !== null && links.length === 0 && <li class="field-hint">No links yet.</li>}
      </ul>
      <div class="dialog-actions">
        <button type="button" class="btn" onClick={onClose}>
          Close
        </button>
      </div>
    </Modal>
  );
}

/** An error a person can act on: what happened, the server's words, a live retry-after countdown, Retry. */
import { useEffect, useState } from "preact/hooks";
import type { ChatError } from "../hooks/useChat";
import { CloseIcon } from "./icons";

interface Props {
  error: ChatError;
  onDismiss(): void;
}

export function ErrorNotice({ error, onDismiss }: Props) {
  const { view, retry } = error;
  const [left, setLeft] = useState<number>(view.countdown ?? 0);

  useEffect(() => {
    const total = view.countdown ?? 0;
    setLeft(total);
    if (total <= 0) return;
    const endsAt = Date.now() + total * 1000;
    const timer = setInterval(() => {
      const remaining = Math.max(0, Math.ceil((endsAt - Date.now()) / 1000));
      setLeft(remaining);
      if (remaining <= 0) clearInterval(timer);
    }, 250);
    return () => clearInterval(timer);
  }, [error.key, view.countdown]);

  const waiting = left > 0;
  return (
    <div class="error-notice" data-testid="error" role="alert">
      <div class="error-text">
        <strong class="error-title">{view.title}</strong>
        {view.detail && view.detail !== view.title && <span class="error-detail">{view.detail}</span>}
        {waiting && (
          <span class="retry-countdown" data-testid="retry-countdown" aria-live="off">
            {view.countdownLabel.replace("{n}", String(left))}
          </span>
        )}
      </div>
      <div class="error-actions">
        {retry && (
          <button type="button" class="btn btn-small" data-testid="retry" disabled={waiting} onClick={retry}>
            {waiting ? `Retry in ${left} s` : "Retry"}
          </button>
        )}
        <button type="button" class="icon-btn small" aria-label="Dismiss error" onClick={onDismiss}>
          <CloseIcon />
        </button>
      </div>
    </div>
  );
}

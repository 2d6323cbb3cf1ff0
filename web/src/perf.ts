/** User-timing marks the browser tests read: first token parsed from the network, and first token painted. */

export const FIRST_TOKEN_RECEIVED = "fleetchat:first-token-received";
export const FIRST_TOKEN_VISIBLE = "fleetchat:first-token-visible";

let visiblePending = false;

function mark(name: string): void {
  try {
    performance.mark(name);
  } catch {
    /* user timing unavailable */
  }
}

/** At the start of each send. */
export function resetFirstTokenMarks(): void {
  visiblePending = false;
  try {
    performance.clearMarks(FIRST_TOKEN_RECEIVED);
    performance.clearMarks(FIRST_TOKEN_VISIBLE);
  } catch {
    /* ignore */
  }
}

/** When the first content delta of an answer is parsed. */
export function markFirstTokenReceived(): void {
  mark(FIRST_TOKEN_RECEIVED);
  visiblePending = true;
}

/** After the answer's first content is in the DOM: mark once the next frame runs (the DOM has been painted). */
export function markFirstTokenVisibleAfterPaint(): void {
  if (!visiblePending) return;
  visiblePending = false;
  requestAnimationFrame(() => mark(FIRST_TOKEN_VISIBLE));
}

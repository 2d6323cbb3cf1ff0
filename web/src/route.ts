/** Hash routing: `#/c/conv_...` is the open conversation; anything else is a new chat. */

const ROUTE = /^#\/c\/([A-Za-z0-9_-]+)$/;

export function conversationFromHash(hash: string = location.hash): string | null {
  const match = ROUTE.exec(hash);
  return match ? decodeURIComponent(match[1]!) : null;
}

export function hashFor(id: string | null): string {
  return id ? `#/c/${id}` : "#/";
}

/** Reflect the open conversation in the URL without adding a history entry per stream. */
export function setConversationHash(id: string | null, replace = false): void {
  const hash = hashFor(id);
  if (location.hash === hash || (!id && (location.hash === "" || location.hash === "#"))) return;
  if (replace) history.replaceState(null, "", hash);
  else history.pushState(null, "", hash);
}

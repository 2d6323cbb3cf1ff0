/** The sidebar's conversation list: newest first, cursor-paged, with local upserts while a new chat streams. */
import { useCallback, useRef, useState } from "preact/hooks";
import { api } from "../api";
import type { ConversationSummary } from "../types";

export interface ConversationListState {
  items: ConversationSummary[];
  hasMore: boolean;
  nextCursor: string | null;
  loading: boolean;
  loaded: boolean;
  error: string | null;
}

const initial: ConversationListState = {
  items: [],
  hasMore: false,
  nextCursor: null,
  loading: false,
  loaded: false,
  error: null,
};

function byNewest(a: ConversationSummary, b: ConversationSummary): number {
  return (b.updated_at ?? 0) - (a.updated_at ?? 0);
}

export function useConversations() {
  const [state, setStateRaw] = useState<ConversationListState>(initial);
  const ref = useRef(state);
  const setState = useCallback((update: (s: ConversationListState) => ConversationListState) => {
    ref.current = update(ref.current);
    setStateRaw(ref.current);
  }, []);
  const inflight = useRef<Promise<void> | null>(null);

  const loadMore = useCallback((): Promise<void> => {
    if (inflight.current) return inflight.current;
    const cursor = ref.current.loaded ? ref.current.nextCursor : null;
    if (ref.current.loaded && (!ref.current.hasMore || !cursor)) return Promise.resolve();
    setState((s) => ({ ...s, loading: true, error: null }));
    const run = api
      .listConversations(cursor)
      .then((page) => {
        setState((s) => {
          const seen = new Set(s.items.map((c) => c.id));
          return {
            ...s,
            items: [...s.items, ...page.data.filter((c) => !seen.has(c.id))],
            hasMore: Boolean(page.has_more && page.next_cursor),
            nextCursor: page.next_cursor ?? null,
            loading: false,
            loaded: true,
          };
        });
      })
      .catch((err: Error) => {
        setState((s) => ({ ...s, loading: false, error: err.message || "Could not load conversations." }));
      })
      .finally(() => {
        inflight.current = null;
      });
    inflight.current = run;
    return run;
  }, [setState]);

  /** Load every remaining page (used while searching titles). */
  const loadAll = useCallback(async (): Promise<void> => {
    for (let guard = 0; guard < 500; guard++) {
      await loadMore();
      const s = ref.current;
      if (!s.hasMore || s.error) return;
    }
  }, [loadMore]);

  /** Re-read the first page (new titles, new order) and merge it over what is loaded. */
  const refresh = useCallback(async (): Promise<void> => {
    try {
      const page = await api.listConversations(null);
      setState((s) => {
        const fresh = new Set(page.data.map((c) => c.id));
        const olderLoaded = s.items.filter((c) => !fresh.has(c.id));
        // Items that were only known locally (a just-created chat the page does not show yet) stay on top.
        const onlyLocal = olderLoaded.filter((c) => c.version === -1);
        const rest = olderLoaded.filter((c) => c.version !== -1);
        const usePage = !s.loaded || s.items.length <= page.data.length;
        return {
          ...s,
          items: [...onlyLocal, ...page.data, ...rest.sort(byNewest)],
          hasMore: usePage ? Boolean(page.has_more && page.next_cursor) : s.hasMore,
          nextCursor: usePage ? (page.next_cursor ?? null) : s.nextCursor,
          loaded: true,
          error: null,
        };
      });
    } catch {
      /* keep the current list */
    }
  }, [setState]);

  /** A chat that exists only since its first answer started: shown on top until the server lists it. */
  const addLocal = useCallback(
    (id: string, title: string) => {
      const now = Math.floor(Date.now() / 1000);
      setState((s) =>
        s.items.some((c) => c.id === id)
          ? s
          : {
              ...s,
              items: [
                { id, title, created_at: now, updated_at: now, version: -1, message_count: 0, expires_at: null },
                ...s.items,
              ],
            },
      );
    },
    [setState],
  );

  const upsert = useCallback(
    (conversation: ConversationSummary) => {
      setState((s) => {
        const { id, title, created_at, updated_at, version, message_count, expires_at } = conversation;
        const summary = { id, title, created_at, updated_at, version, message_count, expires_at };
        const index = s.items.findIndex((c) => c.id === id);
        if (index === -1) return s;
        const items = s.items.slice();
        items[index] = { ...items[index]!, ...summary };
        return { ...s, items };
      });
    },
    [setState],
  );

  const remove = useCallback(
    (id: string) => setState((s) => ({ ...s, items: s.items.filter((c) => c.id !== id) })),
    [setState],
  );

  const reset = useCallback(() => setState(() => initial), [setState]);

  return { state, loadMore, loadAll, refresh, addLocal, upsert, remove, reset };
}

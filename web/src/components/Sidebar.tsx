/** New chat, title search (over loaded items; loads the remaining pages while searching), the list, Load more; and,
 * below the titles, the messages that hold the words searched (the server's full-text search). */
import { useEffect, useMemo, useState } from "preact/hooks";
import type { ConversationSearchHit } from "../conversationSearch";
import type { ConversationListState } from "../hooks/useConversations";
import { useMessageSearch } from "../hooks/useMessageSearch";
import type { ConversationSummary } from "../types";
import { ConversationItem, UNTITLED } from "./ConversationItem";
import { PlusIcon, SearchIcon } from "./icons";
import { MessageSearchResults } from "./MessageSearchResults";

interface Props {
  open: boolean;
  list: ConversationListState;
  activeId: string | null;
  email?: string;
  tenantName: string;
  onNewChat(): void;
  onSelect(id: string): void;
  /** A message found by the search: open its conversation there. */
  onOpenHit(hit: ConversationSearchHit): void;
  onRename(id: string, title: string): Promise<void>;
  onDelete(conversation: ConversationSummary): void;
  onLoadMore(): void;
  onLoadAll(): void;
}

export function Sidebar(props: Props) {
  const [query, setQuery] = useState("");
  const needle = query.trim().toLowerCase();
  const { list } = props;
  const messageSearch = useMessageSearch(query);

  useEffect(() => {
    if (needle && list.hasMore && !list.loading && !list.error) props.onLoadAll();
  }, [needle, list.hasMore, list.loading, list.error]);

  const shown = useMemo(
    () =>
      needle
        ? list.items.filter((c) => (c.title?.trim() || UNTITLED).toLowerCase().includes(needle))
        : list.items,
    [needle, list.items],
  );

  return (
    <aside id="sidebar" class={`sidebar${props.open ? " open" : ""}`} aria-label="Conversations">
      <div class="sidebar-top">
        <button type="button" class="btn new-chat" data-testid="new-chat" onClick={props.onNewChat}>
          <PlusIcon />
          <span>New chat</span>
        </button>
        <div class="search">
          <SearchIcon class="search-icon" />
          <label for="conversation-search" class="sr-only">
            Search conversations: titles and messages
          </label>
          <input
            id="conversation-search"
            data-testid="search"
            type="search"
            placeholder="Search chats"
            autocomplete="off"
            value={query}
            onInput={(e) => setQuery((e.currentTarget as HTMLInputElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Escape" && query) {
                e.preventDefault();
                setQuery("");
              } else if (e.key === "Enter") {
                // Ask again now: a message reaches the search a moment after its answer.
                e.preventDefault();
                messageSearch.refresh();
              }
            }}
          />
        </div>
      </div>
      <nav class="conv-nav" aria-label="Conversation list">
        {list.error && (
          <p class="sidebar-note" role="status">
            {list.error}
          </p>
        )}
        {!list.loaded && list.loading && <p class="sidebar-note">Loading…</p>}
        {list.loaded && shown.length === 0 && (
          <p class="sidebar-note">{needle ? (list.loading ? "Searching…" : "No chats match.") : "No chats yet."}</p>
        )}
        <ul class="conv-list">
          {shown.map((c) => (
            <ConversationItem
              key={c.id}
              conversation={c}
              active={c.id === props.activeId}
              onSelect={props.onSelect}
              onRename={props.onRename}
              onDelete={props.onDelete}
            />
          ))}
        </ul>
        {list.hasMore && (
          <button
            type="button"
            class="btn btn-ghost load-more"
            data-testid="load-more"
            onClick={props.onLoadMore}
            disabled={list.loading}
          >
            {list.loading ? "Loading…" : "Load more"}
          </button>
        )}
        {messageSearch.state.status !== "idle" && (
          <MessageSearchResults state={messageSearch.state} onOpen={props.onOpenHit} />
        )}
      </nav>
      <div class="sidebar-foot" title={props.tenantName}>
        <span class="account-name">{props.tenantName}</span>
      </div>
    </aside>
  );
}

/** The sidebar's "Messages" section: the server's hits for the words searched, each opening its conversation at the
 * message. The snippet is the user's text: built as text nodes and <mark> elements, never as HTML. */
import { highlightSegments, speaker, type ConversationSearchHit } from "../conversationSearch";
import type { MessageSearchState } from "../hooks/useMessageSearch";
import { UNTITLED } from "./ConversationItem";

interface Props {
  state: MessageSearchState;
  onOpen(hit: ConversationSearchHit): void;
}

function note(state: MessageSearchState): string {
  if (state.status === "searching") return "Searching…";
  if (state.status === "error") return `Could not search messages: ${state.error ?? "the search failed."}`;
  if (state.hits.length === 0) return "No messages match.";
  return state.hits.length === 1 ? "1 message matches." : `${state.hits.length} messages match.`;
}

export function MessageSearchResults({ state, onOpen }: Props) {
  const searching = state.status === "searching";
  const text = note(state);
  const empty = state.status === "done" && state.hits.length === 0;
  // Shown: "Searching…" (over the hits of the same query asked again, dimmed), an error, "No messages match."; the
  // count only to screen readers.
  const shown = state.status !== "done" || empty;
  return (
    <section
      class="message-search"
      data-testid="message-search-results"
      data-status={state.status}
      data-query={state.query ?? undefined}
      aria-labelledby="message-search-heading"
      aria-busy={searching ? "true" : undefined}
    >
      <h2 id="message-search-heading" class="sidebar-heading">
        Messages
      </h2>
      {/* One live region for every state, so that each change is announced. */}
      <p
        class={`sidebar-note${state.status === "error" ? " sidebar-error" : ""}${shown ? "" : " sr-only"}`}
        role="status"
        data-testid={empty ? "message-search-empty" : state.status === "error" ? "message-search-error" : undefined}
      >
        {text}
      </p>
      {state.hits.length > 0 && (
        <ul class={`hit-list${searching ? " stale" : ""}`}>
          {state.hits.map((hit) => {
            const title = hit.title?.trim() || UNTITLED;
            const who = speaker(hit.role);
            return (
              <li key={`${hit.conversation_id}:${hit.message_id}`}>
                <button
                  type="button"
                  class="hit"
                  data-testid="message-hit"
                  data-conversation-id={hit.conversation_id}
                  data-message-id={hit.message_id}
                  aria-label={`${who} in “${title}”: ${hit.snippet}`}
                  onClick={() => onOpen(hit)}
                >
                  <span class="hit-title" data-testid="message-hit-title">
                    {title}
                  </span>
                  <span class="hit-text">
                    <span class="hit-role">{who}: </span>
                    <span class="hit-snippet" data-testid="message-hit-snippet">
                      {highlightSegments(hit.snippet, hit.highlights).map((segment, i) =>
                        segment.marked ? <mark key={i}>{segment.text}</mark> : segment.text,
                      )}
                    </span>
                  </span>
                </button>
              </li>
            );
          })}
        </ul>
      )}
    </section>
  );
}

/** The scrollable conversation: messages, auto-scroll while the answer streams (unless the reader scrolled up), a
 * message the search found brought into view and marked for a moment, and the code blocks' Copy buttons (one
 * delegated listener; the buttons live in sanitized markdown HTML). */
import { useEffect, useLayoutEffect, useRef, useState } from "preact/hooks";
import { contextCutIndex, type UiMessage } from "../chatModel";
import { copyText } from "../clipboard";
import type { ChatController } from "../hooks/useChat";
import { useFeedback } from "../hooks/useFeedback";
import type { Citation } from "../types";
import { FeedbackBar } from "./FeedbackBar";
import { AssistantMessage, UserMessage, type VersionControl } from "./Message";

interface Props {
  chat: ChatController;
  onOpenCitation(citation: Citation): void;
}

/** How long a found message stays marked (its mark fades out over this; styles.css `.message.found`). */
export const FOUND_MARK_MS = 2600;

async function onCopyClick(event: MouseEvent) {
  const target = event.target as Element | null;
  const button = target?.closest?.("button.copy-code") as HTMLButtonElement | null;
  if (!button) return;
  const code = button.closest(".code-block")?.querySelector("pre code");
  if (!code) return;
  const ok = await copyText(code.textContent ?? "");
  button.textContent = ok ? "Copied" : "Copy failed";
  button.classList.toggle("copied", ok);
  setTimeout(() => {
    if (button.isConnected) {
      button.textContent = "Copy";
      button.classList.remove("copied");
    }
  }, 1500);
}

export function MessageList({ chat, onOpenCitation }: Props) {
  const scroller = useRef<HTMLDivElement>(null);
  const pinned = useRef(true);
  const { messages, streaming, editing, conversationId, persisted, found } = chat;
  const [marked, setMarked] = useState<number | null>(null);

  useLayoutEffect(() => {
    const el = scroller.current;
    if (el && pinned.current) el.scrollTop = el.scrollHeight;
  }, [messages]);

  // A message the search found: into view (its start, when it is taller than the view), then marked for a moment.
  useLayoutEffect(() => {
    const el = scroller.current;
    if (!found || !el) return;
    const target = el.querySelector<HTMLElement>(`[data-message-id="${found.id}"]`);
    if (!target) return;
    // The list scrolls itself (scrollIntoView would scroll the clipped page around it too); at once, not smoothly.
    const top = target.getBoundingClientRect().top - el.getBoundingClientRect().top + el.scrollTop;
    const room = el.clientHeight - target.offsetHeight;
    el.scrollTop = Math.max(0, room > 0 ? top - room / 2 : top - 8);
    pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
    setMarked(found.id);
  }, [found]);

  useEffect(() => {
    if (marked === null) return;
    const timer = setTimeout(() => setMarked(null), FOUND_MARK_MS);
    return () => clearTimeout(timer);
  }, [marked, found]);
  const isMarked = (message: UiMessage) => found !== null && marked !== null && message.nodeId === marked;

  const onScroll = () => {
    const el = scroller.current;
    if (el) pinned.current = el.scrollHeight - el.scrollTop - el.clientHeight < 80;
  };

  let lastAssistant = -1;
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === "assistant") {
      lastAssistant = i;
      break;
    }
  }
  const stored = Boolean(conversationId && persisted);
  // Stored, finished answers take feedback, by their stored message id.
  const answers = new Map<number, string>();
  if (stored) {
    for (const m of messages) {
      if (m.role === "assistant" && m.nodeId !== undefined && m.status !== "streaming") answers.set(m.nodeId, m.content);
    }
  }
  // A stored message with versions (edits, regenerated answers) shows ‹ k / n ›.
  const versions = (message: UiMessage): VersionControl | undefined =>
    stored && message.nodeId !== undefined && message.siblings && message.siblings.ids.length > 1
      ? {
          position: message.siblings.index + 1,
          count: message.siblings.ids.length,
          disabled: streaming || editing !== null || chat.loading,
          onSelect: (delta) => chat.selectVersion(message.key, delta),
        }
      : undefined;
  const feedback = useFeedback(stored ? conversationId : null, answers);
  const cut = contextCutIndex(messages, chat.outOfContext);

  return (
    <div class="chat-scroll" ref={scroller} onScroll={onScroll} onClick={(e) => void onCopyClick(e)}>
      {chat.loading && (
        <div class="chat-empty" role="status">
          Loading conversation…
        </div>
      )}
      {!chat.loading && messages.length === 0 && (
        <div class="chat-empty">
          <h2>How can I help?</h2>
          <p>Ask anything. Enter sends, Shift+Enter adds a new line.</p>
        </div>
      )}
      <div class="messages">
        {messages.map((message, i) => [
          i === cut && (
            <div key="context-cut" class="context-divider" role="note" data-testid="context-divider">
              The model no longer sees the messages above: this conversation outgrew its context.
            </div>
          ),
          message.role === "user" ? (
            <UserMessage
              key={message.key}
              message={message}
              found={isMarked(message)}
              versions={versions(message)}
              canEdit={stored && !streaming && (message.nodeId !== undefined || message.replaceFrom !== undefined)}
              editDraft={editing && editing.key === message.key ? editing.draft : null}
              onEditStart={(key) => chat.setEditing({ key, draft: message.content })}
              onEditChange={(key, draft) => chat.setEditing({ key, draft })}
              onEditSave={(key, text) => void chat.saveEdit(key, text)}
              onEditCancel={() => chat.setEditing(null)}
            />
          ) : (
            <AssistantMessage
              key={message.key}
              message={message}
              found={isMarked(message)}
              versions={versions(message)}
              canRegenerate={!streaming && i === lastAssistant && i === messages.length - 1}
              onRegenerate={chat.regenerate}
              onOpenCitation={onOpenCitation}
              feedback={
                message.nodeId !== undefined && answers.has(message.nodeId) ? (
                  <FeedbackBar index={message.nodeId} answer={message.content} feedback={feedback} />
                ) : undefined
              }
            />
          ),
        ])}
      </div>
    </div>
  );
}

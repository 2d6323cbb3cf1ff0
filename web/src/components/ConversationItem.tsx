/** One conversation in the sidebar: select, inline rename (Enter saves, Esc cancels), delete (asks first). */
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import type { ConversationSummary } from "../types";
import { EditIcon, TrashIcon } from "./icons";

export const UNTITLED = "New chat";

interface Props {
  conversation: ConversationSummary;
  active: boolean;
  onSelect(id: string): void;
  onRename(id: string, title: string): Promise<void>;
  onDelete(conversation: ConversationSummary): void;
}

export function ConversationItem({ conversation, active, onSelect, onRename, onDelete }: Props) {
  const [renaming, setRenaming] = useState(false);
  const [draft, setDraft] = useState("");
  const [saving, setSaving] = useState(false);
  const [renameError, setRenameError] = useState<string | null>(null);
  const input = useRef<HTMLInputElement>(null);
  const renameButton = useRef<HTMLButtonElement>(null);
  const settled = useRef(false);
  const title = conversation.title?.trim() || UNTITLED;

  // Before the browser handles the next input (see UserMessage): a deferred select() could take in keys typed first.
  useLayoutEffect(() => {
    if (renaming) {
      input.current?.focus();
      input.current?.select();
    }
  }, [renaming]);

  const start = () => {
    settled.current = false;
    setDraft(conversation.title ?? "");
    setRenameError(null);
    setRenaming(true);
  };
  const finish = () => {
    setRenaming(false);
    // Give the keyboard back to the control that opened the editor.
    requestAnimationFrame(() => renameButton.current?.focus());
  };
  const cancel = () => {
    settled.current = true;
    finish();
  };
  const save = async () => {
    if (settled.current) return;
    settled.current = true;
    const next = draft.trim();
    if (!next || next === (conversation.title ?? "")) {
      finish();
      return;
    }
    setSaving(true);
    try {
      await onRename(conversation.id, next);
      finish();
    } catch (err) {
      settled.current = false;
      setRenameError(err instanceof Error ? err.message : "Could not rename.");
    } finally {
      setSaving(false);
    }
  };

  return (
    <li
      class={`conv-item${active ? " active" : ""}`}
      data-testid="conversation"
      data-id={conversation.id}
      aria-current={active ? "true" : undefined}
    >
      {renaming ? (
        <div class="rename-row">
          <label class="sr-only" for={`rename-${conversation.id}`}>
            Rename conversation
          </label>
          <input
            ref={input}
            id={`rename-${conversation.id}`}
            class="rename-input"
            data-testid="rename-input"
            type="text"
            maxLength={200}
            value={draft}
            disabled={saving}
            aria-invalid={renameError ? "true" : undefined}
            title={renameError ?? undefined}
            onInput={(e) => setDraft((e.currentTarget as HTMLInputElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Enter") {
                e.preventDefault();
                void save();
              } else if (e.key === "Escape") {
                e.preventDefault();
                e.stopPropagation();
                cancel();
              }
            }}
            onBlur={() => void save()}
          />
        </div>
      ) : (
        <button
          type="button"
          class="conv-select"
          onClick={() => onSelect(conversation.id)}
        >
          <span class="conv-title" data-testid="conversation-title">
            {title}
          </span>
        </button>
      )}
      {!renaming && (
        <div class="conv-actions">
          <button
            ref={renameButton}
            type="button"
            class="icon-btn small"
            data-testid="rename"
            aria-label={`Rename “${title}”`}
            title="Rename"
            onClick={start}
          >
            <EditIcon />
          </button>
          <button
            type="button"
            class="icon-btn small"
            data-testid="delete"
            aria-label={`Delete “${title}”`}
            title="Delete"
            onClick={() => onDelete(conversation)}
          >
            <TrashIcon />
          </button>
        </div>
      )}
    </li>
  );
}

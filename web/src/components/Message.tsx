/** One message. User: plain text, Edit (stored conversations). Assistant: markdown, status labels, its sources
 * (citations), Regenerate, and (stored answers) the feedback thumbs. Both: ‹ k / n › between the versions an edit or
 * a regenerate left. */
import type { ComponentChildren } from "preact";
import { useLayoutEffect, useRef, useState } from "preact/hooks";
import type { UiMessage } from "../chatModel";
import { retrievalNote } from "../citations";
import { copyText } from "../clipboard";
import { markFirstTokenVisibleAfterPaint } from "../perf";
import type { Citation } from "../types";
import { Citations } from "./Citations";
import { ChevronLeftIcon, ChevronRightIcon, CopyIcon, EditIcon, RefreshIcon } from "./icons";
import { Markdown } from "./Markdown";
import { ToolRuns } from "./ToolRuns";

/** A message's versions as its control shows them. */
export interface VersionControl {
  /** 1-based. */
  position: number;
  count: number;
  /** While an answer streams (or an edit is open): nothing can be switched. */
  disabled: boolean;
  /** Show the previous (-1) or next (+1) version; false when nothing was switched. */
  onSelect(delta: -1 | 1): boolean;
}

/**
 * ‹ k / n ›: always shown (not only on hover), its buttons disabled at the ends. The control stays in place as the
 * message it belongs to switches, and the focus with it: on the button pressed, or (that one now disabled, at an end)
 * on the other.
 */
export function BranchSwitch({ position, count, disabled, onSelect }: VersionControl) {
  const prev = useRef<HTMLButtonElement>(null);
  const next = useRef<HTMLButtonElement>(null);
  const pressed = useRef<-1 | 1 | null>(null);
  useLayoutEffect(() => {
    const delta = pressed.current;
    pressed.current = null;
    if (delta === null) return;
    const [used, other] = delta < 0 ? [prev.current, next.current] : [next.current, prev.current];
    if (used && !used.disabled) used.focus();
    else if (other && !other.disabled) other.focus();
  }, [position, count]);

  const select = (delta: -1 | 1, button: HTMLButtonElement) => {
    const focused = document.activeElement === button;
    if (onSelect(delta) && focused) pressed.current = delta;
  };
  return (
    <div class="branch-switch" role="group" aria-label="Message versions" data-testid="branch-switch">
      <button
        ref={prev}
        type="button"
        class="icon-btn small"
        data-testid="branch-prev"
        aria-label="Previous version"
        title="Previous version"
        disabled={disabled || position <= 1}
        onClick={(e) => select(-1, e.currentTarget)}
      >
        <ChevronLeftIcon />
      </button>
      <span class="branch-position" data-testid="branch-position" aria-hidden="true">
        {position} / {count}
      </span>
      <span class="sr-only">
        Version {position} of {count}
      </span>
      <button
        ref={next}
        type="button"
        class="icon-btn small"
        data-testid="branch-next"
        aria-label="Next version"
        title="Next version"
        disabled={disabled || position >= count}
        onClick={(e) => select(1, e.currentTarget)}
      >
        <ChevronRightIcon />
      </button>
    </div>
  );
}

/** The attributes every message's element carries: its stored id (`data-message-id`), and "found" while it is the
 * message the search brought into view. */
function messageAttrs(message: UiMessage, found: boolean | undefined) {
  return {
    "data-message-id": message.nodeId,
    "data-found": found ? "true" : undefined,
  };
}

interface UserProps {
  message: UiMessage;
  /** The message the search brought into view: marked for a moment. */
  found?: boolean;
  /** Its versions (edits), when it has more than one. */
  versions?: VersionControl;
  canEdit: boolean;
  editDraft: string | null;
  onEditStart(key: string): void;
  onEditChange(key: string, draft: string): void;
  onEditSave(key: string, text: string): void;
  onEditCancel(): void;
}

export function UserMessage({
  message,
  found,
  versions,
  canEdit,
  editDraft,
  onEditStart,
  onEditChange,
  onEditSave,
  onEditCancel,
}: UserProps) {
  const area = useRef<HTMLTextAreaElement>(null);
  const editing = editDraft !== null;
  // A layout effect, run as the editor is put on screen: a deferred effect could move the caret after the user (or
  // Playwright's fill) had already selected the text to replace it, and the new text would be appended instead.
  useLayoutEffect(() => {
    if (editing && area.current) {
      area.current.focus();
      const end = area.current.value.length;
      area.current.setSelectionRange(end, end);
    }
  }, [editing]);

  if (editing) {
    const id = `edit-${message.key}`;
    const save = () => {
      if (editDraft.trim()) onEditSave(message.key, editDraft);
    };
    return (
      <article class="message user editing" data-testid="message" data-role="user" {...messageAttrs(message, false)}>
        <form
          class="edit-form"
          onSubmit={(e) => {
            e.preventDefault();
            save();
          }}
        >
          <label for={id} class="sr-only">
            Edit message
          </label>
          <textarea
            ref={area}
            id={id}
            class="edit-input"
            data-testid="edit-input"
            rows={Math.min(12, Math.max(2, editDraft.split("\n").length))}
            value={editDraft}
            onInput={(e) => onEditChange(message.key, (e.currentTarget as HTMLTextAreaElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Escape") {
                e.preventDefault();
                e.stopPropagation();
                onEditCancel();
              } else if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
                e.preventDefault();
                save();
              }
            }}
          />
          <div class="edit-actions">
            <button type="button" class="btn" data-testid="edit-cancel" onClick={onEditCancel}>
              Cancel
            </button>
            <button type="submit" class="btn btn-primary" data-testid="edit-save" disabled={!editDraft.trim()}>
              Save &amp; send
            </button>
          </div>
        </form>
      </article>
    );
  }
  return (
    <article
      class={`message user${found ? " found" : ""}`}
      data-testid="message"
      data-role="user"
      {...messageAttrs(message, found)}
    >
      {message.images && message.images.length > 0 && (
        <div class="message-images" data-testid="message-images">
          {message.images.map((url, index) => (
            <img key={index} src={url} alt={`Image ${index + 1} sent with this message`} data-testid="message-image" />
          ))}
        </div>
      )}
      <div class="message-body user-text">{message.content}</div>
      {(canEdit || versions) && (
        <div class="message-footer">
          {canEdit && (
            <div class="message-actions">
              <button
                type="button"
                class="icon-btn small"
                data-testid="edit"
                aria-label="Edit message"
                title="Edit"
                onClick={() => onEditStart(message.key)}
              >
                <EditIcon />
              </button>
            </div>
          )}
          {versions && <BranchSwitch {...versions} />}
        </div>
      )}
    </article>
  );
}

interface AssistantProps {
  message: UiMessage;
  /** The message the search brought into view: marked for a moment. */
  found?: boolean;
  /** Its versions (regenerated answers), when it has more than one. */
  versions?: VersionControl;
  canRegenerate: boolean;
  onRegenerate(): void;
  /** Shown with the actions once the answer is complete (the feedback thumbs of a stored answer). */
  feedback?: ComponentChildren;
  /** Open a cited passage. */
  onOpenCitation?(citation: Citation): void;
}

export function AssistantMessage({
  message,
  found,
  versions,
  canRegenerate,
  onRegenerate,
  feedback,
  onOpenCitation,
}: AssistantProps) {
  const status = message.status ?? "done";
  const [copied, setCopied] = useState(false);
  useLayoutEffect(() => {
    if (status === "streaming" && message.content) markFirstTokenVisibleAfterPaint();
  }, [status, message.content]);

  const copyAnswer = async () => {
    if (await copyText(message.content)) {
      setCopied(true);
      setTimeout(() => setCopied(false), 1500);
    }
  };

  return (
    <article
      class={`message assistant status-${status}${found ? " found" : ""}`}
      data-testid="message"
      data-role="assistant"
      data-status={status}
      {...messageAttrs(message, found)}
    >
      <div class="avatar" aria-hidden="true">
        fc
      </div>
      <div class="message-main">
        {message.reasoning && (
          <details class="reasoning" data-testid="reasoning">
            <summary>{status === "streaming" && !message.content ? "Reasoning…" : "Reasoning"}</summary>
            <div class="reasoning-text">{message.reasoning}</div>
          </details>
        )}
        <ToolRuns runs={message.toolRuns} />
        {message.care && (
          <p class="care-label" data-testid="care-label">
            <strong>Support from fleetchat</strong>, not the AI model: we noticed you may be going through something
            hard.
          </p>
        )}
        {message.content ? (
          <Markdown text={message.content} />
        ) : (
          <div class="message-body markdown">
            {status === "streaming" && (
              <span class="thinking" aria-hidden="true">
                <span />
                <span />
                <span />
              </span>
            )}
          </div>
        )}
        {status !== "streaming" && onOpenCitation && (
          <Citations content={message.content} citations={message.citations} onOpen={onOpenCitation} />
        )}
        <div class="message-notes">
          {status === "stopped" && <span class="note note-stopped">Stopped</span>}
          {status === "filtered" && <span class="note note-filtered">Stopped by the safety filter</span>}
          {message.finishReason === "length" && status === "done" && (
            <span class="note">Cut off at the length limit</span>
          )}
          {status === "error" && <span class="note note-error">{message.errorText || "The answer failed"}</span>}
          {retrievalNote(message.retrieval) && (
            <span class="note" data-testid="retrieval-note">
              {retrievalNote(message.retrieval)}
            </span>
          )}
          {message.notSaved && (
            <span class="note note-unsaved" data-testid="not-saved" title="This turn was answered but not saved">
              Not saved
            </span>
          )}
        </div>
        {(versions || status !== "streaming") && (
          <div class="message-footer">
            {versions && <BranchSwitch {...versions} />}
            {status !== "streaming" && (
              <div class="message-actions">
                {message.content && (
                  <button
                    type="button"
                    class="icon-btn small"
                    aria-label={copied ? "Copied" : "Copy answer"}
                    title={copied ? "Copied" : "Copy"}
                    onClick={() => void copyAnswer()}
                  >
                    <CopyIcon />
                  </button>
                )}
                {canRegenerate && (
                  <button
                    type="button"
                    class="icon-btn small"
                    data-testid="regenerate"
                    aria-label="Regenerate answer"
                    title="Regenerate"
                    onClick={onRegenerate}
                  >
                    <RefreshIcon />
                  </button>
                )}
                {feedback}
              </div>
            )}
          </div>
        )}
      </div>
    </article>
  );
}

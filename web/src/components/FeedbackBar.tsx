/** Thumbs up / down on a stored answer, the chosen one pressed, an optional comment box, and what went wrong. */
import { useEffect, useRef } from "preact/hooks";
import { MAX_COMMENT_CHARS } from "../feedback";
import type { FeedbackController } from "../hooks/useFeedback";
import { ThumbDownIcon, ThumbUpIcon } from "./icons";

interface Props {
  index: number;
  answer: string;
  feedback: FeedbackController;
}

export function FeedbackBar({ index, answer, feedback }: Props) {
  const entry = feedback.entry(index, answer);
  const boxId = `feedback-comment-${index}`;
  const bar = useRef<HTMLDivElement>(null);
  const box = useRef<HTMLTextAreaElement>(null);
  const wasOpen = useRef(entry.open);

  // Focus follows the box: into it when it opens (after a rating too), and back to the button that reopens it when
  // it closes with the focus inside (Close, Escape, Send), so keyboard users are never dropped onto the page body.
  useEffect(() => {
    if (entry.open && !wasOpen.current) {
      box.current?.focus();
    } else if (!entry.open && wasOpen.current) {
      const lost = document.activeElement === null || document.activeElement === document.body;
      if (lost) bar.current?.querySelector<HTMLElement>("[data-reopen]")?.focus();
    }
    wasOpen.current = entry.open;
  }, [entry.open]);

  const thumb = (rating: "up" | "down") => {
    const chosen = entry.rating === rating;
    const label = rating === "up" ? "Good answer" : "Bad answer";
    // aria-disabled, not disabled, while a call is pending: a disabled button drops the keyboard focus.
    return (
      <button
        type="button"
        class={`icon-btn small thumb${chosen ? " chosen" : ""}`}
        data-testid={`feedback-${rating}`}
        aria-pressed={chosen}
        aria-label={label}
        title={chosen ? `${label} (click again to remove)` : label}
        aria-disabled={entry.pending}
        onClick={() => {
          if (!entry.pending) void feedback.rate(index, answer, rating);
        }}
      >
        {rating === "up" ? <ThumbUpIcon /> : <ThumbDownIcon />}
      </button>
    );
  };
  const canSend = entry.open && entry.draft !== null && !entry.pending && (entry.draft.trim() !== "" || entry.comment !== null);
  const reopen = (testId: string, text: string, title?: string) => (
    <button type="button" class="note note-button" data-testid={testId} data-reopen title={title} onClick={() => feedback.openComment(index, answer)}>
      {text}
    </button>
  );

  return (
    <div class="feedback" data-testid="feedback" data-rating={entry.rating ?? "none"} ref={bar}>
      {thumb("up")}
      {thumb("down")}
      {!entry.open && entry.comment !== null && reopen("feedback-comment-saved", "Comment saved", entry.comment)}
      {!entry.open && entry.comment === null && entry.rating !== null && reopen("feedback-comment-add", "Add comment")}
      {entry.open && (
        <form
          class="feedback-form"
          onSubmit={(e) => {
            e.preventDefault();
            if (canSend) void feedback.sendComment(index, answer);
          }}
        >
          <label for={boxId} class="feedback-label">
            {entry.rating === "down" ? "What was wrong with this answer?" : "What was good about it?"} (optional)
          </label>
          <textarea
            id={boxId}
            ref={box}
            class="feedback-input"
            data-testid="feedback-comment"
            rows={2}
            maxLength={MAX_COMMENT_CHARS}
            value={entry.draft ?? ""}
            onInput={(e) => feedback.setDraft(index, answer, (e.currentTarget as HTMLTextAreaElement).value)}
            onKeyDown={(e) => {
              if (e.key === "Escape") {
                e.preventDefault();
                feedback.closeComment(index, answer);
              }
            }}
          />
          <div class="feedback-actions">
            <button type="button" class="btn btn-small" data-testid="feedback-close" onClick={() => feedback.closeComment(index, answer)}>
              Close
            </button>
            <button type="submit" class="btn btn-small btn-primary" data-testid="feedback-send" aria-disabled={!canSend}>
              Send
            </button>
          </div>
        </form>
      )}
      {entry.error && (
        <span class="note note-error feedback-error" role="alert" data-testid="feedback-error">
          {entry.error}
        </span>
      )}
    </div>
  );
}

/** Thumbs up / down on a stored answer, the chosen one pressed, an optional comment box, and what went wrong. */
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
  const thumb = (rating: "up" | "down") => {
    const chosen = entry.rating === rating;
    const label = rating === "up" ? "Good answer" : "Bad answer";
    return (
      <button
        type="button"
        class={`icon-btn small thumb${chosen ? " chosen" : ""}`}
        data-testid={`feedback-${rating}`}
        aria-pressed={chosen}
        aria-label={chosen ? `${label} (chosen; click to remove)` : label}
        title={label}
        disabled={entry.pending}
        onClick={() => void feedback.rate(index, answer, rating)}
      >
        {rating === "up" ? <ThumbUpIcon /> : <ThumbDownIcon />}
      </button>
    );
  };
  const canSend = entry.draft !== null && !entry.pending && (entry.draft.trim() !== "" || entry.comment !== null);

  return (
    <div class="feedback" data-testid="feedback" data-rating={entry.rating ?? "none"}>
      {thumb("up")}
      {thumb("down")}
      {entry.comment !== null && entry.draft === null && (
        <button
          type="button"
          class="note note-button"
          data-testid="feedback-comment-saved"
          title={entry.comment}
          onClick={() => feedback.setDraft(index, answer, entry.comment ?? "")}
        >
          Comment saved
        </button>
      )}
      {entry.draft !== null && (
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
            class="feedback-input"
            data-testid="feedback-comment"
            rows={2}
            maxLength={MAX_COMMENT_CHARS}
            value={entry.draft}
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
            <button type="submit" class="btn btn-small btn-primary" data-testid="feedback-send" disabled={!canSend}>
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

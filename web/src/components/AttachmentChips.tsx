/** The open chat's attached files, one chip each: name, size, indexing progress, the error, Remove. */
import { formatBytes, STATUS_LABEL, type Attachment } from "../attachments";
import { CloseIcon, FileIcon } from "./icons";

interface Props {
  attachments: Attachment[];
  onRemove(key: string): void;
}

export function AttachmentChips({ attachments, onRemove }: Props) {
  if (attachments.length === 0) return null;
  return (
    <ul class="attachments" aria-label="Files attached to this chat" data-testid="attachments">
      {attachments.map((a) => {
        const bad = a.status === "failed" || a.status === "rejected";
        const busy = a.status === "uploading" || a.status === "attaching" || a.status === "in_progress";
        return (
          <li
            key={a.key}
            class={`chip chip-${a.status}`}
            data-testid="attachment"
            data-status={a.status}
            data-file-id={a.fileId}
            aria-busy={busy ? "true" : "false"}
          >
            <FileIcon class="chip-icon" />
            <span class="chip-text">
              <span class="chip-name" title={a.filename}>
                {a.filename}
              </span>
              <span class="chip-status" data-testid="attachment-status" aria-live="polite">
                {STATUS_LABEL[a.status]}
                {a.bytes > 0 && !bad ? ` · ${formatBytes(a.bytes)}` : ""}
              </span>
              {bad && a.error && (
                <span class="chip-error" role="alert" data-testid="attachment-error">
                  {a.error}
                </span>
              )}
            </span>
            <button
              type="button"
              class="icon-btn small"
              data-testid="attachment-remove"
              aria-label={`Remove ${a.filename}`}
              title="Remove"
              onClick={() => {
                onRemove(a.key);
                // The button goes with its chip: the focus goes back to the message box, not to the page.
                document.getElementById("composer-input")?.focus();
              }}
            >
              <CloseIcon />
            </button>
          </li>
        );
      })}
    </ul>
  );
}

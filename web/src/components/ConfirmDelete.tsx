/** "Delete this conversation?" — the title is shown as text, never as HTML. */
import { useState } from "preact/hooks";
import type { ConversationSummary } from "../types";
import { UNTITLED } from "./ConversationItem";
import { Modal } from "./Modal";

interface Props {
  conversation: ConversationSummary;
  onConfirm(): Promise<void>;
  onCancel(): void;
}

export function ConfirmDelete({ conversation, onConfirm, onCancel }: Props) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const title = conversation.title?.trim() || UNTITLED;
  const confirm = async () => {
    setBusy(true);
    setError(null);
    try {
      await onConfirm();
    } catch (err) {
      setError(err instanceof Error ? err.message : "Could not delete the conversation.");
      setBusy(false);
    }
  };
  return (
    <Modal
      role="alertdialog"
      labelledBy="confirm-delete-title"
      describedBy="confirm-delete-text"
      onClose={onCancel}
      initialFocus='[data-testid="cancel-delete"]'
      class="confirm-dialog"
    >
      <h2 id="confirm-delete-title">Delete conversation?</h2>
      <p id="confirm-delete-text">
        “<span class="confirm-title">{title}</span>” will be deleted. This cannot be undone.
      </p>
      {error && (
        <p class="form-error" role="alert">
          {error}
        </p>
      )}
      <div class="dialog-actions">
        <button type="button" class="btn" data-testid="cancel-delete" onClick={onCancel} disabled={busy}>
          Cancel
        </button>
        <button type="button" class="btn btn-danger" data-testid="confirm-delete" onClick={() => void confirm()} disabled={busy}>
          {busy ? "Deleting…" : "Delete"}
        </button>
      </div>
    </Modal>
  );
}

/** Custom instructions: the account's, for every chat, and the open chat's own (once the chat exists). Both end the
 * system prompt the model reads; saved after the safety filter has read them (a refusal keeps the typed text). Below
 * them, the account's memory (MemorySection: each change saved at once). */
import { useEffect, useState } from "preact/hooks";
import { api, ApiError } from "../api";
import { MAX_INSTRUCTIONS_CHARS } from "../types";
import { MemorySection } from "./MemorySection";
import { Modal } from "./Modal";

interface Props {
  /** The open chat, when it is stored (its instructions are editable then). */
  conversationId: string | null;
  onClose(): void;
}

function message(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  return "The instructions could not be saved.";
}

export function InstructionsDialog({ conversationId, onClose }: Props) {
  const [account, setAccount] = useState<string | null>(null);
  const [chat, setChat] = useState<string | null>(conversationId ? null : "");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);

  useEffect(() => {
    api
      .getInstructions()
      .then((found) => setAccount(found.instructions ?? ""))
      .catch((err) => setError(message(err)));
    if (conversationId) {
      api
        .getConversation(conversationId)
        .then((found) => setChat(found.instructions ?? ""))
        .catch((err) => setError(message(err)));
    }
  }, [conversationId]);

  const loading = account === null || chat === null;
  const save = async () => {
    setBusy(true);
    setError(null);
    try {
      await api.setInstructions(account?.trim() ? account : null);
      if (conversationId) await api.setConversationInstructions(conversationId, chat?.trim() ? chat : null);
      onClose();
    } catch (err) {
      setError(message(err));
      setBusy(false);
    }
  };

  return (
    <Modal labelledBy="instructions-title" testId="instructions-dialog" class="instructions-dialog" onClose={onClose} initialFocus="#instructions-account">
      <h2 id="instructions-title">Custom instructions and memory</h2>
      <form
        class="instructions-form"
        onSubmit={(e) => {
          e.preventDefault();
          if (!loading && !busy) void save();
        }}
      >
        <label for="instructions-account" class="field-label">
          For all your chats
        </label>
        <p class="field-hint">What the model should know about you and how it should answer, in every chat.</p>
        <textarea
          id="instructions-account"
          data-testid="instructions-account"
          rows={5}
          maxLength={MAX_INSTRUCTIONS_CHARS}
          value={account ?? ""}
          disabled={account === null}
          onInput={(e) => setAccount((e.currentTarget as HTMLTextAreaElement).value)}
        />
        <label for="instructions-chat" class="field-label">
          For this chat
        </label>
        {conversationId ? (
          <textarea
            id="instructions-chat"
            data-testid="instructions-chat"
            rows={3}
            maxLength={MAX_INSTRUCTIONS_CHARS}
            value={chat ?? ""}
            disabled={chat === null}
            onInput={(e) => setChat((e.currentTarget as HTMLTextAreaElement).value)}
          />
        ) : (
          <p class="field-hint" data-testid="instructions-chat-later">
            Send a first message; then this chat can have instructions of its own.
          </p>
        )}
        {error && (
          <p class="form-error" role="alert" data-testid="instructions-error">
            {error}
          </p>
        )}
        <div class="dialog-actions">
          <button type="button" class="btn" onClick={onClose} disabled={busy}>
            Cancel
          </button>
          <button type="submit" class="btn btn-primary" data-testid="instructions-save" disabled={loading || busy}>
            {busy ? "Saving…" : "Save"}
          </button>
        </div>
      </form>
      <MemorySection />
    </Modal>
  );
}

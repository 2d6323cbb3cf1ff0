/** Memory in the settings dialog: a switch to use it (off by default) and every saved fact, to add, edit and delete.
 * Each change is saved at once (the safety filter reads a fact before it is kept; a refusal keeps the typed text). */
import { useEffect, useRef, useState } from "preact/hooks";
import { api, ApiError } from "../api";
import { MAX_MEMORY_CHARS, type MemoryObject } from "../types";

function message(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  return "Memory could not be changed.";
}

export function MemorySection() {
  const [memory, setMemory] = useState<MemoryObject | null>(null);
  const [draft, setDraft] = useState("");
  const [editing, setEditing] = useState<{ id: string; text: string } | null>(null);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const errorRef = useRef<HTMLParagraphElement>(null);

  useEffect(() => {
    if (error) errorRef.current?.scrollIntoView?.({ block: "nearest" }); // below the fold in a phone's dialog
  }, [error]);

  useEffect(() => {
    api
      .getMemory()
      .then(setMemory)
      .catch((err) => setError(message(err)));
  }, []);

  /** Run one change; then show the server's memory (it is the truth: another tab may have changed it too). */
  const change = async (action: () => Promise<unknown>): Promise<boolean> => {
    setBusy(true);
    setError(null);
    try {
      await action();
      setMemory(await api.getMemory());
      return true;
    } catch (err) {
      setError(message(err));
      return false;
    } finally {
      setBusy(false);
    }
  };

  const add = async () => {
    if (draft.trim() && (await change(() => api.addMemory(draft)))) setDraft("");
  };
  const saveEdit = async () => {
    if (editing && editing.text.trim() && (await change(() => api.editMemory(editing.id, editing.text)))) setEditing(null);
  };

  const items = memory?.items ?? [];
  const full = memory !== null && items.length >= memory.max_items;
  return (
    <section class="memory-section" data-testid="memory-section" aria-labelledby="memory-title">
      <h3 id="memory-title">Memory</h3>
      <label class="memory-toggle">
        <input
          type="checkbox"
          data-testid="memory-enabled"
          checked={memory?.enabled ?? false}
          disabled={memory === null || busy}
          onChange={(e) => {
            const enabled = (e.currentTarget as HTMLInputElement).checked;
            setMemory((m) => m && { ...m, enabled }); // shown at once; put back if the save fails
            void change(() => api.setMemoryEnabled(enabled)).then((saved) => {
              if (!saved) setMemory((m) => m && { ...m, enabled: !enabled });
            });
          }}
        />
        Use these facts in my chats
      </label>
      <p class="field-hint">Facts you want every chat to know. Only what you add here is remembered; you can edit or delete any of them.</p>
      <ul class="memory-items" data-testid="memory-items">
        {items.map((item) => (
          <li key={item.id} class="memory-item" data-testid="memory-item">
            {editing?.id === item.id ? (
              <form
                class="memory-edit"
                onSubmit={(e) => {
                  e.preventDefault();
                  void saveEdit();
                }}
              >
                <input
                  aria-label="Edit this fact"
                  data-testid="memory-edit-input"
                  maxLength={MAX_MEMORY_CHARS}
                  value={editing.text}
                  onInput={(e) => setEditing({ id: item.id, text: (e.currentTarget as HTMLInputElement).value })}
                />
                <button type="submit" class="btn btn-primary" data-testid="memory-edit-save" disabled={busy}>
                  Save
                </button>
                <button type="button" class="btn" onClick={() => setEditing(null)} disabled={busy}>
                  Cancel
                </button>
              </form>
            ) : (
              <>
                <span class="memory-text">{item.text}</span>
                <button
                  type="button"
                  class="btn btn-small"
                  data-testid="memory-edit"
                  aria-label={`Edit: ${item.text}`}
                  disabled={busy}
                  onClick={() => setEditing({ id: item.id, text: item.text })}
                >
                  Edit
                </button>
                <button
                  type="button"
                  class="btn btn-small"
                  data-testid="memory-delete"
                  aria-label={`Delete: ${item.text}`}
                  disabled={busy}
                  onClick={() => void change(() => api.deleteMemory(item.id))}
                >
                  Delete
                </button>
              </>
            )}
          </li>
        ))}
        {memory !== null && items.length === 0 && <li class="field-hint">Nothing remembered yet.</li>}
      </ul>
      <form
        class="memory-add"
        onSubmit={(e) => {
          e.preventDefault();
          void add();
        }}
      >
        <input
          aria-label="A fact to remember"
          data-testid="memory-new"
          placeholder={full ? "Memory is full: delete a fact first" : "e.g. I am vegetarian"}
          maxLength={MAX_MEMORY_CHARS}
          value={draft}
          disabled={memory === null || full}
          onInput={(e) => setDraft((e.currentTarget as HTMLInputElement).value)}
        />
        <button type="submit" class="btn" data-testid="memory-add" disabled={busy || full || !draft.trim()}>
          Remember
        </button>
      </form>
      {error && (
        <p class="form-error" role="alert" data-testid="memory-error" ref={errorRef}>
          {error}
        </p>
      )}
    </section>
  );
}

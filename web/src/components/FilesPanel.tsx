/** The tenant's files (GET /v1/files): name, size, status, date; upload; delete with a confirmation in the row. The
 * API's own error messages are shown (413 too large, 400 not the declared type, 429 quota). */
import { useEffect, useRef, useState } from "preact/hooks";
import { formatBytes, STATUS_LABEL, type Attachment } from "../attachments";
import { filesApi } from "../filesApi";
import type { FileObject } from "../types";
import { CloseIcon, TrashIcon } from "./icons";
import { FilePicker } from "./FilePicker";
import { Modal } from "./Modal";

interface Props {
  onClose(): void;
  /** A file was deleted (its chips and cached passages go). */
  onDeleted(fileId: string): void;
  /** The open chat's attached files: their indexing status is shown for the files among them. */
  attached: Attachment[];
}

function day(seconds: number): string {
  const date = new Date(seconds * 1000);
  return Number.isNaN(date.getTime()) ? "" : date.toISOString().slice(0, 10);
}

const STATUS: Record<string, string> = { processed: "Uploaded", uploaded: "Uploaded", error: "Error" };

/** The file's indexing status in the open chat when it is attached there, else the file's own status. */
function statusOf(file: FileObject, attached: Attachment[]): string {
  const chip = attached.find((a) => a.fileId === file.id);
  if (chip) return `${STATUS_LABEL[chip.status].replace("…", "")} in this chat`;
  return STATUS[file.status ?? "processed"] ?? file.status ?? "";
}

function message(err: unknown, fallback: string): string {
  return err instanceof Error && err.message ? err.message : fallback;
}

export function FilesPanel({ onClose, onDeleted, attached }: Props) {
  const [files, setFiles] = useState<FileObject[] | null>(null);
  const [more, setMore] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const [confirming, setConfirming] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [uploading, setUploading] = useState(false);
  const picker = useRef<HTMLInputElement>(null);

  const loadPage = async (after: string | null) => {
    try {
      const page = await filesApi.list(100, after);
      setFiles((current) => (after && current ? [...current, ...page.data] : page.data));
      setMore(page.has_more);
    } catch (err) {
      setError(message(err, "Could not load your files."));
      setFiles((current) => current ?? []);
    }
  };

  useEffect(() => {
    void loadPage(null);
  }, []);

  // The confirmation takes the focus as it appears (and Cancel is the safe default).
  useEffect(() => {
    if (confirming) document.querySelector<HTMLElement>('[data-testid="file-delete-cancel"]')?.focus();
  }, [confirming]);

  const upload = async (chosen: File[]) => {
    setError(null);
    setUploading(true);
    for (const file of chosen) {
      try {
        const created = await filesApi.upload(file, file.name);
        setFiles((current) => [created, ...(current ?? [])]);
      } catch (err) {
        setError(`${file.name}: ${message(err, "The upload failed.")}`);
      }
    }
    setUploading(false);
  };

  const remove = async (file: FileObject) => {
    if (busy) return;
    setBusy(true);
    setError(null);
    try {
      await filesApi.remove(file.id);
      setFiles((current) => (current ?? []).filter((f) => f.id !== file.id));
      setConfirming(null);
      onDeleted(file.id);
      // The row (and the focused button) is gone: keep the focus in the dialog.
      document.querySelector<HTMLElement>('[data-testid="files-upload"]')?.focus();
    } catch (err) {
      setError(message(err, "Could not delete the file."));
    } finally {
      setBusy(false);
    }
  };

  return (
    <Modal labelledBy="files-title" testId="files" onClose={onClose} class="files-dialog">
      <div class="dialog-head">
        <h2 id="files-title">Files</h2>
        <button type="button" class="icon-btn small" aria-label="Close files" data-testid="files-close" onClick={onClose}>
          <CloseIcon />
        </button>
      </div>
      <div class="files-toolbar">
        <button
          type="button"
          class="btn btn-small"
          data-testid="files-upload"
          aria-disabled={uploading ? "true" : undefined}
          onClick={() => !uploading && picker.current?.click()}
        >
          {uploading ? "Uploading…" : "Upload files"}
        </button>
        <FilePicker pickerRef={picker} testId="files-upload-input" onFiles={(chosen) => void upload(chosen)} />
        <span class="files-hint">PDF, DOCX, HTML, Markdown or text. Attach them to a chat with the paperclip.</span>
      </div>
      {error && (
        <p class="form-error" role="alert" data-testid="files-error">
          {error}
        </p>
      )}
      {!files && <p role="status">Loading…</p>}
      {files && files.length === 0 && !error && <p data-testid="files-empty">No files yet.</p>}
      {files && files.length > 0 && (
        <table class="files-table">
          <caption class="sr-only">Your files</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Size</th>
              <th scope="col">Status</th>
              <th scope="col">Added</th>
              <th scope="col">
                <span class="sr-only">Actions</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {files.map((file) =>
              confirming === file.id ? (
                <tr key={file.id} class="file-confirm" data-testid="file-row" data-id={file.id}>
                  <td colSpan={5}>
                    <div class="file-confirm-row" role="group" aria-label={`Delete ${file.filename}?`}>
                      <span>
                        Delete “<span class="confirm-title">{file.filename}</span>”? It is removed from every chat.
                      </span>
                      <button
                        type="button"
                        class="btn btn-small"
                        data-testid="file-delete-cancel"
                        aria-disabled={busy ? "true" : undefined}
                        onClick={() => !busy && setConfirming(null)}
                      >
                        Cancel
                      </button>
                      <button
                        type="button"
                        class="btn btn-small btn-danger"
                        data-testid="file-delete-confirm"
                        aria-disabled={busy ? "true" : undefined}
                        onClick={() => void remove(file)}
                      >
                        {busy ? "Deleting…" : "Delete"}
                      </button>
                    </div>
                  </td>
                </tr>
              ) : (
                <tr key={file.id} data-testid="file-row" data-id={file.id}>
                  <th scope="row" class="file-name" title={file.filename}>
                    {file.filename}
                  </th>
                  <td data-testid="file-size">{formatBytes(file.bytes)}</td>
                  <td data-testid="file-status">{statusOf(file, attached)}</td>
                  <td>{day(file.created_at)}</td>
                  <td>
                    <button
                      type="button"
                      class="icon-btn small"
                      data-testid="file-delete"
                      aria-label={`Delete ${file.filename}`}
                      title="Delete"
                      onClick={() => setConfirming(file.id)}
                    >
                      <TrashIcon />
                    </button>
                  </td>
                </tr>
              ),
            )}
          </tbody>
        </table>
      )}
      {more && files && (
        <button type="button" class="btn btn-small" data-testid="files-more" onClick={() => void loadPage(files[files.length - 1]?.id ?? null)}>
          Load more
        </button>
      )}
    </Modal>
  );
}

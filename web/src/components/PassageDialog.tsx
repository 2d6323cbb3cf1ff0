/** The cited passage in its file: the text around it, the cited span highlighted and scrolled into view. */
import { useEffect, useRef, useState } from "preact/hooks";
import type { PassageView } from "../citations";
import { citationView } from "../passages";
import type { Citation } from "../types";
import { CloseIcon } from "./icons";
import { Modal } from "./Modal";

interface Props {
  citation: Citation;
  onClose(): void;
}

export function PassageDialog({ citation, onClose }: Props) {
  const [view, setView] = useState<PassageView | null>(null);
  const [error, setError] = useState<string | null>(null);
  const mark = useRef<HTMLElement>(null);

  useEffect(() => {
    let live = true;
    setView(null);
    setError(null);
    citationView(citation)
      .then((v) => live && setView(v))
      .catch((err: Error) => live && setError(err.message || "The passage could not be loaded."));
    return () => {
      live = false;
    };
  }, [citation]);

  useEffect(() => {
    mark.current?.scrollIntoView?.({ block: "center" });
  }, [view]);

  return (
    <Modal labelledBy="passage-title" describedBy="passage-where" testId="passage" onClose={onClose} class="passage-dialog">
      <div class="dialog-head">
        <h2 id="passage-title" class="passage-title">
          [{citation.index}] {citation.filename}
        </h2>
        <button type="button" class="icon-btn small" aria-label="Close passage" data-testid="passage-close" onClick={onClose}>
          <CloseIcon />
        </button>
      </div>
      <p id="passage-where" class="passage-where">
        Characters {citation.start}–{citation.end} of the file's text; the cited passage is highlighted.
      </p>
      {error && (
        <p class="form-error" role="alert" data-testid="passage-error">
          {error}
        </p>
      )}
      {!view && !error && <p role="status">Loading passage…</p>}
      {view && (
        <div class="passage-text" data-testid="passage-text" tabIndex={0}>
          {view.clippedBefore && <span class="passage-clip">… </span>}
          {view.before}
          <mark ref={mark} class="passage-cited" data-testid="passage-cited">
            {view.cited}
          </mark>
          {view.after}
          {view.clippedAfter && <span class="passage-clip"> …</span>}
        </div>
      )}
    </Modal>
  );
}

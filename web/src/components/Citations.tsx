/** The sources under an answer: `[n] file` and the passage's start; each opens the cited passage. */
import { useEffect, useState } from "preact/hooks";
import { shownCitations, snippet } from "../citations";
import { citationText } from "../passages";
import type { Citation } from "../types";

interface Props {
  content: string;
  citations: Citation[] | undefined;
  onOpen(citation: Citation): void;
}

/** The passage's first words: the answer's own copy, else read back from the file (a stored answer). */
function Snippet({ citation }: { citation: Citation }) {
  const [text, setText] = useState<string | null>(citation.text ?? null);
  useEffect(() => {
    if (citation.text) {
      setText(citation.text);
      return;
    }
    let live = true;
    citationText(citation)
      .then((found) => live && setText(found))
      .catch(() => live && setText(null)); // the file is gone: the name is still shown
    return () => {
      live = false;
    };
  }, [citation.vector_store_id, citation.file_id, citation.chunk_id, citation.text]);
  return text ? <span class="citation-snippet">{snippet(text)}</span> : null;
}

export function Citations({ content, citations, onOpen }: Props) {
  const shown = shownCitations(content, citations);
  if (shown.length === 0) return null;
  return (
    <section class="citations" aria-label="Sources" data-testid="citations">
      <h3 class="citations-title">Sources</h3>
      <ol class="citation-list">
        {shown.map((c) => (
          <li key={`${c.index}-${c.chunk_id}`}>
            <button
              type="button"
              class="citation"
              data-testid="citation"
              data-index={c.index}
              aria-label={`Open source ${c.index}: ${c.filename}`}
              onClick={() => onOpen(c)}
            >
              <span class="citation-index" aria-hidden="true">
                [{c.index}]
              </span>
              <span class="citation-body">
                <span class="citation-file">{c.filename}</span>
                <Snippet citation={c} />
              </span>
            </button>
          </li>
        ))}
      </ol>
    </section>
  );
}

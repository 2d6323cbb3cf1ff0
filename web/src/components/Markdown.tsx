/** A message body rendered from markdown: one element per top-level block, so a streaming answer only repaints
 * the block that changed (the HTML is DOMPurify-sanitized in markdown.ts). */
import { useMemo } from "preact/hooks";
import { renderBlocks } from "../markdown";

interface Props {
  text: string;
}

export function Markdown({ text }: Props) {
  const blocks = useMemo(() => renderBlocks(text), [text]);
  return (
    <div class="message-body markdown">
      {blocks.map((html, i) => (
        <div key={i} class="md-block" dangerouslySetInnerHTML={{ __html: html }} />
      ))}
    </div>
  );
}

/** The message box: Enter sends, Shift+Enter is a new line; Send becomes Stop while an answer streams; the paperclip
 * attaches files (the keyboard's way to what drag and drop does); an image pasted into the box is attached too. */
import { useEffect, useRef } from "preact/hooks";
import { FilePicker } from "./FilePicker";
import { CodeIcon, PaperclipIcon, SendIcon, StopIcon } from "./icons";

interface Props {
  value: string;
  onChange(value: string): void;
  onSend(): void;
  onStop(): void;
  streaming: boolean;
  disabled: boolean;
  focusKey: unknown;
  /** Files chosen with the attach button. */
  onAttach?(files: File[]): void;
  /** The code interpreter switch, where the tier offers it. */
  code?: { on: boolean; toggle(): void };
}

export function Composer({ value, onChange, onSend, onStop, streaming, disabled, focusKey, onAttach, code }: Props) {
  const area = useRef<HTMLTextAreaElement>(null);
  const picker = useRef<HTMLInputElement>(null);
  useEffect(() => {
    if (window.matchMedia?.("(pointer: fine)").matches) area.current?.focus();
  }, [focusKey]);
  const lines = value.split("\n").length;
  const canSend = !streaming && !disabled && value.trim().length > 0;
  return (
    <form
      class="composer"
      onSubmit={(e) => {
        e.preventDefault();
        if (canSend) onSend();
      }}
    >
      {onAttach && (
        <>
          <button
            type="button"
            class="icon-btn attach-btn"
            data-testid="attach"
            aria-label="Attach files"
            title="Attach files (PDF, DOCX, HTML, Markdown, text) or images"
            onClick={() => picker.current?.click()}
          >
            <PaperclipIcon />
          </button>
          <FilePicker pickerRef={picker} testId="attach-input" onFiles={onAttach} />
        </>
      )}
      {code && (
        <button
          type="button"
          class={`icon-btn code-btn${code.on ? " on" : ""}`}
          data-testid="code-toggle"
          aria-pressed={code.on}
          aria-label="Run code"
          title={code.on ? "Code interpreter on: answers may run Python in a sandbox" : "Let answers run Python in a sandbox"}
          onClick={code.toggle}
        >
          <CodeIcon />
        </button>
      )}
      <label for="composer-input" class="sr-only">
        Message
      </label>
      <textarea
        ref={area}
        id="composer-input"
        class="composer-input"
        data-testid="composer"
        placeholder="Message fleetchat"
        rows={Math.min(8, Math.max(1, lines))}
        value={value}
        onInput={(e) => onChange((e.currentTarget as HTMLTextAreaElement).value)}
        onPaste={(e) => {
          const files = Array.from(e.clipboardData?.files ?? []).filter((file) => file.type.startsWith("image/"));
          if (files.length === 0 || !onAttach) return; // text pastes as text
          e.preventDefault();
          onAttach(files);
        }}
        onKeyDown={(e) => {
          if (e.key === "Enter" && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
            e.preventDefault();
            if (canSend) onSend();
          }
        }}
      />
      {streaming ? (
        <button key="stop" type="button" class="send-btn stop" data-testid="stop" aria-label="Stop generating" title="Stop (Esc)" onClick={onStop}>
          <StopIcon />
        </button>
      ) : (
        <button key="send" type="submit" class="send-btn" data-testid="send" aria-label="Send message" title="Send (Enter)" disabled={!canSend}>
          <SendIcon />
        </button>
      )}
    </form>
  );
}

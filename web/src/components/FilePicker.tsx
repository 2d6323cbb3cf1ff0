// The hidden file input behind an "attach" or "upload" button: the button clicks it through `pickerRef`, and the
// chosen files reach `onFiles` (the input is cleared so the same file can be chosen again).
import type { Ref } from "preact";
import { ACCEPT } from "../attachments";

interface Props {
  pickerRef: Ref<HTMLInputElement>;
  testId: string;
  onFiles: (files: File[]) => void;
}

export function FilePicker({ pickerRef, testId, onFiles }: Props) {
  return (
    <input
      ref={pickerRef}
      type="file"
      multiple
      accept={ACCEPT}
      class="sr-only"
      tabIndex={-1}
      aria-hidden="true"
      data-testid={testId}
      onChange={(e) => {
        const input = e.currentTarget as HTMLInputElement;
        const files = Array.from(input.files ?? []);
        input.value = ""; // the same file can be chosen again
        if (files.length > 0) onFiles(files);
      }}
    />
  );
}

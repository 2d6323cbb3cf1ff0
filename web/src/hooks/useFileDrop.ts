/** Drag and drop of files onto an area: whether files are being dragged over it, and the dropped files. A file
 * dragged over it while attaching is off is refused, never opened by the browser in place of the chat. */
import { useCallback, useRef, useState } from "preact/hooks";

function hasFiles(event: DragEvent): boolean {
  return Array.from(event.dataTransfer?.types ?? []).includes("Files");
}

export function useFileDrop(onFiles: (files: File[]) => void, enabled: boolean) {
  const [dragging, setDragging] = useState(false);
  // dragenter/dragleave fire for every child crossed: count them so leaving a child is not leaving the area.
  const depth = useRef(0);
  const onDragEnter = useCallback(
    (event: DragEvent) => {
      if (!hasFiles(event)) return;
      event.preventDefault();
      depth.current += 1;
      if (enabled) setDragging(true);
    },
    [enabled],
  );
  const onDragOver = useCallback(
    (event: DragEvent) => {
      if (!hasFiles(event)) return;
      event.preventDefault(); // the drop comes here (the browser would otherwise open the file)
      if (event.dataTransfer) event.dataTransfer.dropEffect = enabled ? "copy" : "none";
    },
    [enabled],
  );
  const onDragLeave = useCallback(() => {
    depth.current = Math.max(0, depth.current - 1);
    if (depth.current === 0) setDragging(false);
  }, []);
  const onDrop = useCallback(
    (event: DragEvent) => {
      depth.current = 0;
      setDragging(false);
      if (!hasFiles(event)) return;
      event.preventDefault();
      const files = Array.from(event.dataTransfer?.files ?? []);
      if (enabled && files.length > 0) onFiles(files);
    },
    [enabled, onFiles],
  );
  return { dragging, handlers: { onDragEnter, onDragOver, onDragLeave, onDrop } };
}

/** The images waiting in the composer, one thumbnail each with Remove; and a note when images cannot go now. */
import { formatBytes } from "../attachments";
import type { PendingImage } from "../images";
import { CloseIcon } from "./icons";

interface Props {
  images: PendingImage[];
  note: string | null;
  onRemove(key: string): void;
  onDismissNote(): void;
}

export function ImageChips({ images, note, onRemove, onDismissNote }: Props) {
  if (images.length === 0 && !note) return null;
  return (
    <div class="image-chips">
      {note && (
        <p class="image-note" role="alert" data-testid="image-note">
          <span>{note}</span>
          <button type="button" class="icon-btn" aria-label="Dismiss" onClick={onDismissNote}>
            <CloseIcon />
          </button>
        </p>
      )}
      {images.length > 0 && (
        <ul class="image-list" aria-label="Images to send with the message" data-testid="images">
          {images.map((image, index) => (
            <li key={image.key} class="image-chip" data-testid="image-chip">
              <img src={image.url} alt={`Image ${index + 1}: ${image.name}`} />
              <span class="sr-only">{formatBytes(image.bytes)}</span>
              <button
                type="button"
                class="icon-btn image-remove"
                aria-label={`Remove image ${index + 1} (${image.name})`}
                onClick={() => onRemove(image.key)}
              >
                <CloseIcon />
              </button>
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

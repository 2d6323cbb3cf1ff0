/**
 * Images in the composer (docs/api-parameters.md "Images"): which files are images the gateway takes, reading them as
 * data URIs, and a message's content with them as OpenAI `image_url` parts. The gateway checks every image again
 * (type from its bytes, size, pixels); this only spares a round trip for what it would refuse.
 */
import type { ContentPart, StoredMessage } from "./types";

export const IMAGE_TYPES = ["image/png", "image/jpeg", "image/webp", "image/gif"] as const;
/** The gateway's default `FLEETCHAT_IMAGES_MAX_BYTES`. */
export const MAX_IMAGE_BYTES = 5 * 1024 * 1024;
/** Images one message may carry (the deployed vision pool takes 4 a prompt). */
export const MAX_IMAGES = 4;

export interface PendingImage {
  key: string;
  name: string;
  bytes: number;
  /** `data:image/...;base64,...` */
  url: string;
}

export function isImage(file: File): boolean {
  return file.type.startsWith("image/");
}

/** Why the gateway would refuse this image, or null. */
export function imageProblem(file: File): string | null {
  if (!(IMAGE_TYPES as readonly string[]).includes(file.type)) return `${file.name}: only PNG, JPEG, WebP and GIF images.`;
  if (file.size > MAX_IMAGE_BYTES) return `${file.name} is over ${MAX_IMAGE_BYTES / 1024 / 1024} MB.`;
  return null;
}

let counter = 0;

export function readImage(file: File): Promise<PendingImage> {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () =>
      resolve({ key: `img${(counter += 1)}`, name: file.name || "pasted image", bytes: file.size, url: String(reader.result) });
    reader.onerror = () => reject(reader.error ?? new Error(`${file.name} could not be read.`));
    reader.readAsDataURL(file);
  });
}

/** A user message's content: the text alone, or the text then its images as parts. */
export function messageContent(text: string, images: readonly string[]): string | ContentPart[] {
  if (images.length === 0) return text;
  return [{ type: "text", text }, ...images.map((url) => ({ type: "image_url" as const, image_url: { url } }))];
}

/** The images of a stored message (its `content_parts`), in order. */
export function storedImages(message: StoredMessage): string[] {
  return (message.content_parts ?? []).flatMap((part) => (part.type === "image_url" ? [part.image_url.url] : []));
}

import { describe, expect, it } from "vitest";
import { imageProblem, isImage, MAX_IMAGE_BYTES, messageContent, readImage, storedImages } from "./images";

function file(name: string, type: string, bytes = 10): File {
  return new File([new Uint8Array(bytes)], name, { type });
}

describe("images", () => {
  it("sends text alone, or the text then its images as image_url parts", () => {
    expect(messageContent("Hi", [])).toBe("Hi");
    expect(messageContent("What is it?", ["data:image/png;base64,AAAA", "data:image/gif;base64,BBBB"])).toEqual([
      { type: "text", text: "What is it?" },
      { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
      { type: "image_url", image_url: { url: "data:image/gif;base64,BBBB" } },
    ]);
  });

  it("reads a stored message's images in order and nothing from a text message", () => {
    const parts = [
      { type: "image_url" as const, image_url: { url: "data:image/png;base64,A" } },
      { type: "text" as const, text: "Compare" },
      { type: "image_url" as const, image_url: { url: "data:image/png;base64,B" } },
    ];
    expect(storedImages({ role: "user", content: "Compare", content_parts: parts })).toEqual([
      "data:image/png;base64,A",
      "data:image/png;base64,B",
    ]);
    expect(storedImages({ role: "user", content: "Hi", content_parts: null })).toEqual([]);
    expect(storedImages({ role: "user", content: "Hi" })).toEqual([]);
  });

  it("names what the gateway would refuse before it is read", () => {
    expect(isImage(file("a.png", "image/png"))).toBe(true);
    expect(isImage(file("a.pdf", "application/pdf"))).toBe(false);
    expect(imageProblem(file("a.png", "image/png"))).toBeNull();
    expect(imageProblem(file("a.svg", "image/svg+xml"))).toContain("only PNG, JPEG, WebP and GIF");
    expect(imageProblem(file("big.jpg", "image/jpeg", MAX_IMAGE_BYTES + 1))).toContain("over 5 MB");
  });

  it("reads a file as a data URI", async () => {
    const image = await readImage(new File([new Uint8Array([137, 80, 78, 71])], "p.png", { type: "image/png" }));
    expect(image.url).toBe("data:image/png;base64,iVBORw==");
    expect(image.name).toBe("p.png");
    expect(image.bytes).toBe(4);
  });
});

// Frames for the live panel: pure functions, no DOM, no I/O.
//
// The people counter's detector reads binary PGM (P5) and PPM (P6) images, so
// the page sends those: the sample frames as the server gives them, and camera
// frames converted here from canvas RGBA to a small grayscale PGM.

/** Base64 text of a byte array (what a `realtime` message carries). */
export function base64FromBytes(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

/** The bytes of base64 text. */
export function bytesFromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

function isSpace(byte) {
  return byte === 0x20 || byte === 0x09 || byte === 0x0a || byte === 0x0d || byte === 0x0b
    || byte === 0x0c;
}

/** Decode a binary PGM/PPM: `{width, height, luma}` (one 0–255 value a pixel); throws if not. */
export function parsePnm(bytes) {
  const tokens = [];
  let pos = 0;
  while (tokens.length < 4) {
    while (pos < bytes.length && isSpace(bytes[pos])) pos++;
    if (bytes[pos] === 0x23) {  // "#": a comment to the end of its line
      while (pos < bytes.length && bytes[pos] !== 0x0a && bytes[pos] !== 0x0d) pos++;
      continue;
    }
    const start = pos;
    while (pos < bytes.length && !isSpace(bytes[pos]) && bytes[pos] !== 0x23) pos++;
    if (start === pos) throw new Error("truncated PNM header");
    tokens.push(String.fromCharCode(...bytes.subarray(start, pos)));
  }
  pos++;  // one whitespace byte ends the header
  const [magic, ...numbers] = tokens;
  if ((magic !== "P5" && magic !== "P6") || !numbers.every((t) => /^\d+$/.test(t))) {
    throw new Error("not a binary PGM/PPM image");
  }
  const [width, height, maxval] = numbers.map(Number);
  if (!(maxval > 0 && maxval < 256)) throw new Error("only 8-bit PGM/PPM images are supported");
  const channels = magic === "P5" ? 1 : 3;
  const pixels = bytes.subarray(pos, pos + width * height * channels);
  if (pixels.length !== width * height * channels) throw new Error("truncated PNM pixel data");
  const luma = new Uint8Array(width * height);
  for (let i = 0; i < luma.length; i++) {
    luma[i] = channels === 1 ? Math.floor(pixels[i] * 255 / maxval)
      : Math.floor((299 * pixels[3 * i] + 587 * pixels[3 * i + 1] + 114 * pixels[3 * i + 2])
                   * 255 / (1000 * maxval));
  }
  return { width, height, luma };
}

/** A binary PGM (P5) of canvas RGBA pixels (ITU-R BT.601 luma, as the detector computes it). */
export function pgmFromRgba(rgba, width, height) {
  if (rgba.length !== width * height * 4) throw new Error("RGBA data does not match the size");
  const header = new TextEncoder().encode(`P5\n${width} ${height}\n255\n`);
  const out = new Uint8Array(header.length + width * height);
  out.set(header);
  for (let i = 0; i < width * height; i++) {
    out[header.length + i] = Math.floor(
      (299 * rgba[4 * i] + 587 * rgba[4 * i + 1] + 114 * rgba[4 * i + 2]) / 1000);
  }
  return out;
}

/** RGBA pixels (for `ImageData`) showing luminance values as gray. */
export function rgbaFromLuma(luma) {
  const rgba = new Uint8ClampedArray(luma.length * 4);
  for (let i = 0; i < luma.length; i++) {
    rgba[4 * i] = rgba[4 * i + 1] = rgba[4 * i + 2] = luma[i];
    rgba[4 * i + 3] = 255;
  }
  return rgba;
}

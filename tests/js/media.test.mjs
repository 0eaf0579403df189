// The live panel's frame helpers: `node --test tests/js/media.test.mjs`.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  base64FromBytes, bytesFromBase64, parsePnm, pgmFromRgba, rgbaFromLuma,
} from "../../src/headwater/gateway/static/media.js";

const ascii = (text) => new TextEncoder().encode(text);
const concat = (...parts) => {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) { out.set(part, at); at += part.length; }
  return out;
};

test("base64 round-trips every byte value, also past one chunk", () => {
  const bytes = new Uint8Array(70000).map((_, i) => (i * 31) % 256);
  const text = base64FromBytes(bytes);
  assert.equal(text, Buffer.from(bytes).toString("base64"));
  assert.deepEqual(bytesFromBase64(text), bytes);
});

test("a PGM with a comment and a small maxval decodes to luminance", () => {
  const image = concat(ascii("P5\n# made by hand\n2 1\n15\n"), new Uint8Array([15, 7]));
  assert.deepEqual(parsePnm(image), { width: 2, height: 1, luma: new Uint8Array([255, 119]) });
});

test("a PPM decodes to BT.601 luma", () => {
  const image = concat(ascii("P6 2 1 255\n"), new Uint8Array([255, 0, 0, 255, 255, 255]));
  assert.deepEqual([...parsePnm(image).luma], [76, 255]);
});

test("what is not a binary 8-bit PNM is refused", () => {
  for (const bad of [ascii("\xff\xd8 a jpeg"), ascii("P2 2 2 255\n1 2 3 4"),
                     concat(ascii("P5 4 4 255\n"), new Uint8Array(15)),
                     concat(ascii("P5 4 4 65535\n"), new Uint8Array(32)), ascii("P5 4")]) {
    assert.throws(() => parsePnm(bad));
  }
});

test("camera RGBA becomes a PGM the decoder reads back", () => {
  const rgba = new Uint8ClampedArray([255, 255, 255, 255, 0, 0, 0, 255, 255, 0, 0, 255,
                                      10, 200, 30, 255]);
  const pgm = pgmFromRgba(rgba, 2, 2);
  assert.equal(new TextDecoder().decode(pgm.subarray(0, 11)), "P5\n2 2\n255\n");
  assert.deepEqual([...parsePnm(pgm).luma], [255, 0, 76, 123]);
  assert.throws(() => pgmFromRgba(rgba, 3, 2));
});

test("luminance is shown as opaque gray", () => {
  assert.deepEqual([...rgbaFromLuma(new Uint8Array([0, 200]))], [0, 0, 0, 255, 200, 200, 200, 255]);
});

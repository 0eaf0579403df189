// A sans-I/O Server-Sent Events decoder: feed() text, get frames back.
// Lines end with CR, LF or CRLF (a CR at the end of a chunk may be half a CRLF).

export class SSEDecoder {
  constructor() {
    this.buffer = "";
    this.reset();
    this.lastEventId = "";
  }

  reset() {
    this.event = "";
    this.data = [];
    this.id = null;
  }

  /** Decode a piece of text; answers the frames it completed: {id, type, data}. */
  feed(text) {
    this.buffer += text;
    const frames = [];
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer);
      if (!match) break;
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;  // maybe CRLF
      const line = this.buffer.slice(0, match.index);
      this.buffer = this.buffer.slice(match.index + match[0].length);
      const frame = this.line(line);
      if (frame) frames.push(frame);
    }
    return frames;
  }

  /** The end of the stream: a frame without its blank line is dropped, as browsers do. */
  flush() {
    this.buffer = "";
    this.reset();
    return [];
  }

  line(line) {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return null;  // a heartbeat comment
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") this.event = value;
    else if (field === "data") this.data.push(value);
    else if (field === "id" && !value.includes("\0")) this.id = value;
    return null;
  }

  dispatch() {
    if (this.id !== null) this.lastEventId = this.id;
    const frame = this.data.length === 0 ? null
      : { id: this.id ?? this.lastEventId, type: this.event || "message",
          data: this.data.join("\n") };
    this.reset();
    return frame;
  }
}

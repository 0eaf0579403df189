// The Vercel AI SDK's own client against the gateway's POST /vercel/{agent}.
//
//   node vercel_client.mjs <stream|chat> <url> <chatId> <text> [--approve] [--last-only]
//
// --last-only sends only the last message (the README's prepareSendMessagesRequest).
// HEADWATER_TOKEN (optional) goes out as a bearer token. Everything is parsed,
// validated and assembled by the pinned `ai` package: `DefaultChatTransport`
// (SSE parsing + the uiMessageChunkSchema zod validation), `readUIMessageStream`
// and `AbstractChat` (the engine behind React's `useChat`). Prints one JSON
// object on stdout:
//   stream mode: {chunks: [type...], errors: [message...], messages: UIMessage snapshot,
//                 tools: [{toolCallId, state, preliminary, output}...] as they changed}
//   chat mode:   {turns: [{status, error, messages}...], tools: [...as above]}
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
} from "ai";

const [mode, url, chatId, text, ...flags] = process.argv.slice(2);
const approve = flags.includes("--approve");
const token = process.env.HEADWATER_TOKEN;
const transport = new DefaultChatTransport({
  api: url,
  headers: token ? { Authorization: `Bearer ${token}` } : {},
  ...(flags.includes("--last-only")
    ? {
        prepareSendMessagesRequest: ({ id, messages, trigger }) => ({
          body: { id, trigger, messages: messages.slice(-1) },
        }),
      }
    : {}),
});

const timer = setTimeout(() => {
  console.error("vercel_client: timed out");
  process.exit(3);
}, 20_000);

// Every change of a tool part, in order: preliminary outputs then the final one.
const tools = [];
function recordTools(message) {
  for (const part of message.parts) {
    if (!part.type.startsWith("tool-")) continue;
    const seen = {
      toolCallId: part.toolCallId,
      type: part.type,
      state: part.state,
      preliminary: part.preliminary ?? false,
      output: part.output,
    };
    const last = tools.findLast((t) => t.toolCallId === part.toolCallId);
    if (JSON.stringify(last) !== JSON.stringify(seen)) tools.push(seen);
  }
}

function userMessage(id) {
  return { id, role: "user", parts: [{ type: "text", text }] };
}

async function streamMode() {
  const chunks = [];
  const errors = [];
  const stream = await transport.sendMessages({
    chatId,
    messages: [userMessage("u1")],
    trigger: "submit-message",
    messageId: undefined,
    abortSignal: undefined,
  });
  const tee = stream.pipeThrough(
    new TransformStream({
      transform(chunk, controller) {
        chunks.push(chunk.type);
        controller.enqueue(chunk);
      },
    }),
  );
  let messages;
  for await (const message of readUIMessageStream({
    stream: tee,
    onError: (error) => errors.push(error.message),
  })) {
    recordTools(message);
    messages = message;
  }
  return { chunks, errors, messages, tools };
}

// The state useChat keeps in React, kept in plain arrays; every write is recorded.
class ArrayState {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
    recordTools(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
    recordTools(message);
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new ArrayState() });
  }
}

async function chatMode() {
  const turns = [];
  let finished = () => {};
  const chat = new Chat({
    id: chatId,
    transport,
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
    onFinish: () => finished(),
  });
  const snapshot = () => ({
    status: chat.status,
    error: chat.error?.message ?? null,
    messages: structuredClone(chat.messages),
  });
  await chat.sendMessage({ text });
  turns.push(snapshot());
  if (approve) {
    const pending = chat.lastMessage.parts.find((p) => p.state === "approval-requested");
    if (pending) {
      const next = new Promise((resolve) => {
        finished = resolve;
      });
      await chat.addToolApprovalResponse({ id: pending.approval.id, approved: true });
      await next; // the automatic request useChat makes once every approval is answered
      turns.push(snapshot());
    }
  }
  return { turns, tools };
}

try {
  const result = mode === "stream" ? await streamMode() : await chatMode();
  process.stdout.write(JSON.stringify(result));
  clearTimeout(timer);
} catch (error) {
  console.error(`vercel_client: ${error?.stack ?? error}`);
  process.exit(2);
}

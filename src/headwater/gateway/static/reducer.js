// The chat reducer (seed 004): pure, no DOM, no I/O.
//
//   state = { items, drafts, status, error }
//   items:  the record, in order: {kind: "message", author, branch?, id, text, final, run?}
//           | {kind: "tool", call_id, name, author?, branch?, status, progress, message, approval,
//              lines, emissions?}: approval {args_sha256, display, decided} once asked
//           | {kind: "transfer", author, to, call_id, branch?}: the conversation went to `to`
//           | {kind: "usage", usage} | {kind: "error", code, retryable}
//           | {kind: "notice", code}: said about the record itself ("no_answer")
//   drafts: {key: text}: what deltas built so far, one draft per author and branch
//           (draftKey; draftOf reads a key back).
//
// The rule: a `delta` appends to its author's draft (on its branch); a `message` (the
// aggregate, the record) replaces that draft; a `tool_call` clears its author's draft,
// `error` and `done` clear every draft. Text is never appended twice. History from the
// server has no drafts. `outerCallId(branch)` names the call an item nests under (an
// agent used as a tool), for the page to show it inside that call's card.

export const initialState = Object.freeze({
  items: [], drafts: {}, status: "idle", error: null,
});

const ERROR_WORDS = {
  cancelled: "The run was stopped.",
  provider_unavailable: "The model provider could not be reached.",
  provider_rejected: "The model provider refused the request.",
  provider_truncated: "The model's answer broke off; none of it was kept.",
  provider_timeout: "The model provider did not answer in time.",
  provider_error: "The model provider reported an error.",
  provider_bad_response: "The model provider sent something that is not an answer.",
  model_protocol_violation: "The model's answer was malformed; none of it was kept.",
  tool_call_incomplete: "The model sent an incomplete tool call.",
  output_invalid: "The model's answer did not have the shape the agent asks for.",
  budget_exceeded: "The run used up one of its budgets.",
  too_many_streams: "Too many conversations are streaming at once; try again shortly.",
  rate_limited: "Too many requests; try again shortly.",
  session_busy: "Another answer is still running in this session.",
  server_shutdown: "The server is restarting; try again shortly.",
  store_unavailable: "The conversation could not be saved.",
  run_store_unavailable: "The server lost track of live answers; try again shortly.",
  unauthorized: "The server refused the token.",
  forbidden: "The server refused this page's request.",
  payload_too_large: "The message is too large for this server.",
  request_timeout: "The request took too long to arrive.",
  method_not_allowed: "The server does not take that request.",
  not_found: "That session or run no longer exists.",
  invalid_request: "The server could not accept that request.",
  network: "The connection to the server was lost.",
  internal: "Something went wrong on the server.",
};

/** Words a person understands for an error code (the code is shown next to them). */
export function errorWords(code) {
  return ERROR_WORDS[code] ?? "Something went wrong.";
}

function dataOf(frame) {
  return typeof frame.data === "string" ? JSON.parse(frame.data) : (frame.data ?? {});
}

/** The draft of `author` on `branch`: the author on the main line, `author@branch` off it
 *  (an agent's name has no `@`). */
export function draftKey(author, branch) {
  return branch ? `${author}@${branch}` : author;
}

/** A draft's key read back: `{author, branch}` (branch null on the main line). */
export function draftOf(key) {
  const at = key.indexOf("@");
  return at === -1 ? { author: key, branch: null }
    : { author: key.slice(0, at), branch: key.slice(at + 1) };
}

/** The call a frame on `branch` nests under (docs/frame-protocol.md, Provenance): an agent
 *  used as a tool runs on `<calling agent>:<call id>`, so the last `:` of the branch starts
 *  the call's id, which runs to the next `.` or to the end; null when no segment names a
 *  call (the main line, a parallel agent's branch). */
export function outerCallId(branch) {
  if (!branch) return null;
  const mark = branch.lastIndexOf(":");
  if (mark === -1) return null;
  const end = branch.indexOf(".", mark);
  return end === -1 ? branch.slice(mark + 1) : branch.slice(mark + 1, end);
}

function withoutKey(object, key) {
  const copy = { ...object };
  delete copy[key];
  return copy;
}

function upsert(items, match, make, change) {
  const at = items.findIndex(match);
  if (at === -1) return [...items, change(make())];
  const copy = items.slice();
  copy[at] = change(copy[at]);
  return copy;
}

function toolCard(callId, name, who) {
  const card = { kind: "tool", call_id: callId, name, status: "running", progress: null,
                 message: null, approval: null, lines: [] };
  if (who?.author) card.author = who.author;
  if (who?.branch) card.branch = who.branch;
  return card;
}

// `who`: the frame (or history item) the card is made from, for its author and branch.
function updateTool(items, callId, name, change, who = null) {
  return upsert(items, (i) => i.kind === "tool" && i.call_id === callId,
                () => toolCard(callId, name, who), change);
}

/** Progress from a tool_progress delta: "40%" or "2/5" is determinate; else a count. */
export function progressOf(previous, delta) {
  const text = delta ?? "";
  const percent = /(\d+(?:\.\d+)?)\s*%/.exec(text);
  if (percent) return { value: Math.min(Number(percent[1]), 100), max: 100 };
  const ratio = /(\d+)\s*\/\s*(\d+)/.exec(text);
  if (ratio && Number(ratio[2]) > 0) {
    return { value: Math.min(Number(ratio[1]), Number(ratio[2])), max: Number(ratio[2]) };
  }
  if (previous && previous.max !== null) return previous;
  return { value: (previous?.value ?? 0) + 1, max: null };
}

// What a live streaming tool tells the model and the user: "Function <name> returned: <value>"
// for each value, then one end: "… finished streaming.", "… stopped streaming: <why>" or
// "… failed: <why>". A stop asked for with stop_streaming ends it without a word.
const EMITTED = /^Function (\w+) returned: ([\s\S]*)$/;
const ENDED = /^Function (\w+) (finished streaming|stopped streaming|failed)\b/;
const END_STATUS = { "finished streaming": "finished", "stopped streaming": "stopped",
                     failed: "failed" };
const STREAM_ENDS = new Set(Object.values(END_STATUS));

/** A live tool's emission read: `{tool, value}` for a value, `{tool, end}` for its end
 *  ("finished", "stopped" or "failed"), else `{}`. */
export function readEmission(text) {
  const value = EMITTED.exec(text ?? "");
  if (value) return { tool: value[1], value: value[2] };
  const end = ENDED.exec(text ?? "");
  return end ? { tool: end[1], end: END_STATUS[end[2]] } : {};
}

/** An emission as a person reads it: "tool: value" (not the words the model reads). */
export function emissionText(text) {
  const { tool, value } = readEmission(text);
  return value === undefined ? (text ?? "") : `${tool}: ${value}`;
}

/** The number of values a live tool's card has listed (its end is not a value). */
export function emittedValues(card) {
  return (card.emissions ?? []).filter((e) => readEmission(e.text).value !== undefined).length;
}

// A live stream's card: "started" (its pending result came, no value yet), "streaming"
// (values coming), or one of its ends.
function isStream(card) {
  return card.status === "started" || card.status === "streaming" || STREAM_ENDS.has(card.status);
}

// A run's end ends its live streams: a card still started or streaming then says "stopped".
function endStreams(items) {
  return items.map((i) => (i.kind === "tool" && (i.status === "streaming" || i.status === "started")
    ? { ...i, status: "stopped" } : i));
}

function addMessage(state, d, run = null) {
  const message = { kind: "message", author: d.author, id: d.id ?? null, text: d.text ?? "",
                    final: Boolean(d.final) };
  if (d.branch) message.branch = d.branch;
  if (run) message.run = run;  // the run that said it (the page's Inspect)
  if (d.interrupted) message.interrupted = true;
  const items = message.id === null
    ? [...state.items, message]
    : upsert(state.items, (i) => i.kind === "message" && i.id === message.id,
             () => message, () => message);
  return { ...state, items, drafts: withoutKey(state.drafts, draftKey(d.author, d.branch)) };
}

function onToolCall(state, d) {
  let items = state.items;
  const calls = d.calls ?? (d.names ?? []).map((name, n) => ({ id: `${name}#${n}`, name }));
  for (const call of calls) items = updateTool(items, call.id, call.name, withArgs(call), d);
  // The caller's draft is done (its message came first); another agent's goes on.
  const drafts = d.author === undefined ? {} : withoutKey(state.drafts, draftKey(d.author, d.branch));
  return { ...state, items, drafts, status: "Calling " + (d.names ?? []).join(", ") };
}

function onToolProgress(state, d) {
  const measured = typeof d.progress === "number";
  const items = updateTool(state.items, d.call_id, d.name, (card) => ({
    ...card,
    status: card.status === "ok" || card.status === "error" ? card.status : "running",
    progress: measured ? measureOf(d)
      : d.type === "part_delta" || d.delta ? progressOf(card.progress, d.delta) : card.progress,
    lines: d.delta ? [...card.lines, d.delta] : card.lines,
    message: d.message ?? card.message ?? null,
  }), d);
  return { ...state, items };
}

/** Progress a tool measures itself (an MCP server's `notifications/progress`): `progress` of
 * `total`, determinate when the total is known; else indeterminate. */
export function measureOf(d) {
  const total = typeof d.total === "number" && d.total > 0 ? d.total : null;
  return { value: total === null ? d.progress : Math.min(d.progress, total), max: total };
}

// A denied call's result is the denial (status "error"): the card keeps saying "denied".
// A live stream's result, "pending", comes at once: its card says "started" until a value
// comes, and then keeps saying what its stream does.
// A call whose approval a later message left unanswered says "superseded" (code superseded);
// one the run's stop cut short (code cancelled) says so, not that it failed.
function resultStatus(card, result) {
  if (result.code === "superseded") return "superseded";
  if (result.code === "cancelled") return "cancelled";
  if (card.status === "denied" || isStream(card)) return card.status;
  if (result.status === "pending") return "started";
  return result.status === "error" ? "error" : "ok";
}

// A call's arguments, when the gateway shows them (expose_result, and the built-in
// stop_streaming, whose arguments are a tool's name and a call id).
function withArgs(call) {
  return (card) => (call.args === undefined ? card : { ...card, args: call.args });
}

// The model stopped streams (stop_streaming): the cards of the tool it named (and of the one
// call, with call_id) say "stopped". Without its arguments, every card still streaming does;
// one that emits again streams again.
function stopped(items, results) {
  let out = items;
  for (const r of results) {
    if (r.name !== "stop_streaming" || r.status !== "ok") continue;
    const args = items.find((i) => i.kind === "tool" && i.call_id === r.id)?.args;
    out = args?.function_name === undefined ? endStreams(out) : out.map((i) => (
      i.kind === "tool" && i.status === "streaming" && i.name === args.function_name
        && (args.call_id === undefined || i.call_id === args.call_id)
        ? { ...i, status: "stopped" } : i));
  }
  return out;
}

function onToolResult(state, d) {
  let items = stopped(state.items, d.results ?? []);
  for (const r of d.results ?? []) {
    items = updateTool(items, r.id, r.name, (card) => ({
      ...card, status: resultStatus(card, r),
      progress: card.progress && r.status !== "error"
        ? { value: card.progress.max ?? card.progress.value, max: card.progress.max }
        : card.progress,
    }), d);
  }
  return { ...state, items };
}

function addEmission(items, callId, id, text) {
  return updateTool(items, callId, "", (card) => {
    const emissions = card.emissions ?? [];
    if (id && emissions.some((e) => e.id === id)) return card;
    const { value, end } = readEmission(text);
    const status = end ?? (value !== undefined ? "streaming" : card.status);
    return { ...card, status, emissions: [...emissions, { id: id ?? null, text }] };
  });
}

// An approval asked: what the approver is shown (`display`: the tool's summary, or the call
// with its arguments) and the hash the answer is bound to. A frame or a history item.
function asked(card, d) {
  return { ...card, status: "awaiting_approval",
           approval: { args_sha256: d.args_sha256 ?? null, display: d.display ?? null,
                       decided: null } };
}

function onApprovalRequired(state, d) {
  return { ...state, items: waitingAbove(updateTool(state.items, d.call_id, d.name,
                                                    (card) => asked(card, d), d), d.branch) };
}

/** Every call a branch lies under (an agent used as a tool runs on `<agent>:<call id>`,
 *  nested ones one under another), outermost first. */
export function callsAbove(branch) {
  const ids = [];
  for (const segment of (branch ?? "").split(".")) {
    const mark = segment.indexOf(":");
    if (mark !== -1) ids.push(segment.slice(mark + 1));
  }
  return ids;
}

// An approval asked inside an agent used as a tool pauses the calls that ran it (docs/
// multi-agent.md, "A pause inside a tree"): their cards wait until the answer comes.
function waitingAbove(items, branch) {
  const above = new Set(callsAbove(branch));
  if (!above.size) return items;
  return items.map((i) => (i.kind === "tool" && above.has(i.call_id) && i.status === "running"
    ? { ...i, status: "waiting" } : i));
}

/** A plain message the server took supersedes every approval still waiting for an answer
 *  (docs/tools.md, Approvals): those cards say "superseded" and ask nothing more. */
export function supersede(items) {
  return items.map((i) => (i.kind === "tool" && ((i.status === "awaiting_approval"
    && !i.approval?.decided) || i.status === "waiting") ? { ...i, status: "superseded" } : i));
}

function transferItem(d) {
  const item = { kind: "transfer", author: d.author, to: d.to, call_id: d.call_id ?? null };
  if (d.branch) item.branch = d.branch;
  return item;
}

function onTransfer(state, d) {
  // Shown once, even when a resumed stream replays it.
  if (d.call_id && state.items.some((i) => i.kind === "transfer" && i.call_id === d.call_id)) {
    return state;
  }
  return { ...state, items: [...state.items, transferItem(d)] };
}

/** The state after one frame `{type, data}` (`data`: JSON text or an object). */
export function reduce(state, frame) {
  const d = dataOf(frame);
  switch (frame.type) {
    case "user":  // sent from this page; the server records it too
      return { ...state, items: [...state.items, { kind: "message", author: "user", id: null,
                                                   text: d.text, final: true }],
               error: null, status: "running" };
    case "delta": {
      const key = draftKey(d.author, d.branch);
      const text = (state.drafts[key] ?? "") + d.text;
      return { ...state, drafts: { ...state.drafts, [key]: text } };
    }
    case "message":  // the aggregate replaces the draft; it is the record
      return addMessage(state, d, frame.run);
    case "tool_call":
      return onToolCall(state, d);
    case "tool_progress":
      return onToolProgress(state, d);
    case "tool_result":
      return onToolResult(state, d);
    case "approval_required":
      return onApprovalRequired(state, d);
    case "agent_transfer":  // the conversation went to another agent
      return onTransfer(state, d);
    case "tool_emission":  // live runs: what a streaming tool just said, as it arrives
      return { ...state, items: addEmission(state.items, d.call_id, d.id, d.text) };
    case "superseded":  // the server took a plain message: pending approvals are answered
      return { ...state, items: supersede(state.items) };
    case "decision": {  // the page answered an approval; the calls above it go on
      const branch = state.items.find((i) => i.kind === "tool" && i.call_id === d.call_id)?.branch;
      const above = new Set(callsAbove(branch));
      const items = updateTool(state.items, d.call_id, d.name ?? "", (card) => ({
        ...card, status: d.approved ? "running" : "denied",
        approval: { ...(card.approval ?? {}), decided: d.approved ? "approved" : "denied" },
      }));
      return { ...state, items: items.map((i) => (i.kind === "tool" && above.has(i.call_id)
        && i.status === "waiting" ? { ...i, status: "running" } : i)) };
    }
    case "error":
      return { ...state, drafts: {}, status: "error",
               items: [...endStreams(state.items), { kind: "error", code: d.code,
                                         retryable: Boolean(d.retryable) }],
               error: { code: d.code, retryable: Boolean(d.retryable) } };
    case "done":
      return { ...state, drafts: {}, status: "done",
               items: d.usage ? [...endStreams(state.items), { kind: "usage", usage: d.usage }]
                 : endStreams(state.items) };
    default:
      return state;
  }
}

function historyTool(items, item) {
  for (const call of item.calls ?? []) {
    items = updateTool(items, call.id, call.name, withArgs(call), item);
  }
  items = stopped(items, item.results ?? []);
  for (const r of item.results ?? []) {
    items = updateTool(items, r.id, r.name, (card) => ({ ...card, status: resultStatus(card, r) }),
                       item);
  }
  if (item.transfer_to) {
    const call = (item.results ?? []).find((r) => r.name === "transfer_to_agent");
    items = [...items, transferItem({ author: item.author, to: item.transfer_to,
                                      call_id: call?.id, branch: item.branch })];
  }
  for (const a of item.approvals_requested ?? []) {
    items = waitingAbove(updateTool(items, a.call_id, a.name, (card) => asked(card, a), item),
                         item.branch);
  }
  for (const a of item.approval_decisions ?? []) {
    items = updateTool(items, a.call_id, "", (card) => ({
      ...card, status: a.approved ? card.status : "denied",
      approval: { ...(card.approval ?? {}), decided: a.approved ? "approved" : "denied" },
    }));
  }
  return items;
}

function emissionCall(items, item) {
  // A live tool's emission is stored under the branch "<agent>/<call id>".
  const slash = (item.branch ?? "").lastIndexOf("/");
  const callId = slash === -1 ? null : item.branch.slice(slash + 1);
  return items.some((i) => i.kind === "tool" && i.call_id === callId) ? callId : null;
}

function historyItem(items, item) {
  const emittedBy = item.text ? emissionCall(items, item) : null;
  if (emittedBy) return addEmission(items, emittedBy, item.id, item.text);
  items = historyTool(items, item);
  if (item.text && !(item.approval_decisions && item.author === "user")) {
    const message = { kind: "message", author: item.author, id: item.id, text: item.text,
                      final: Boolean(item.final) };
    if (item.branch) message.branch = item.branch;
    if (item.interrupted) message.interrupted = true;
    if (item.invocation_id) message.run = item.invocation_id;
    items = [...items, message];
  }
  if (item.error) items = [...items, { kind: "error", code: item.error.code, retryable: false }];
  return items;
}

function addUsage(total, usage) {
  if (!usage) return total;
  return { input_tokens: (total?.input_tokens ?? 0) + (usage.input_tokens ?? 0),
           output_tokens: (total?.output_tokens ?? 0) + (usage.output_tokens ?? 0) };
}

// A user's turn: what they said, or their answer to an approval or a pending call.
function userTurn(item) {
  return item.author === "user" && !item.branch
    && Boolean(item.text || item.approval_decisions || item.results);
}

// The record's last user turn got nothing back: no words, no error, no approval asked.
function unanswered(events) {
  const at = events.findLastIndex(userTurn);
  return at !== -1 && !events.slice(at + 1).some((i) => i.author !== "user"
    && (i.text || i.error || i.approvals_requested?.length));
}

/** The state a page shows from the server's history (stored events, oldest first).
 *
 *  Each run (invocation) ends with the tokens its stored model calls used. `ended`: no run
 *  is going on in the session, so nothing more will be stored: live streams are over, and a
 *  last turn without an answer says so (the run ended before it finished: a crash, say). */
export function fromHistory(events, { ended = false } = {}) {
  let items = [];
  let usage = null;
  events.forEach((item, n) => {
    items = historyItem(items, item);
    usage = addUsage(usage, item.usage);
    if (usage && events[n + 1]?.invocation_id !== item.invocation_id) {
      items = [...items, { kind: "usage", usage }];
      usage = null;
    }
  });
  if (ended) {
    items = endStreams(items);
    if (unanswered(events)) items = [...items, { kind: "notice", code: "no_answer" }];
  }
  return { ...initialState, items, status: "idle" };
}

/** Clear every draft: what a page does when it loses its stream. */
export function dropDrafts(state) {
  return { ...state, drafts: {} };
}

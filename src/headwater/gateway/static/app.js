// The page: sessions, the chat (reducer.js), runs over fetch + a streaming SSE reader.
// Runs start resumable; the run id and the last frame id live in sessionStorage so
// a reload picks a running run up again with Last-Event-ID. A new session is a draft
// (sessionId null) until its first message (or Go live): only then is it stored.
// A request that fails says why in the status line (the server's message and code) until
// the user acts again; a 401 asks for a token; a message that does not go stays in the box.
import {
  draftOf, emissionText, emittedValues, errorWords, fromHistory, initialState, outerCallId,
  readEmission, reduce,
} from "./reducer.js";
import { SSEDecoder } from "./sse.js";
import { el } from "./dom.js";
import { inspector } from "./inspect.js";
import {
  base64FromBytes, bytesFromBase64, parsePnm, pgmFromRgba, rgbaFromLuma,
} from "./media.js";

const CONFIG = JSON.parse(document.getElementById("headwater-config")?.textContent || "{}");
const AUTH = CONFIG.auth ?? "none";
const AGENTS = CONFIG.agents ?? [];
const RUN_KEY = "headwater.run";
const SESSION_KEY = "headwater.session";
const TOKEN_KEY = "headwater.token";
const TERMINAL = new Set(["done", "error"]);
const DRAFT_TYPES = new Set(["delta", "tool_progress"]);  // shown, never stored

const $ = (id) => document.getElementById(id);
let sessionId = null;  // null: a new session, not stored until its first message
let draftAgent = null;  // a draft's agent when the page chose it (a suggestion, a hand-off)
let problem = null;  // {code, text}: the last failed request, shown until the user acts again
let state = initialState;
let active = null;  // {runId, controller, sessionId}
let starting = false;  // a message is on its way: its session being stored, its run started
let creating = null;  // the POST /sessions in flight for the draft, shared by its callers
let known = new Map();  // session id -> session
const sentFirst = new Map();  // session id -> its first message, until the server has a title
let live = null;  // {socket, sessionId, ready}: a live run over WS /live/{sid}
let handoff = null;  // {sessionId, agent}: a run handed the conversation to a live agent
let feed = null;  // {kind: "sample" | "camera", timer, sent, stream?}: frames going to `live`
const CAMERA_SIZE = [64, 48];  // camera frames are sent as PGM this small (the detector is pure Python)

class ApiError extends Error {
  // `code`: the server's error code, or the page's own "network" (no answer); `message`:
  // the server's words (the error envelope's), if it said any.
  constructor(code, message = "") { super(message); this.code = code; }
}

function authHeaders(extra = {}) {
  const token = localStorage.getItem(TOKEN_KEY);
  return token && AUTH !== "none" ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function api(method, path, body) {
  const init = { method, headers: authHeaders(body ? { "Content-Type": "application/json" } : {}) };
  if (body) init.body = JSON.stringify(body);
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError("network");
  }
  if (!response.ok) throw await apiError(response);
  return response.status === 204 ? null : response.json();
}

async function apiError(response) {
  try {
    const body = await response.json();
    return new ApiError(body.error?.code ?? "internal", body.error?.message ?? "");
  } catch {
    return new ApiError("internal", `HTTP ${response.status}`);
  }
}

function showProblem(error) {
  // In the status line, by the message box: the server's words (else the page's) and the
  // code, until the user acts again (clearProblem); a refused token asks for another.
  const code = error instanceof ApiError ? error.code : "internal";
  const said = error instanceof ApiError && error.message ? error.message : errorWords(code);
  problem = { code, text: `${said} (${code})` };
  if (code === "unauthorized") askToken(problem.text);
  render();
}

function clearProblem() {
  problem = null;
}

function askToken(why) {
  // The token prompt (a modal dialog): why it is asked, the token kept so far.
  if (AUTH === "none") return;
  $("token-why").textContent = why;
  const dialog = $("token-dialog");
  if (!dialog.open) {
    $("token").value = localStorage.getItem(TOKEN_KEY) ?? "";
    dialog.showModal();
  }
  $("token").select();
}

async function saveToken(event) {
  event.preventDefault();
  localStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token-dialog").close();
  clearProblem();
  render();
  // The list with the token; the session to show, when nothing was begun meanwhile.
  const untouched = !sessionId && !state.items.length && !$("message").value.trim();
  await (untouched ? openFirst() : loadSessions());
}

// -- the run, in sessionStorage --------------------------------------------------------------

function savedRun() {
  try { return JSON.parse(sessionStorage.getItem(RUN_KEY) ?? "null"); } catch { return null; }
}
function saveRun(run) { sessionStorage.setItem(RUN_KEY, JSON.stringify(run)); }
function forgetRun() { sessionStorage.removeItem(RUN_KEY); }

// -- rendering -------------------------------------------------------------------------------

function messageView(item, draft = false) {
  // Labelled with its agent (the author); a draft is one author's, on one branch.
  return el("article", { class: draft ? "message draft" : "message", "data-author": item.author,
                         "data-branch": item.branch ?? null,
                         "data-draft": draft ? "true" : null, "data-id": item.id ?? null,
                         "data-run": item.run ?? null,
                         "aria-busy": draft ? "true" : null },
            // The user's turn on a branch is a caller's request to an agent used as a tool.
            el("span", { class: "who" }, item.author === "user" && item.branch ? "request"
              : item.author),
            el("div", { class: "text" }, item.text),
            item.interrupted ? el("span", { class: "note" }, "(stopped here)") : null);
}

function progressView(card) {
  const label = `${card.name} progress`;
  if (!card.progress || card.progress.max === null) {  // no measure: indeterminate until done
    return card.status === "running" ? el("progress", { "aria-label": label })
      : el("progress", { value: 1, max: 1, "aria-label": label });
  }
  return el("progress", { value: card.progress.value, max: card.progress.max, "aria-label": label });
}

const TOOL_WORDS = { running: "running", ok: "answered", error: "failed", denied: "denied",
                     awaiting_approval: "waiting for approval",
                     waiting: "waiting: an agent it called asks for approval",
                     started: "started: waiting for its first value",
                     superseded: "not run: superseded by a later message", streaming: "streaming…",
                     cancelled: "stopped with the run",
                     finished: "finished streaming", stopped: "stopped streaming",
                     failed: "stream failed" };

function toolWords(card) {
  const words = TOOL_WORDS[card.status] ?? card.status;
  if (!card.emissions) return words;
  const values = emittedValues(card);
  return `${words} (${values} ${values === 1 ? "value" : "values"})`;
}

function emissionView(emission) {
  // A value as itself (the card names the tool); the stream's end in its own words.
  return el("li", {}, readEmission(emission.text).value ?? emission.text);
}

function toolView(card) {
  const box = el("section", { class: "tool", "data-call-id": card.call_id,
                              "data-author": card.author ?? null,
                              "data-status": card.status, "aria-label": `Tool ${card.name}` },
                 card.author ? el("span", { class: "who" }, card.author) : null,
                 el("strong", {}, card.name), " ",
                 el("span", { class: "state" }, toolWords(card)));
  // A bar for a call that reports progress, or is still running; none for a live tool's
  // answer ("watching"), whose emissions follow.
  if (card.progress || (card.status === "running" && !card.emissions)) {
    // The bar, and beside it the line the tool last said of its progress (an MCP server's
    // message), if it says one.
    box.append(card.message
      ? el("div", { class: "meter" }, progressView(card),
           el("span", { class: "progress-line", "aria-label": `${card.name} progress message` },
              card.message))
      : progressView(card));
  }
  if (card.lines.length) box.append(el("div", { class: "lines" }, card.lines.at(-1)));
  if (card.emissions?.length) {
    box.append(el("ol", { class: "emissions", "aria-label": `${card.name} emissions` },
                  ...card.emissions.map(emissionView)));
  }
  if (card.approval?.display) {  // what is (or was) approved: the summary, or the call's arguments
    box.append(el("div", { class: "approval", role: "group",
                           "aria-label": `${card.name} approval` }, card.approval.display));
  }
  if (card.status === "awaiting_approval" && card.approval && !card.approval.decided) {
    box.append(el("div", { class: "actions" },
                  el("button", { type: "button", onclick: () => answer(card, true) }, "Approve"),
                  el("button", { type: "button", onclick: () => answer(card, false) }, "Deny")));
  }
  return box;
}

const NOTICE_WORDS = {
  no_answer: "No answer was stored for this message: the run ended before it finished "
    + "(the server may have stopped). Send it again to ask anew.",
};

function transferView(item) {
  return el("p", { class: "transfer", role: "note", "data-author": item.author,
                   "data-to": item.to }, `${item.author} handed the conversation to ${item.to}`);
}

function itemView(item) {
  switch (item.kind) {
    case "message": return messageView(item);
    case "tool": return toolView(item);
    case "transfer": return transferView(item);
    case "error":
      if (item.code === "cancelled") {  // a stop (the user's own, most often): no failure
        return el("p", { class: "stopped", role: "note", "data-code": item.code },
                  errorWords(item.code));
      }
      return el("p", { class: "error", role: "alert", "data-code": item.code },
                `${errorWords(item.code)} (${item.code})`);
    case "notice":
      return el("p", { class: "notice", role: "note", "data-code": item.code },
                NOTICE_WORDS[item.code] ?? item.code);
    case "usage":
      return el("p", { class: "usage" },
                `Tokens this run: ${item.usage.input_tokens} in, ${item.usage.output_tokens} out`);
    default: return null;
  }
}

function shownTransfers() {
  // The transfer_to_agent calls that a transfer line tells: their cards are not drawn.
  return new Set(state.items.filter((i) => i.kind === "transfer").map((i) => i.call_id));
}

function logViews() {
  // The record and the drafts, in order; what runs inside a call (an agent used as a
  // tool: its branch names the call) goes inside that call's card, nested as deep as it runs.
  const top = [];
  const cards = new Map();  // call id -> its card's node
  const transfers = shownTransfers();
  const place = (branch, node) => {
    const card = cards.get(outerCallId(branch));
    if (!card) { top.push(node); return; }
    let inner = card.querySelector(":scope > .inner");
    if (!inner) {
      inner = el("div", { class: "inner", "aria-label": `Inside ${card.dataset.name}` });
      card.append(inner);
    }
    inner.append(node);
  };
  for (const item of state.items) {
    if (item.kind === "tool" && item.name === "transfer_to_agent" && transfers.has(item.call_id)) {
      continue;
    }
    const node = itemView(item);
    if (!node) continue;
    if (item.kind === "tool") {
      node.dataset.name = item.name;
      cards.set(item.call_id, node);
    }
    place(item.branch, node);
  }
  for (const [key, text] of Object.entries(state.drafts)) {
    const { author, branch } = draftOf(key);
    place(branch, messageView({ author, branch, text }, true));
  }
  return top;
}

function render() {
  const log = $("log");
  const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 20;
  log.replaceChildren(...logViews());
  if (!sessionId && !state.items.length) log.append(draftHint());
  if (stick) log.scrollTop = log.scrollHeight;
  $("stop").disabled = active === null && !live?.ready;
  // One message at a time: Send waits for the run (a live run takes messages as they come).
  const waiting = starting || active !== null || (live !== null && !live.ready);
  $("send").disabled = waiting;
  for (const button of $("suggestions").children) button.disabled = waiting;
  const liveButton = $("live");
  liveButton.textContent = live ? "End live" : "Go live";
  liveButton.setAttribute("aria-pressed", String(Boolean(live)));
  liveButton.disabled = active !== null || starting;
  const status = $("status");
  status.classList.toggle("error", problem !== null);
  status.dataset.code = problem?.code ?? "";
  status.textContent = problem ? problem.text
    : active ? (state.status.startsWith("Calling") ? state.status + "…" : "Answering…")
    : live ? (live.ready ? "Live: messages go to the live run." : "Connecting…") : "";
  renderLivePanel();
}

function draftHint() {
  return el("p", { class: "draft-hint" },
            `A new session with ${currentAgent()?.name ?? "the agent"}: it is saved when you `
            + "send its first message.");
}

function liveSpeaker() {
  // The agent the live run is with: the session's, or the last one that spoke in it (a
  // live run follows a transfer to another agent of the tree).
  const spoke = state.items.findLast((i) => (i.kind === "message" || i.kind === "transfer")
    && i.author !== "user" && !i.branch);
  return spoke?.kind === "transfer" ? spoke.to : spoke?.author ?? known.get(live?.sessionId)?.agent;
}

function renderLivePanel() {
  // Frames only for an agent with a tool that reads them (an input-stream tool), by name.
  const names = new Set([known.get(live?.sessionId)?.agent, live ? liveSpeaker() : null]);
  const takesFrames = AGENTS.some((a) => names.has(a.name) && a.input_stream);
  $("live-panel").hidden = !(live?.ready && takesFrames);
  $("play-frames").hidden = !(CONFIG.sample_frames > 0);
  $("stop-frames").disabled = feed === null;
  $("frames-status").textContent = feed
    ? `${feed.kind === "camera" ? "Camera" : "Sample frames"}: ${feed.sent} sent` : "";
  const emitted = state.items.filter((i) => i.kind === "tool" && i.emissions?.length).at(-1);
  $("live-latest").textContent = emitted ? emissionText(emitted.emissions.at(-1).text) : "";
}

function dispatch(frame) {
  state = reduce(state, frame);
  render();
}

// -- runs ------------------------------------------------------------------------------------

async function readFrames(response, run) {
  const decoder = new SSEDecoder();
  const text = new TextDecoder();
  const reader = response.body.getReader();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;  // cut off before its terminal frame: follow it again
      for (const frame of decoder.feed(text.decode(value, { stream: true }))) {
        if (run.sessionId !== sessionId) return true;
        inspector.frame(run.runId, frame);
        dispatch({ ...frame, run: run.runId });
        noteHandoff(run, frame);
        if (frame.id) {
          // record_id: the last frame the history holds (a delta or progress is not stored);
          // a reload shows the history, then replays after it, so its draft is whole.
          const saved = savedRun();
          const record = DRAFT_TYPES.has(frame.type) ? (saved?.record_id ?? 0) : Number(frame.id);
          saveRun({ session_id: run.sessionId, run_id: run.runId, last_id: Number(frame.id),
                    record_id: record });
        }
        if (TERMINAL.has(frame.type)) {  // exactly one per run: nothing else will come
          reader.cancel().catch(() => {});
          return true;
        }
      }
    }
  } catch {
    return run.controller.signal.aborted;
  }
}

async function follow(run) {
  // Resume after the last frame seen; a dropped connection is followed again a few times.
  for (let attempt = 0; attempt < 3; attempt++) {
    const last = savedRun()?.last_id ?? 0;
    inspector.resumed(run.runId, last);
    let response;
    try {
      response = await fetch(`/runs/${run.runId}/stream`, {
        headers: authHeaders({ "Last-Event-ID": String(last) }), signal: run.controller.signal });
    } catch {
      if (run.controller.signal.aborted) return;
      continue;
    }
    if (response.status === 204 || response.status === 404) { forgetRun(); return; }
    if (!response.ok) throw await apiError(response);
    if (await readFrames(response, run)) return;
    await new Promise((resolve) => setTimeout(resolve, 300 * (attempt + 1)));
  }
  throw new ApiError("network");
}

function liveAgent(name) {
  return AGENTS.find((a) => a.name === name && a.live);
}

function noteHandoff(run, frame) {
  // A transfer to an agent this page serves as a live one (its tools are live streams):
  // once the run ends, the page asks it again, live (send).
  if (frame.type !== "agent_transfer") return;
  const d = typeof frame.data === "string" ? JSON.parse(frame.data) : (frame.data ?? {});
  const to = d.to;
  if (to && liveAgent(to) && to !== known.get(run.sessionId)?.agent) {
    handoff = { sessionId: run.sessionId, agent: to };
  }
}

const REFUSED = "refused";  // a start's answer: the server did not take the run

async function drive(run, start) {
  active = run;
  render();
  try {
    const ended = await start();
    if (ended === REFUSED) return;
    if (!ended && !run.controller.signal.aborted) await follow(run);
    if (run.sessionId === sessionId && !run.controller.signal.aborted) {
      forgetRun();
      if (state.status === "error") await settle(run.sessionId);
    }
  } catch (error) {
    if (!run.controller.signal.aborted) {
      dispatch({ type: "error", data: { code: error.code ?? "network", retryable: true } });
      if (error.code === "unauthorized") askToken(`${error.message || errorWords(error.code)} `
                                                   + "(unauthorized)");
    }
  } finally {
    if (active === run) active = null;
    render();
  }
}

async function settle(id) {
  // A run that ended in an error (a stop, say) kept what was shown, marked interrupted:
  // the record is the server's, so the page shows the history, and the error it just saw.
  const seen = state.status === "error" ? state.error : null;
  try {
    state = await stored(id);
  } catch {
    return;
  }
  const last = state.items.filter((i) => i.kind !== "usage").at(-1);
  if (seen && !(last?.kind === "error" && last.code === seen.code)) {
    // The error says why the turn has no answer: it replaces the notice.
    state = reduce({ ...state, items: state.items.filter((i) => i.kind !== "notice") },
                   { type: "error", data: seen });
  }
  render();
}

function startRun(body, { refused = null, started = null } = {}) {
  // The run, read to its end. With `refused`, a run the server does not take (its error
  // answer, or none: "network") is handed to it, not shown as the run's error: nothing of
  // the run happened. `started` is told once the server has taken it.
  const run = { runId: null, controller: new AbortController(), sessionId };
  return drive(run, async () => {
    let response;
    try {
      response = await fetch(`/sessions/${run.sessionId}/runs`, {
        method: "POST", signal: run.controller.signal,
        headers: authHeaders({ "Content-Type": "application/json" }),
        body: JSON.stringify({ ...body, resumable: true }),
      });
    } catch (error) {
      if (!refused || run.controller.signal.aborted) throw error;
      refused(new ApiError("network"));
      return REFUSED;
    }
    if (!response.ok) {
      const error = await apiError(response);
      if (!refused) throw error;
      refused(error);
      return REFUSED;
    }
    if (body.message !== undefined) dispatch({ type: "superseded" });  // the run took it
    run.runId = response.headers.get("X-Run-Id");
    saveRun({ session_id: run.sessionId, run_id: run.runId, last_id: 0, record_id: 0 });
    started?.();
    return readFrames(response, run);
  });
}

function resumeRun(saved) {
  const run = { runId: saved.run_id, controller: new AbortController(), sessionId };
  return drive(run, async () => { await follow(run); return true; });
}

function detach() {
  // Leave the run going (it is resumable); the page just stops reading it.
  if (active) active.controller.abort();
  active = null;
}

// -- actions ---------------------------------------------------------------------------------

async function send(text) {
  // False when the message did not go (the composer then keeps it): its session could not
  // be stored, or the server refused its run (nothing was stored; a session created for
  // it is deleted again, so no empty one is left).
  clearProblem();
  if (live) {
    if (!live.ready) return false;
    noteFirst(live.sessionId, text);
    dispatch({ type: "user", data: { text } });
    live.sent = text;  // taken back if the server refuses it (an error notice)
    live.socket.send(JSON.stringify({ type: "content", text }));
    return true;
  }
  starting = true;
  render();
  const draft = sessionId === null;
  let id;
  try {
    id = await ensureSession();
  } finally {
    starting = false;
  }
  if (!id || id !== sessionId) { render(); return false; }
  const before = state;
  noteFirst(id, text);
  dispatch({ type: "user", data: { text } });
  handoff = null;
  let refused = null;
  let listing = null;
  await startRun({ message: text }, {
    refused: (error) => {  // taken back before anything else is drawn
      refused = error;
      state = before;
      sentFirst.delete(id);
      renderSessions();
      showProblem(error);
    },
    started: () => { listing = loadSessions({ quiet: true }); },  // the new session, titled
  });
  if (refused) {
    if (draft && refused.code !== "network") await unstore(id);
    return false;
  }
  await listing;
  await loadSessions({ quiet: true });  // the run shows its own error, once
  const handed = handoff;
  handoff = null;
  if (handed && handed.sessionId === id && sessionId === id && state.status !== "error") {
    // The conversation went to a live agent: a live session with it takes the message.
    await suggest({ text, agent: handed.agent, live: true });
  }
  return true;
}

async function unstore(id) {
  // The session stored for a first message the server then refused: deleted again, and the
  // page is back on its draft. Should the delete fail too, the problem shown stays the
  // refusal's (the session is then listed, empty).
  try {
    await api("DELETE", `/sessions/${id}`);
  } catch {
    return;
  }
  known.delete(id);
  if (sessionId === id) {
    sessionId = null;
    sessionStorage.removeItem(SESSION_KEY);
  }
  renderSessions();
  render();
}

function takeBack(text) {
  // A message the server dropped: out of the conversation, back into the box.
  const at = state.items.findLastIndex((i) => i.kind === "message" && i.author === "user"
    && i.id === null && i.text === text);
  if (at !== -1) state = { ...state, items: state.items.filter((_, n) => n !== at) };
  keepText(text);
}

function keepText(text) {
  // Into the message box, ahead of anything typed since: to send again.
  const typed = $("message").value;
  $("message").value = typed ? `${text}\n${typed}` : text;
}

function noteFirst(id, text) {
  // The list's title for a session whose first message the server may not have stored yet.
  if (!known.get(id)?.title && !sentFirst.has(id)) {
    sentFirst.set(id, text);
    renderSessions();
  }
}

async function answer(card, approved) {
  if (active) return;
  const id = sessionId;
  const args_sha256 = card.approval?.args_sha256 ?? null;
  if (live?.ready && live.sessionId === id) {
    // A live run takes the answer as content on its socket (a new run would find the
    // session busy): docs/frame-protocol.md, "Live WebSocket".
    dispatch({ type: "decision", data: { call_id: card.call_id, name: card.name, approved } });
    live.socket.send(JSON.stringify({ type: "content", content: { role: "user", parts: [
      { function_response: { id: card.call_id, name: APPROVAL_NAME,
                             response: { approved, args_sha256 } } }] } }));
    render();
    return;
  }
  dispatch({ type: "decision", data: { call_id: card.call_id, name: card.name, approved } });
  await startRun({ approvals: [{ call_id: card.call_id, approved, args_sha256 }] });
  // Refused (answered elsewhere, or superseded by a message from another page): the card
  // shows the server's record of the call again, with the error.
  if (state.status === "error" && sessionId === id) await settle(id);
}

async function stop() {
  if (live?.ready) {
    stopFeed();  // no frame may follow the close
    live.socket.send(JSON.stringify({ type: "close" }));
    return;
  }
  if (!active?.runId) return;
  try {
    await api("POST", `/runs/${active.runId}/cancel`);
  } catch (error) {
    showProblem(error);
  }
}

// -- live --------------------------------------------------------------------------------------

const APPROVAL_NAME = "headwater:approval";  // a function response that answers an approval

const CLOSE_WORDS = { 1008: "unauthorized", 4404: "not_found", 4409: "session_busy",
                      1013: "too_many_streams", 1011: "internal" };

async function goLive() {
  // A draft is stored first: the live socket is a session's.
  if (live || active || starting) return;
  clearProblem();
  starting = true;
  render();
  let id;
  try {
    id = await ensureSession();
  } finally {
    starting = false;
  }
  if (!id || id !== sessionId || live || active) { render(); return; }
  await loadSessions({ quiet: true });
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/live/${sessionId}`;
  const token = localStorage.getItem(TOKEN_KEY);
  const socket = AUTH !== "none" && token ? new WebSocket(url, ["bearer", token])
    : new WebSocket(url);
  const mine = { socket, sessionId, ready: false, ended: false };
  live = mine;
  socket.onmessage = (event) => onLiveMessage(mine, JSON.parse(event.data));
  socket.onclose = (event) => onLiveClose(mine, event);
  render();
}

function onLiveMessage(mine, message) {
  if (live !== mine) return;
  if (message.id === null) {  // a notice about the socket, not a run frame
    if (message.type === "ready") {  // a live run is a new turn: it superseded what waited
      mine.ready = true;
      mine.runId = message.data?.run_id ?? null;
      state = reduce(state, { type: "superseded" });
    }
    else if (message.type === "error") {
      // A refused message was dropped: a text too long is the box's again. (Other notices
      // may be about frames, which the page does not take back.)
      if (message.data?.code === "payload_too_large" && mine.sent) takeBack(mine.sent);
      showProblem(new ApiError(message.data?.code ?? "internal", message.data?.message ?? ""));
    }
    render();
    return;
  }
  inspector.frame(mine.runId, message);
  dispatch({ type: message.type, data: message.data, run: mine.runId });
  if (TERMINAL.has(message.type)) mine.ended = true;
}

async function onLiveClose(mine, event) {
  if (live !== mine) return;
  live = null;
  stopFeed();
  if (!mine.ended && event.code !== 1000) {
    const code = CLOSE_WORDS[event.code] ?? "network";
    dispatch({ type: "error", data: { code, retryable: true } });
    if (code === "unauthorized") askToken(`${errorWords(code)} (${code})`);
  }
  render();
  loadSessions({ quiet: true });  // its title, from the messages it stored
  if (mine.sessionId === sessionId) await settle(mine.sessionId);
}

function endLive() {
  if (!live) return;
  stopFeed();
  if (live.ready) live.socket.send(JSON.stringify({ type: "close" }));
  else live.socket.close();
}

// -- frames for the live run (the live panel) ---------------------------------------------------

function sendFrame(mime, bytes) {
  if (!live?.ready || !feed) return false;
  live.socket.send(JSON.stringify({ type: "realtime", mime_type: mime,
                                    data: base64FromBytes(bytes) }));
  feed.sent += 1;
  return true;
}

function preview(width, height, luma) {
  const canvas = $("frame-preview");
  canvas.width = width;
  canvas.height = height;
  canvas.getContext("2d").putImageData(new ImageData(rgbaFromLuma(luma), width, height), 0, 0);
}

function stopFeed() {
  if (!feed) return;
  clearInterval(feed.timer);
  for (const track of feed.stream?.getTracks() ?? []) track.stop();
  feed = null;
  renderLivePanel();
}

async function playFrames() {
  // The app's sample sequence, looped at its frame rate until stopped.
  if (!live?.ready) return;
  stopFeed();
  let sample;
  try {
    sample = await api("GET", "/page/frames");
  } catch (error) {
    showProblem(error);
    return;
  }
  const frames = sample.frames.map((f) => ({ mime: f.mime_type, bytes: bytesFromBase64(f.data) }));
  const mine = { kind: "sample", timer: null, sent: 0 };
  feed = mine;
  const tick = () => {
    if (feed !== mine) return;
    const frame = frames[mine.sent % frames.length];
    if (!sendFrame(frame.mime, frame.bytes)) { stopFeed(); return; }
    const image = parsePnm(frame.bytes);
    preview(image.width, image.height, image.luma);
    renderLivePanel();
  };
  mine.timer = setInterval(tick, 1000 / sample.fps);
  tick();
}

async function useCamera() {
  // The browser camera, four frames a second, as small grayscale PGM.
  if (!live?.ready) return;
  stopFeed();
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ video: true, audio: false });
  } catch (error) {
    $("frames-status").textContent = `No camera: ${error.message || error.name}`;
    return;
  }
  if (!live?.ready) { for (const track of stream.getTracks()) track.stop(); return; }
  const video = el("video", { playsinline: true });
  video.muted = true;
  video.srcObject = stream;
  await video.play();
  const [width, height] = CAMERA_SIZE;
  const canvas = el("canvas", { width, height });
  const context = canvas.getContext("2d", { willReadFrequently: true });
  const mine = { kind: "camera", timer: null, sent: 0, stream };
  feed = mine;
  mine.timer = setInterval(() => {
    if (feed !== mine) return;
    context.drawImage(video, 0, 0, width, height);
    const pgm = pgmFromRgba(context.getImageData(0, 0, width, height).data, width, height);
    if (!sendFrame("image/x-portable-graymap", pgm)) { stopFeed(); return; }
    preview(width, height, parsePnm(pgm).luma);
    renderLivePanel();
  }, 250);
  renderLivePanel();
}

async function history(id) {
  const events = [];
  let cursor = null;
  do {
    const query = cursor ? `?limit=200&cursor=${cursor}` : "?limit=200";
    const page = await api("GET", `/sessions/${id}/events${query}`);
    events.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return events;
}

async function stored(id) {
  // The session first: with no run going on it, the history is all there will be.
  const session = await api("GET", `/sessions/${id}`);
  return fromHistory(await history(id), { ended: !session.active_run });
}

async function openSession(id, { agent = null } = {}) {
  // `agent`: a draft's, chosen by the page (else the picker's).
  detach();
  stopFeed();
  if (live) { const leaving = live; live = null; leaving.socket.close(); }
  sessionId = id;
  draftAgent = id ? null : agent;
  if (id) sessionStorage.setItem(SESSION_KEY, id); else sessionStorage.removeItem(SESSION_KEY);
  state = initialState;  // no stale draft: the record comes from the server
  render();
  markCurrent();
  if (!id) return;
  try {
    state = await stored(id);
  } catch (error) {
    showProblem(error);
    return;
  }
  render();
  const saved = savedRun();
  if (saved && saved.session_id === id && saved.run_id) {
    // The drafts went with the old page: follow on from the last stored frame, so the
    // draft being written is rebuilt whole (a replayed record replaces itself, by id).
    const resumed = { ...saved, last_id: saved.record_id ?? saved.last_id };
    saveRun(resumed);
    resumeRun(resumed);
  }
}

function currentAgent() {
  // The open session's agent; for a draft, the page's choice (a suggestion's, a hand-off's)
  // or the picker's (the first agent when there is no choice).
  const name = sessionId ? known.get(sessionId)?.agent
    : draftAgent ?? (AGENTS.length > 1 ? $("agent").value : AGENTS[0]?.name);
  return AGENTS.find((a) => a.name === name);
}

async function newSession() {
  // A draft with the picker's agent: nothing is stored until its first message is sent.
  clearProblem();
  await openSession(null);
  $("message").focus();
}

async function chooseSession(session) {
  // A session the user opens from the list: the picker follows it (New session then starts
  // with its agent). Sessions the page opens itself (a live hand-off) leave the picker.
  clearProblem();
  if (AGENTS.length > 1 && AGENTS.some((a) => a.name === session.agent)) {
    $("agent").value = session.agent;
  }
  await openSession(session.id);
}

function ensureSession() {
  // The open session's id; a draft is stored now (POST /sessions), once, whoever asks.
  if (sessionId) return Promise.resolve(sessionId);
  if (!creating) {
    const agent = currentAgent()?.name;
    creating = (async () => {
      try {
        const session = await api("POST", "/sessions", AGENTS.length > 1 ? { agent } : {});
        known.set(session.id, session);
        if (sessionId === null) {
          sessionId = session.id;
          sessionStorage.setItem(SESSION_KEY, session.id);
        }
        return session.id;
      } catch (error) {
        showProblem(error);
        return null;
      } finally {
        creating = null;
      }
    })();
  }
  return creating;
}

async function deleteSession(id) {
  const label = sessionTitle(known.get(id) ?? { id });
  if (!confirm(`Delete the session "${label}"? Its messages are deleted too.`)) return;
  clearProblem();
  try {
    await api("DELETE", `/sessions/${id}`);
  } catch (error) {
    showProblem(error);
    return;
  }
  if (savedRun()?.session_id === id) forgetRun();
  const sessions = await loadSessions();
  if (id === sessionId) await openSession(sessions[0]?.id ?? null);
}

function sessionTitle(session) {
  // The server's title (the first message, cut), else the one this page just sent.
  return session.title ?? sentFirst.get(session.id) ?? "New session";
}

function sessionMeta(session) {
  const when = new Date((session.updated_at ?? session.created_at) * 1000);
  const today = when.toDateString() === new Date().toDateString();
  const time = today ? when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : when.toLocaleDateString();
  return `${session.agent} · ${time}`;
}

async function loadSessions({ quiet = false } = {}) {
  // A list that cannot be read keeps the one shown (a lost server empties nothing).
  let sessions;
  try {
    sessions = (await api("GET", "/sessions")).items;
  } catch (error) {
    if (!quiet) showProblem(error);
    return [...known.values()];
  }
  known = new Map(sessions.map((session) => [session.id, session]));
  for (const session of sessions) if (session.title) sentFirst.delete(session.id);
  renderSessions();
  return sessions;
}

function renderSessions() {
  $("sessions").replaceChildren(...[...known.values()].map((session) => {
    const title = sessionTitle(session);
    const meta = sessionMeta(session);
    return el("li", { "data-session-id": session.id },
              el("button", { type: "button", class: "open", title: `${title}\n${meta}`,
                             onclick: () => chooseSession(session) },
                 el("span", { class: "title" }, title), el("span", { class: "meta" }, meta)),
              el("button", { type: "button", class: "delete",
                             "aria-label": `Delete session ${title}`,
                             onclick: () => deleteSession(session.id) }, "✕"));
  }));
  markCurrent();
}

function markCurrent() {
  for (const li of $("sessions").children) {
    li.setAttribute("aria-current", String(li.dataset.sessionId === sessionId));
  }
  const agent = currentAgent();
  const parts = agent ? [`agent ${agent.name}`, `model ${agent.model}`] : [];
  if (CONFIG.note) parts.push(CONFIG.note);
  $("agent-info").textContent = parts.join(" · ");
}

function setUpChoices() {
  if (AGENTS.length > 1) {
    $("agent").replaceChildren(...AGENTS.map((a) => el("option", { value: a.name }, a.name)));
    $("agent").hidden = false;
    $("agent-label").hidden = false;
  }
  $("suggestions").replaceChildren(...(CONFIG.suggestions ?? []).map((suggestion) =>
    el("button", { type: "button", class: "suggestion", onclick: () => suggest(suggestion) },
       suggestion.text)));
}

async function suggest({ text, agent, live: overLive }) {
  // Ask the suggestion's agent (a new session when this one is another agent's), live if
  // told; the new session is stored with the message (or when it goes live).
  if (active || starting || (live && !live.ready)) return;
  const wrongAgent = agent && currentAgent()?.name !== agent;
  if (wrongAgent || (live && !overLive)) {
    if (live) endLive();
    await openSession(null, { agent: agent ?? null });  // the picker stays the user's
  }
  if (overLive && !live) {
    await goLive();
    const opening = live;
    await new Promise((resolve) => {
      const check = () => (!opening || opening.ready || live !== opening ? resolve()
        : setTimeout(check, 50));
      check();
    });
    if (!live?.ready) return;
  }
  await send(text);
}

// -- wiring ----------------------------------------------------------------------------------

async function openFirst() {
  // The session this tab had open, else the newest; a draft when there is none, or when the
  // list cannot be read. Not when the user began something while the list loaded.
  const sessions = await loadSessions();
  if (sessionId || starting || active || live) return;
  const remembered = sessionStorage.getItem(SESSION_KEY);
  const chosen = sessions.find((s) => s.id === remembered) ?? sessions[0];
  await openSession(chosen?.id ?? null);
}

async function start() {
  if (AUTH !== "none") {
    $("token-open").hidden = false;
    $("token-open").onclick = () => askToken("The token this page sends to the server.");
    $("token-form").onsubmit = (event) => saveToken(event);
    $("token-cancel").onclick = () => $("token-dialog").close();
  }
  setUpChoices();
  inspector.install({ api, session: () => sessionId });
  $("new-session").onclick = () => newSession();
  $("agent").onchange = () => {
    if (!sessionId) { draftAgent = null; markCurrent(); render(); }  // the draft's agent
  };
  $("stop").onclick = () => stop();
  $("live").onclick = () => (live ? endLive() : goLive());
  $("play-frames").onclick = () => playFrames();
  $("camera").onclick = () => useCamera();
  $("stop-frames").onclick = () => stopFeed();
  $("composer").onsubmit = (event) => {
    event.preventDefault();
    const text = $("message").value.trim();
    if (!text || active || starting || (live && !live.ready)) return;
    $("message").value = "";
    send(text).then((sent) => { if (!sent) keepText(text); });  // not lost
  };
  $("message").onkeydown = (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  };
  await openFirst();
}

start();

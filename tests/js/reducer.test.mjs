// The page's reducer (seed 004) and SSE decoder: `node --test tests/js/reducer.test.mjs`.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  callsAbove, draftKey, draftOf, dropDrafts, emissionText, emittedValues, errorWords, fromHistory,
  initialState, measureOf, outerCallId, progressOf, readEmission, reduce,
} from "../../src/headwater/gateway/static/reducer.js";
import { SSEDecoder } from "../../src/headwater/gateway/static/sse.js";

const frame = (type, data) => ({ type, data: JSON.stringify(data) });
const play = (frames, state = initialState) => frames.reduce(reduce, state);
const messages = (state) => state.items.filter((i) => i.kind === "message");

const WORKED_EXAMPLE = [
  frame("tool_call", { names: ["lookupOrder"], calls: [{ id: "c1", name: "lookupOrder" }] }),
  frame("tool_result", { count: 1, results: [{ id: "c1", name: "lookupOrder", status: "ok",
                                               size: 10 }] }),
  frame("delta", { author: "support", text: "Order 1042 shipped " }),
  frame("delta", { author: "support", text: "on 30 September and " }),
  frame("delta", { author: "support", text: "is due Monday." }),
  frame("message", { author: "support", id: "e1", final: true,
                     text: "Order 1042 shipped on 30 September and is due Monday." }),
  frame("done", { usage: { input_tokens: 12, output_tokens: 9 } }),
];

test("deltas build a draft; the message replaces it: the answer is shown once", () => {
  const streaming = play(WORKED_EXAMPLE.slice(0, 5));
  assert.deepEqual(streaming.drafts,
                   { support: "Order 1042 shipped on 30 September and is due Monday." });
  assert.equal(messages(streaming).length, 0);
  const ended = play(WORKED_EXAMPLE);
  assert.deepEqual(ended.drafts, {});
  assert.deepEqual(messages(ended).map((m) => m.text),
                   ["Order 1042 shipped on 30 September and is due Monday."]);
  assert.equal(ended.status, "done");
  assert.deepEqual(ended.items.at(-1), { kind: "usage",
                                         usage: { input_tokens: 12, output_tokens: 9 } });
});

test("a message frame seen twice (replayed after a resume) is shown once", () => {
  const message = WORKED_EXAMPLE[5];
  const state = play([message, message]);
  assert.equal(messages(state).length, 1);
});

test("drafts are keyed by author: a sub-agent's partials do not join another's", () => {
  const state = play([
    frame("delta", { author: "coordinator", text: "Let me ask " }),
    frame("delta", { author: "billing", text: "Your invoice " }),
    frame("delta", { author: "coordinator", text: "billing." }),
    frame("message", { author: "coordinator", id: "m1", text: "Let me ask billing.",
                       final: false }),
  ]);
  assert.deepEqual(state.drafts, { billing: "Your invoice " });
  assert.deepEqual(messages(state).map((m) => [m.author, m.text]),
                   [["coordinator", "Let me ask billing."]]);
});

// A coordinator that transfers to billing, as the gateway sends it (tests/gateway/
// test_provenance.py): the call shown raw, its result, the transfer, billing's answer.
const TRANSFER = [
  frame("tool_call", { author: "coordinator", names: ["transfer_to_agent"],
                       calls: [{ id: "t1", name: "transfer_to_agent",
                                 args: { agent_name: "billing" } }] }),
  frame("tool_result", { author: "coordinator", count: 1,
                         results: [{ id: "t1", name: "transfer_to_agent", status: "ok", size: 15,
                                     response: { result: null } }] }),
  frame("agent_transfer", { author: "coordinator", to: "billing", call_id: "t1" }),
  frame("delta", { author: "billing", text: "Your invoice " }),
  frame("delta", { author: "billing", text: "is " }),
  frame("delta", { author: "billing", text: "paid." }),
  frame("message", { author: "billing", id: "e4", text: "Your invoice is paid.", final: true }),
  frame("done", { usage: { input_tokens: 0, output_tokens: 0 } }),
];

// Two agents of a parallel agent, their deltas interleaved, each final after its own.
const PARALLEL = [
  frame("delta", { author: "web", branch: "research.web", text: "Web " }),
  frame("delta", { author: "papers", branch: "research.papers", text: "Papers " }),
  frame("delta", { author: "papers", branch: "research.papers", text: "say " }),
  frame("delta", { author: "web", branch: "research.web", text: "says " }),
  frame("delta", { author: "web", branch: "research.web", text: "yes." }),
  frame("message", { author: "web", branch: "research.web", id: "w1", text: "Web says yes.",
                     final: true }),
  frame("delta", { author: "papers", branch: "research.papers", text: "no." }),
  frame("message", { author: "papers", branch: "research.papers", id: "p1",
                     text: "Papers say no.", final: true }),
  frame("done", { usage: { input_tokens: 0, output_tokens: 0 } }),
];

test("a transfer: billing's draft becomes billing's one message; the call gets its card", () => {
  const streaming = play(TRANSFER.slice(0, 6));
  assert.deepEqual(streaming.drafts, { billing: "Your invoice is paid." });
  const ended = play(TRANSFER);
  assert.deepEqual(messages(ended).map((m) => [m.author, m.text]),
                   [["billing", "Your invoice is paid."]]);
  const [card] = ended.items.filter((i) => i.kind === "tool");
  assert.equal(card.name, "transfer_to_agent");
  assert.equal(card.call_id, "t1");
  assert.deepEqual(ended.drafts, {});
});

test("several authors at once: each draft, keyed by author and branch, rebuilds its final", () => {
  let state = initialState;
  const finals = [];
  for (const f of PARALLEL) {
    const d = JSON.parse(f.data);
    const key = draftKey(d.author, d.branch);
    if (f.type === "message") finals.push([d.author, state.drafts[key], d.text]);
    state = reduce(state, f);
    if (f.type === "message") assert.equal(state.drafts[key], undefined);
  }
  assert.deepEqual(finals, [["web", "Web says yes.", "Web says yes."],
                            ["papers", "Papers say no.", "Papers say no."]]);
  assert.deepEqual(messages(state).map((m) => [m.author, m.text]),
                   [["web", "Web says yes."], ["papers", "Papers say no."]]);
  // Replayed after a resume, each message is still shown once.
  assert.equal(messages(play(PARALLEL, state)).length, 2);
});

// Two searchers of a parallel agent, one author name on two branches, and a writer whose
// tool is an agent (its inner activity on "<calling agent>:<call id>", nested under the call).
const TREE = [
  frame("delta", { author: "searcher", branch: "research.web", text: "Web " }),
  frame("delta", { author: "searcher", branch: "research.papers", text: "Papers " }),
  frame("delta", { author: "searcher", branch: "research.web", text: "says yes." }),
  frame("delta", { author: "searcher", branch: "research.papers", text: "say no." }),
  frame("tool_call", { author: "writer", names: ["checker"],
                       calls: [{ id: "w1", name: "checker" }] }),
  frame("tool_call", { author: "checker", branch: "writer:w1", names: ["lookup"],
                       calls: [{ id: "k1", name: "lookup" }] }),
  frame("tool_progress", { author: "checker", branch: "writer:w1", call_id: "k1",
                           name: "lookup", type: "part_delta", index: 0, delta: "1/2" }),
  frame("delta", { author: "checker", branch: "writer:w1", text: "Checked." }),
];

test("drafts are keyed by author and branch: one author on two branches keeps two drafts", () => {
  const state = play(TREE);
  assert.deepEqual(state.drafts, { "searcher@research.web": "Web says yes.",
                                   "searcher@research.papers": "Papers say no.",
                                   "checker@writer:w1": "Checked." });
  assert.deepEqual(draftOf(draftKey("searcher", "research.web")),
                   { author: "searcher", branch: "research.web" });
  assert.deepEqual(draftOf("billing"), { author: "billing", branch: null });
  const ended = reduce(state, frame("message", { author: "searcher", branch: "research.web",
                                                 id: "s1", text: "Web says yes.", final: true }));
  assert.equal(ended.drafts["searcher@research.web"], undefined);
  assert.equal(ended.drafts["searcher@research.papers"], "Papers say no.");
  assert.deepEqual(messages(ended).map((m) => [m.author, m.branch, m.text]),
                   [["searcher", "research.web", "Web says yes."]]);
});

test("a tool call clears its own agent's draft only; cards know their agent and branch", () => {
  const state = play([
    frame("delta", { author: "web", branch: "p.web", text: "Looking" }),
    frame("delta", { author: "papers", branch: "p.papers", text: "Reading" }),
    frame("tool_call", { author: "web", branch: "p.web", names: ["search_web"],
                         calls: [{ id: "c1", name: "search_web" }] }),
  ]);
  assert.deepEqual(state.drafts, { "papers@p.papers": "Reading" });
  const [card] = state.items;
  assert.deepEqual([card.author, card.branch, card.name], ["web", "p.web", "search_web"]);
  // A frame without an author (a gateway before provenance) clears every draft, as before.
  assert.deepEqual(reduce(state, frame("tool_call", { names: ["x"],
                                                      calls: [{ id: "c2", name: "x" }] })).drafts,
                   {});
});

test("the call an item nests under: the last ':' of its branch, to the next '.'", () => {
  assert.equal(outerCallId(undefined), null);
  assert.equal(outerCallId("research.web"), null);
  assert.equal(outerCallId("market/c7"), null);  // a live stream's emissions: not a branch call
  assert.equal(outerCallId("writer:w1"), "w1");
  assert.equal(outerCallId("writer:w1.checker:k9"), "k9");
  assert.equal(outerCallId("p.a.writer:w1"), "w1");
  assert.equal(outerCallId("writer:w1.p.web"), "w1");
  const inner = play(TREE).items.filter((i) => outerCallId(i.branch) === "w1");
  assert.deepEqual(inner.map((i) => [i.kind, i.name, i.author]), [["tool", "lookup", "checker"]]);
});

test("a transfer is an item of its own, shown once; history says it with transfer_to", () => {
  const transfer = frame("agent_transfer", { author: "coordinator", to: "deploy",
                                             call_id: "t1" });
  const state = play([transfer, transfer]);
  assert.deepEqual(state.items, [{ kind: "transfer", author: "coordinator", to: "deploy",
                                   call_id: "t1" }]);
  const stored = fromHistory([
    { id: "1", author: "user", text: "Deploy version 2 to staging", invocation_id: "i" },
    { id: "2", author: "coordinator", invocation_id: "i",
      calls: [{ id: "t1", name: "transfer_to_agent" }] },
    { id: "3", author: "coordinator", invocation_id: "i", transfer_to: "deploy",
      results: [{ id: "t1", name: "transfer_to_agent", status: "ok", size: 14 }] },
    { id: "4", author: "deploy", invocation_id: "i", text: "Done.", final: true },
  ]);
  assert.deepEqual(stored.items.map((i) => [i.kind, i.author, i.to ?? i.name ?? i.text]), [
    ["message", "user", "Deploy version 2 to staging"],
    ["tool", "coordinator", "transfer_to_agent"],
    ["transfer", "coordinator", "deploy"],
    ["message", "deploy", "Done."]]);
});

for (const [type, data] of [
  ["tool_call", { names: ["lookupOrder"], calls: [{ id: "c9", name: "lookupOrder" }] }],
  ["error", { code: "cancelled", retryable: false, request_id: "r" }],
  ["done", { usage: { input_tokens: 1, output_tokens: 1 } }],
]) {
  test(`${type} clears every draft and keeps no half sentence`, () => {
    const state = play([frame("delta", { author: "a", text: "half a " }),
                        frame("delta", { author: "b", text: "sentence" }),
                        frame(type, data)]);
    assert.deepEqual(state.drafts, {});
    assert.equal(messages(state).length, 0);
  });
}

test("an error is kept as an item with its code and words", () => {
  const state = play([frame("error", { code: "cancelled", retryable: false })]);
  assert.deepEqual(state.items, [{ kind: "error", code: "cancelled", retryable: false }]);
  assert.equal(state.error.code, "cancelled");
  assert.match(errorWords("cancelled"), /stopped/);
  assert.match(errorWords("no_such_code"), /went wrong/);
});

test("tool progress fills the card's bar; the result completes it", () => {
  const call = frame("tool_call", { names: ["deploy"], calls: [{ id: "d1", name: "deploy" }] });
  const progress = (delta) => frame("tool_progress", { call_id: "d1", name: "deploy",
                                                       type: "part_delta", index: 0, delta });
  const half = play([call, progress("building 25%"), progress("pushing 50%")]);
  const [card] = half.items;
  assert.equal(card.kind, "tool");
  assert.deepEqual(card.progress, { value: 50, max: 100 });
  assert.deepEqual(card.lines, ["building 25%", "pushing 50%"]);
  const ended = play([frame("tool_result", { count: 1, results: [
    { id: "d1", name: "deploy", status: "ok", size: 2 }] })], half);
  assert.equal(ended.items[0].status, "ok");
  assert.deepEqual(ended.items[0].progress, { value: 100, max: 100 });
});

test("a measured progress (an MCP server's) sets the bar and the message beside it", () => {
  const call = frame("tool_call", { names: ["index_docs"], calls: [{ id: "i1", name: "index_docs" }] });
  const progress = (value, total, message) => frame("tool_progress", {
    call_id: "i1", name: "index_docs", type: "progress", index: null, delta: null,
    progress: value, total, message });
  const two = play([call, progress(1, 4, "indexed README.md"), progress(2, 4, "indexed tools.md")]);
  const [card] = two.items;
  assert.deepEqual(card.progress, { value: 2, max: 4 });
  assert.equal(card.message, "indexed tools.md");
  assert.deepEqual(card.lines, []);
  const open = play([progress(7, null, null)], two);
  assert.deepEqual(open.items[0].progress, { value: 7, max: null });  // no total: indeterminate
  assert.equal(open.items[0].message, "indexed tools.md");
  assert.deepEqual(measureOf({ progress: 9, total: 4 }), { value: 4, max: 4 });
  const ended = play([frame("tool_result", { count: 1, results: [
    { id: "i1", name: "index_docs", status: "ok", size: 2 }] })], two);
  assert.deepEqual(ended.items[0].progress, { value: 4, max: 4 });
  const stopped = play([frame("tool_result", { count: 1, results: [
    { id: "i1", name: "index_docs", status: "error", size: 60, code: "cancelled" }] })], two);
  assert.equal(stopped.items[0].status, "cancelled");  // stopped with the run, not failed
});

test("progress is read from percentages and ratios, else counted", () => {
  assert.deepEqual(progressOf(null, "step 2/5"), { value: 2, max: 5 });
  assert.deepEqual(progressOf(null, "120 %"), { value: 100, max: 100 });
  assert.deepEqual(progressOf({ value: 2, max: null }, "more"), { value: 3, max: null });
});

test("approval_required asks on the call's card; a decision answers it", () => {
  const asked = play([
    frame("tool_call", { names: ["deploy"], calls: [{ id: "d1", name: "deploy" }] }),
    frame("approval_required", { call_id: "d1", name: "deploy", args_sha256: "ab",
                                 display: 'deploy(version="2")', args: { version: "2" } }),
    frame("done", { usage: { input_tokens: 1, output_tokens: 1 } }),
  ]);
  const card = asked.items[0];
  assert.equal(card.status, "awaiting_approval");
  assert.deepEqual(card.approval, { args_sha256: "ab", display: 'deploy(version="2")',
                                    decided: null });
  const denied = reduce(asked, { type: "decision",
                                 data: { call_id: "d1", name: "deploy", approved: false } });
  assert.equal(denied.items[0].status, "denied");
  assert.equal(denied.items[0].approval.decided, "denied");
  assert.equal(denied.items[0].approval.display, 'deploy(version="2")');  // still shown
  const answered = reduce(denied, frame("tool_result", { count: 1, results: [
    { id: "d1", name: "deploy", status: "error", size: 20, code: "denied" }] }));
  assert.equal(answered.items[0].status, "denied");
});

test("a message the server took supersedes the approvals still waiting, and only those", () => {
  const asked = play([
    frame("tool_call", { names: ["deploy", "deploy"], calls: [{ id: "d1", name: "deploy" },
                                                              { id: "d2", name: "deploy" }] }),
    frame("approval_required", { call_id: "d1", name: "deploy", args_sha256: "a",
                                 display: "deploy 1 to staging" }),
    frame("approval_required", { call_id: "d2", name: "deploy", args_sha256: "b",
                                 display: "deploy 2 to staging" }),
    frame("done", {}),
  ]);
  const approved = reduce(asked, { type: "decision",
                                   data: { call_id: "d1", name: "deploy", approved: true } });
  const after = reduce(approved, { type: "superseded" });
  assert.deepEqual(after.items.map((i) => i.status), ["running", "superseded"]);
  assert.equal(after.items[1].approval.display, "deploy 2 to staging");
  // a live run's superseded result (its tool_result frame) says the same
  const live = reduce(asked, frame("tool_result", { count: 1, results: [
    { id: "d2", name: "deploy", status: "error", size: 90, code: "superseded" }] }));
  assert.deepEqual(live.items.map((i) => i.status), ["awaiting_approval", "superseded"]);
});

test("a history shows a superseded approval as superseded, with what it asked", () => {
  const state = fromHistory([
    { id: "u1", author: "user", role: "user", text: "Deploy version 2", final: false },
    { id: "e1", author: "ops", role: "model", text: "", final: false,
      calls: [{ id: "d1", name: "deploy" }] },
    { id: "e2", author: "ops", role: null, text: "", final: true,
      approvals_requested: [{ call_id: "d1", name: "deploy", args_sha256: "ab",
                              display: "deploy 2 to staging" }] },
    { id: "e3", author: "ops", role: "user", text: "", final: false,
      results: [{ id: "d1", name: "deploy", status: "error", size: 90, code: "superseded" }] },
    { id: "u2", author: "user", role: "user", text: "Never mind", final: false },
    { id: "e4", author: "ops", role: "model", text: "OK.", final: true },
  ], { ended: true });
  const card = state.items[1];
  assert.equal(card.status, "superseded");
  assert.deepEqual(card.approval, { args_sha256: "ab", display: "deploy 2 to staging",
                                    decided: null });
});

test("history has the record and no draft", () => {
  const state = fromHistory([
    { id: "u1", author: "user", role: "user", text: "Where is order 1042?", final: false },
    { id: "e1", author: "support", role: "model", text: "", final: false,
      calls: [{ id: "c1", name: "lookupOrder" }] },
    { id: "e2", author: "user", role: "user", text: "", final: false,
      results: [{ id: "c1", name: "lookupOrder", status: "ok", size: 3 }] },
    { id: "e3", author: "support", role: "model", text: "It shipped.", final: true },
    { id: "e4", author: "support", role: "model", text: "", final: true,
      error: { code: "cancelled", message: "The run was cancelled." } },
  ]);
  assert.deepEqual(state.drafts, {});
  assert.deepEqual(state.items.map((i) => i.kind), ["message", "tool", "message", "error"]);
  assert.equal(state.items[1].status, "ok");
  // a message frame replayed after the history loaded does not show twice
  const replayed = reduce(state, frame("message", { author: "support", id: "e3",
                                                    text: "It shipped.", final: true }));
  assert.equal(messages(replayed).length, 2);
  assert.deepEqual(dropDrafts(reduce(state, frame("delta", { author: "x", text: "y" }))).drafts,
                   {});
});

test("a history that waits for an approval asks again; a denial in it is kept", () => {
  const waiting = fromHistory([
    { id: "u1", author: "user", role: "user", text: "Deploy version 2", final: false },
    { id: "e1", author: "ops", role: "model", text: "", final: false,
      calls: [{ id: "d1", name: "deploy" }] },
    { id: "e2", author: "ops", role: null, text: "", final: true,
      approvals_requested: [{ call_id: "d1", name: "deploy", args_sha256: "ab" }] },
  ]);
  assert.equal(waiting.items[1].status, "awaiting_approval");
  assert.deepEqual(waiting.items[1].approval, { args_sha256: "ab", display: null,
                                                decided: null });
  const denied = fromHistory([
    { id: "e1", author: "ops", role: "model", text: "", final: false,
      calls: [{ id: "d1", name: "deploy" }] },
    { id: "e2", author: "ops", role: null, text: "", final: true,
      approvals_requested: [{ call_id: "d1", name: "deploy", args_sha256: "ab" }] },
    { id: "e3", author: "user", role: "user", text: "", final: false,
      approval_decisions: [{ call_id: "d1", approved: false, reason: null }] },
    { id: "e4", author: "ops", role: "user", text: "", final: false,
      results: [{ id: "d1", name: "deploy", status: "error", size: 30 }] },
  ]);
  assert.equal(denied.items[0].status, "denied");
  assert.equal(denied.items[0].approval.decided, "denied");
});

test("a live tool's emissions join its card, once each, live and from history", () => {
  const call = frame("tool_call", { names: ["ticker"], calls: [{ id: "t1", name: "ticker" }] });
  const emission = (id, text) => frame("tool_emission", { author: "voice", id, call_id: "t1",
                                                          branch: "voice/t1", text });
  const state = play([call, emission("x1", "1"), emission("x2", "2"), emission("x2", "2")]);
  assert.deepEqual(state.items[0].emissions, [{ id: "x1", text: "1" }, { id: "x2", text: "2" }]);
  const stored = fromHistory([
    { id: "e1", author: "voice", role: "model", text: "", final: false,
      calls: [{ id: "t1", name: "ticker" }] },
    { id: "x1", author: "voice", role: "model", text: "1", final: false, branch: "voice/t1" },
    { id: "m1", author: "voice", role: "model", text: "Watching.", final: true },
  ]);
  assert.deepEqual(stored.items.map((i) => i.kind), ["tool", "message"]);
  assert.deepEqual(stored.items[0].emissions, [{ id: "x1", text: "1" }]);
});

test("an emission is read as its value, or as its stream's end", () => {
  assert.deepEqual(readEmission('Function watch_price returned: {"price": 2}'),
                   { tool: "watch_price", value: '{"price": 2}' });
  assert.deepEqual(readEmission("Function ticker finished streaming."),
                   { tool: "ticker", end: "finished" });
  assert.deepEqual(readEmission("Function ticker stopped streaming: it reached its maximum"),
                   { tool: "ticker", end: "stopped" });
  assert.deepEqual(readEmission("Function ticker failed: ValueError: no"),
                   { tool: "ticker", end: "failed" });
  assert.deepEqual(readEmission("hello"), {});
  // the live panel's "Latest" line: the tool and its value, not the words the model reads
  assert.equal(emissionText('Function count_people returned: {"people": 2}'),
               'count_people: {"people": 2}');
  assert.equal(emissionText("Function count_people finished streaming."),
               "Function count_people finished streaming.");
});

test("a live tool's card streams while it emits, until its end, a stop or the run's end", () => {
  const call = frame("tool_call", { names: ["ticker"], calls: [{ id: "t1", name: "ticker" }] });
  const pending = frame("tool_result", { count: 1, results: [{ id: "t1", name: "ticker",
                                                               status: "pending", size: 80 }] });
  const emission = (id, text) => frame("tool_emission", { author: "voice", id, call_id: "t1",
                                                          branch: "voice/t1", text });
  const value = (id, n) => emission(id, `Function ticker returned: ${n}`);
  const card = (state) => state.items.find((i) => i.kind === "tool" && i.call_id === "t1");
  const started = play([call, pending]);
  assert.equal(card(started).status, "started");  // not "ok" (answered) before any value
  assert.equal(card(play([frame("done", {})], started)).status, "stopped");
  const streaming = play([call, pending, value("x1", 1), value("x2", 2)]);
  assert.equal(card(streaming).status, "streaming");  // not "ok" (answered) while it emits
  assert.equal(emittedValues(card(streaming)), 2);
  const early = play([call, value("x1", 1), pending]);  // a value before its pending result
  assert.equal(card(early).status, "streaming");
  const ended = play([emission("x3", "Function ticker finished streaming.")], streaming);
  assert.equal(card(ended).status, "finished");
  assert.equal(emittedValues(card(ended)), 2);  // the end is not a value
  const stop = [frame("tool_call", { names: ["stop_streaming"],
                                     calls: [{ id: "s1", name: "stop_streaming" }] }),
                frame("tool_result", { count: 1, results: [{ id: "s1", name: "stop_streaming",
                                                             status: "ok", size: 60 }] })];
  assert.equal(card(play(stop, streaming)).status, "stopped");
  assert.equal(card(play([value("x9", 9)], play(stop, streaming))).status, "streaming");
  for (const end of [frame("done", { usage: { input_tokens: 1, output_tokens: 1 } }),
                     frame("error", { code: "cancelled", retryable: false })]) {
    assert.equal(card(play([end], streaming)).status, "stopped");
  }
  const stored = [
    { id: "e1", invocation_id: "i1", author: "voice", role: "model", text: "",
      calls: [{ id: "t1", name: "ticker" }] },
    { id: "r1", invocation_id: "i1", author: "voice", role: "user", text: "",
      results: [{ id: "t1", name: "ticker", status: "pending", size: 80 }] },
    { id: "x1", invocation_id: "i1", author: "voice", role: "user",
      text: "Function ticker returned: 1", branch: "voice/t1" },
  ];
  assert.equal(card(fromHistory(stored.slice(0, 2))).status, "started");
  assert.equal(card(fromHistory(stored.slice(0, 2), { ended: true })).status, "stopped");
  assert.equal(card(fromHistory(stored)).status, "streaming");  // the run may go on
  assert.equal(card(fromHistory(stored, { ended: true })).status, "stopped");
});

test("stop_streaming stops the cards of the tool it names, and only that call with call_id", () => {
  const call = (id, name) => frame("tool_call", { names: [name], calls: [{ id, name }] });
  const pending = (id, name) => frame("tool_result", { count: 1, results: [{ id, name,
                                                                            status: "ok" }] });
  const value = (id, name) => frame("tool_emission", {
    author: "m", id: `x-${id}`, call_id: id, branch: `m/${id}`,
    text: `Function ${name} returned: 1` });
  const two = play(["w1", "w2", "c1"].flatMap((id) => {
    const name = id === "c1" ? "count_people" : "watch_price";
    return [call(id, name), pending(id, name), value(id, name)];
  }));
  const status = (state, id) => state.items.find((i) => i.kind === "tool" && i.call_id === id)
    .status;
  const stop = (args) => [frame("tool_call", { names: ["stop_streaming"], calls: [
                            { id: "s1", name: "stop_streaming", args }] }),
                          pending("s1", "stop_streaming")];
  const named = play(stop({ function_name: "watch_price" }), two);
  assert.deepEqual(["w1", "w2", "c1"].map((id) => status(named, id)),
                   ["stopped", "stopped", "streaming"]);
  const one = play(stop({ function_name: "watch_price", call_id: "w2" }), two);
  assert.deepEqual(["w1", "w2", "c1"].map((id) => status(one, id)),
                   ["streaming", "stopped", "streaming"]);
  const history = fromHistory([
    { id: "e1", invocation_id: "i1", author: "m", role: "model", text: "",
      calls: [{ id: "w1", name: "watch_price" }, { id: "c1", name: "count_people" }] },
    { id: "r1", invocation_id: "i1", author: "m", role: "user", text: "",
      results: [{ id: "w1", name: "watch_price", status: "ok" },
                { id: "c1", name: "count_people", status: "ok" }] },
    { id: "x1", invocation_id: "i1", author: "m", role: "user",
      text: "Function watch_price returned: 1", branch: "m/w1" },
    { id: "x2", invocation_id: "i1", author: "m", role: "user",
      text: "Function count_people returned: 1", branch: "m/c1" },
    { id: "e2", invocation_id: "i1", author: "m", role: "model", text: "",
      calls: [{ id: "s1", name: "stop_streaming", args: { function_name: "count_people" } }] },
    { id: "r2", invocation_id: "i1", author: "m", role: "user", text: "",
      results: [{ id: "s1", name: "stop_streaming", status: "ok" }] },
  ]);
  assert.deepEqual(["w1", "c1"].map((id) => status(history, id)), ["streaming", "stopped"]);
});

test("history shows each run's tokens: the sum of its stored model calls", () => {
  const state = fromHistory([
    { id: "u1", invocation_id: "i1", author: "user", role: "user", text: "Where?" },
    { id: "c1", invocation_id: "i1", author: "support", role: "model", text: "",
      calls: [{ id: "c", name: "lookup" }], usage: { input_tokens: 10, output_tokens: 2 } },
    { id: "r1", invocation_id: "i1", author: "support", role: "user", text: "",
      results: [{ id: "c", name: "lookup", status: "ok", size: 9 }] },
    { id: "m1", invocation_id: "i1", author: "support", role: "model", text: "There.",
      final: true, usage: { input_tokens: 20, output_tokens: 3 } },
    { id: "u2", invocation_id: "i2", author: "user", role: "user", text: "A story?" },
    { id: "m2", invocation_id: "i2", author: "support", role: "model", text: "Once",
      interrupted: true },  // stopped mid-answer: that call stored no usage
    { id: "x2", invocation_id: "i2", author: "support", role: null, text: "",
      error: { code: "cancelled", message: "" } },
    { id: "u3", invocation_id: "i3", author: "user", role: "user", text: "Again?" },
    { id: "c3", invocation_id: "i3", author: "support", role: "model", text: "",
      calls: [{ id: "d", name: "lookup" }], usage: { input_tokens: 7, output_tokens: 1 } },
    { id: "m3", invocation_id: "i3", author: "support", role: "model", text: "Half",
      interrupted: true },
    { id: "x3", invocation_id: "i3", author: "support", role: null, text: "",
      error: { code: "cancelled", message: "" } },
  ]);
  assert.deepEqual(state.items.map((i) => i.kind),
                   ["message", "tool", "message", "usage", "message", "message", "error",
                    "message", "tool", "message", "error", "usage"]);
  const usages = state.items.filter((i) => i.kind === "usage").map((i) => i.usage);
  assert.deepEqual(usages, [{ input_tokens: 30, output_tokens: 5 },
                            { input_tokens: 7, output_tokens: 1 }]);  // the stopped run's
});

test("a last turn with no answer stored says so once no run is going on", () => {
  const asked = { id: "u1", invocation_id: "i1", author: "user", role: "user", text: "Hi?" };
  const notices = (events, options) =>
    fromHistory(events, options).items.filter((i) => i.kind === "notice");
  assert.deepEqual(notices([asked], { ended: true }), [{ kind: "notice", code: "no_answer" }]);
  assert.deepEqual(notices([asked]), []);  // a run still going may answer yet
  assert.deepEqual(fromHistory([asked], { ended: true }).items.at(-1).kind, "notice");
  const call = { id: "c1", invocation_id: "i1", author: "a", role: "model", text: "",
                 calls: [{ id: "c", name: "lookup" }] };
  assert.equal(notices([asked, call], { ended: true }).length, 1);  // a call is no answer
  const answers = [
    { id: "m1", invocation_id: "i1", author: "a", role: "model", text: "Hello.", final: true },
    { id: "m1", invocation_id: "i1", author: "a", role: "model", text: "Hel", interrupted: true },
    { id: "x1", invocation_id: "i1", author: "a", role: null, text: "",
      error: { code: "provider_error", message: "" } },
    { id: "p1", invocation_id: "i1", author: "a", role: "model", text: "",
      calls: [{ id: "d", name: "deploy" }],
      approvals_requested: [{ call_id: "d", name: "deploy", args_sha256: "h" }] },
  ];
  for (const answer of answers) assert.deepEqual(notices([asked, answer], { ended: true }), []);
  // an approval answered, then nothing: the run that took the answer ended before it finished
  const decided = { id: "u2", invocation_id: "i2", author: "user", role: "user", text: "",
                    approval_decisions: [{ call_id: "d", approved: true }] };
  assert.equal(notices([asked, answers[3], decided], { ended: true }).length, 1);
  assert.deepEqual(notices([], { ended: true }), []);
});

test("an approval inside an agent used as a tool: the calls above it wait, then go on", () => {
  assert.deepEqual(callsAbove("ops:c0.release:c1"), ["c0", "c1"]);
  assert.deepEqual(callsAbove("fan.a"), []);
  assert.deepEqual(callsAbove(null), []);
  const paused = play([
    frame("tool_call", { author: "release", names: ["deployer"],
                         calls: [{ id: "c1", name: "deployer" }] }),
    frame("tool_call", { author: "deployer", branch: "release:c1", names: ["deploy"],
                         calls: [{ id: "d1", name: "deploy" }] }),
    frame("approval_required", { author: "deployer", branch: "release:c1", call_id: "d1",
                                 name: "deploy", args_sha256: "h", display: "deploy 2" }),
    frame("done", {}),
  ]);
  const card = (id) => paused.items.find((i) => i.kind === "tool" && i.call_id === id);
  assert.equal(card("c1").status, "waiting");
  assert.equal(card("d1").status, "awaiting_approval");
  assert.equal(card("d1").author, "deployer");
  const answered = reduce(paused, frame("decision", { call_id: "d1", approved: true }));
  const after = (id) => answered.items.find((i) => i.kind === "tool" && i.call_id === id);
  assert.equal(after("c1").status, "running");
  assert.equal(after("d1").approval.decided, "approved");
  // From the history: the same pause.
  const history = fromHistory([
    { author: "release", calls: [{ id: "c1", name: "deployer" }] },
    { author: "deployer", branch: "release:c1", calls: [{ id: "d1", name: "deploy" }] },
    { author: "deployer", branch: "release:c1",
      approvals_requested: [{ call_id: "d1", name: "deploy", args_sha256: "h",
                              display: "deploy 2" }] },
  ], { ended: true });
  assert.equal(history.items.find((i) => i.call_id === "c1").status, "waiting");
  // A later message supersedes it: both cards say so.
  const moved = reduce(paused, frame("superseded", {}));
  assert.deepEqual(moved.items.filter((i) => i.kind === "tool").map((i) => i.status),
                   ["superseded", "superseded"]);
});

test("the reducer is pure: it never changes the state it is given", () => {
  const before = play(WORKED_EXAMPLE.slice(0, 4));
  const snapshot = JSON.stringify(before);
  for (const f of WORKED_EXAMPLE) reduce(before, f);
  assert.equal(JSON.stringify(before), snapshot);
});

test("the SSE decoder is chunk-boundary invariant, with ids, comments and CR/LF/CRLF", () => {
  const wire = ": hello\r\nid: 1\r\nevent: delta\r\ndata: {\"author\":\"a\",\"text\":\"x\"}\r\n\r\n"
    + "id: 2\revent: done\rdata: {}\r\r"
    + "id: 3\nevent: message\ndata: {\"a\":\ndata: 1}\n\n";
  const whole = new SSEDecoder().feed(wire);
  assert.deepEqual(whole.map((f) => [f.id, f.type]), [["1", "delta"], ["2", "done"],
                                                      ["3", "message"]]);
  assert.equal(whole[2].data, "{\"a\":\n1}");
  for (let cut = 0; cut <= wire.length; cut++) {
    const decoder = new SSEDecoder();
    const frames = [...decoder.feed(wire.slice(0, cut)), ...decoder.feed(wire.slice(cut))];
    assert.deepEqual(frames, whole, `cut at ${cut}`);
  }
  assert.equal(new SSEDecoder().feed("id: 1\ndata: x").length, 0);
});

test("the SSE decoder reads what the Python encoder writes, at every byte split", () => {
  // tests/fixtures/sse-page.json: headwater.sse's output (checked by tests/gateway/test_page.py).
  const fixture = new URL("../fixtures/sse-page.json", import.meta.url);
  const { wire, events } = JSON.parse(readFileSync(fixture, "utf8"));
  const read = (frames) => frames.map((f) => ({ id: f.id, type: f.type, data: JSON.parse(f.data) }));
  assert.deepEqual(read(new SSEDecoder().feed(wire)), events);
  const bytes = new TextEncoder().encode(wire);
  const decodeIn = (pieces) => {  // as the page reads a body: TextDecoder in stream mode
    const decoder = new SSEDecoder();
    const text = new TextDecoder();
    return read(pieces.flatMap((piece) => decoder.feed(text.decode(piece, { stream: true }))));
  };
  for (let cut = 0; cut <= bytes.length; cut++) {
    assert.deepEqual(decodeIn([bytes.subarray(0, cut), bytes.subarray(cut)]), events,
                     `cut at byte ${cut}`);
  }
  assert.deepEqual(decodeIn([...bytes].map((b) => Uint8Array.of(b))), events);
});

test("an answer knows the run that said it, streamed or from the history (the Inspect button)", () => {
  const streamed = play([{ ...frame("message", { author: "support", id: "e1", final: true,
                                                 text: "Shipped." }), run: "inv-1" }]);
  assert.equal(messages(streamed)[0].run, "inv-1");
  const stored = fromHistory([{ id: "e1", invocation_id: "inv-2", author: "support",
                                text: "Shipped.", final: true }]);
  assert.equal(messages(stored)[0].run, "inv-2");
  assert.equal(messages(play([frame("message", { author: "a", id: "e2", text: "x" })]))[0].run,
               undefined);  // a frame no run was given for: none
});

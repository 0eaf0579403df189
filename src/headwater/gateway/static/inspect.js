// The run inspector (docs/inspector.md): a drawer for one run with four tabs.
//   Timeline: GET /runs/{id}/trace, one row per agent and branch, a bar per model and tool
//             call (a transfer is an arrow between rows); hover shows a span's attributes,
//             a click on a model call what it was sent and answered (when recorded).
//   Frames:   every frame this page received for the run, as it came, with its time;
//             a resumed stream is marked where it resumed.
//   Events:   the run's stored events (GET /sessions/{id}/events), each as its JSON.
//   State:    the session state after each of them, the keys it changed highlighted.
// app.js tells it the frames (inspector.frame / .resumed) and gives it its api();
// an "Inspect" button follows each run's last answer, and Alt+I opens the last run.

import { el } from "./dom.js";

const TABS = ["Timeline", "Frames", "Events", "State"];
const MAX_FRAMES = 5000;  // per run, in this page's memory

const runs = new Map();  // run id -> {frames: [{id, type, data, at}], resumes: [{after, at}]}
let lastRun = null;  // the run whose frames came last
let options = null;  // {api, session}
let current = null;  // {runId, tab}

function runOf(runId) {
  let run = runs.get(runId);
  if (!run) { run = { frames: [], resumes: [] }; runs.set(runId, run); }
  return run;
}

function json(value) { return JSON.stringify(value, null, 2); }

function dataOf(frame) {
  if (typeof frame.data !== "string") return frame.data ?? null;
  try { return JSON.parse(frame.data); } catch { return frame.data; }
}

function ms(seconds) {
  if (seconds === null || seconds === undefined) return "…";
  return seconds < 1 ? `${Math.round(seconds * 1000)} ms` : `${seconds.toFixed(2)} s`;
}

// -- what app.js tells it -----------------------------------------------------------------

function frame(runId, received) {
  if (!runId) return;
  const run = runOf(runId);
  lastRun = runId;
  run.session ??= options?.session() ?? null;
  if (run.frames.length < MAX_FRAMES) {
    run.frames.push({ id: received.id ?? null, type: received.type, data: dataOf(received),
                      at: Date.now() });
  }
  if (current?.runId === runId && current.tab === "Frames") show("Frames");
}

function resumed(runId, after) {
  // The page follows the run again (GET /runs/{id}/stream, Last-Event-ID `after`): a
  // dropped connection, or a reload during the run.
  if (runId) runOf(runId).resumes.push({ after, at: Date.now() });
}

// -- the drawer ---------------------------------------------------------------------------

function drawer() {
  let aside = document.getElementById("inspector");
  if (aside) return aside;
  const tabs = el("div", { role: "tablist", "aria-label": "Inspect views" },
    ...TABS.map((name) => el("button", {
      type: "button", role: "tab", id: `inspect-tab-${name.toLowerCase()}`,
      "aria-controls": "inspect-panel", "aria-selected": "false",
      onclick: () => show(name) }, name)));
  aside = el("aside", { id: "inspector", "aria-label": "Inspect run", hidden: true },
    el("header", {},
      el("h2", { id: "inspect-title" }, "Inspect"),
      el("button", { type: "button", class: "close", "aria-label": "Close the inspector",
                     onclick: close }, "×")),
    tabs,
    el("section", { id: "inspect-panel", role: "tabpanel", tabindex: "0" }));
  document.body.append(aside);
  return aside;
}

function open(runId, tab = "Timeline") {
  if (!runId) return;
  current = { runId, tab };
  const aside = drawer();
  aside.hidden = false;
  document.body.classList.add("inspecting");
  document.getElementById("inspect-title").textContent = `Run ${runId}`;
  show(tab);
}

function close() {
  const aside = document.getElementById("inspector");
  if (aside) aside.hidden = true;
  document.body.classList.remove("inspecting");
  current = null;
}

async function show(tab) {
  if (!current) return;
  current.tab = tab;
  for (const name of TABS) {
    document.getElementById(`inspect-tab-${name.toLowerCase()}`)
      .setAttribute("aria-selected", String(name === tab));
  }
  const panel = document.getElementById("inspect-panel");
  panel.setAttribute("aria-labelledby", `inspect-tab-${tab.toLowerCase()}`);
  const runId = current.runId;
  let body;
  try {
    body = await VIEWS[tab](runId);
  } catch (error) {
    body = el("p", { class: "inspect-note", role: "note" },
              error.code === "not_found"
                ? "The server keeps no trace of this run (it keeps the last runs of each "
                  + "session: Settings.inspect_runs)."
                : `Could not load it: ${error.message || error.code || error}`);
  }
  if (current?.runId === runId && current.tab === tab) panel.replaceChildren(body);
}

// -- Timeline -----------------------------------------------------------------------------

function laneKey(span) { return `${span.agent}\u0000${span.branch ?? ""}`; }

function spanTitle(span) {
  const lines = [`${span.kind} ${span.name}`, `agent ${span.agent}`
    + (span.branch ? ` (branch ${span.branch})` : ""),
    `start ${ms(span.start)}, took ${ms(span.end === null ? null : span.end - span.start)}`];
  for (const [key, value] of Object.entries(span.attributes ?? {})) lines.push(`${key}: ${value}`);
  return lines.join("\n");
}

function barLabel(span) {
  const a = span.attributes ?? {};
  const took = span.end === null ? "running" : ms(span.end - span.start);
  const tokens = a.input_tokens !== undefined && span.kind === "model"
    ? ` · ${a.input_tokens}→${a.output_tokens} tok` : "";
  const bad = a.error_code ? ` · ${a.error_code}` : "";
  return `${span.name} · ${took}${tokens}${bad}`;
}

async function timeline(runId) {
  const trace = await options.api("GET", `/runs/${runId}/trace?payloads=1`);
  const spans = trace.spans;
  const total = Math.max(...spans.map((s) => s.end ?? s.start), 0.001);
  const lanes = [];  // [{key, agent, branch}]
  const laneOf = new Map();
  const lane = (agent, branch) => {
    const key = `${agent}\u0000${branch ?? ""}`;
    if (!laneOf.has(key)) { laneOf.set(key, lanes.length); lanes.push({ key, agent, branch }); }
    return laneOf.get(key);
  };
  for (const span of spans) {
    if (span.kind === "transfer") { lane(span.agent, span.branch); continue; }
    lane(span.agent, span.branch);
  }
  for (const span of spans) {  // a transfer's target has a row even if it never spoke
    if (span.kind === "transfer") lane(span.attributes.to, span.branch);
  }
  const detail = el("section", { class: "span-detail", "aria-live": "polite" },
    el("p", { class: "inspect-note" }, "Click a model call to see what it was sent and answered."));
  const tracks = el("div", { class: "tracks" });
  const rows = lanes.map((l) => el("div", { class: "lane", "data-agent": l.agent,
                                            "data-branch": l.branch ?? "" },
    el("span", { class: "lane-label", title: l.branch ? `branch ${l.branch}` : "main line" },
       l.agent, l.branch ? el("small", {}, l.branch) : null),
    el("div", { class: "track" })));
  tracks.append(...rows);
  const place = (node, span) => {
    const left = (span.start / total) * 100;
    const width = (((span.end ?? total) - span.start) / total) * 100;
    node.style.left = `${left}%`;
    node.style.width = `max(${width}%, 3px)`;
  };
  for (const span of spans) {
    if (span.kind === "transfer") {
      const from = laneOf.get(laneKey(span));
      const to = laneOf.get(`${span.attributes.to}\u0000${span.branch ?? ""}`);
      const arrow = el("div", {
        class: `arrow ${to >= from ? "down" : "up"}`, "data-span": span.id, "data-kind": "transfer",
        title: spanTitle(span), role: "img",
        "aria-label": `transfer from ${span.attributes.from} to ${span.attributes.to}` });
      arrow.style.left = `calc(var(--label) + (100% - var(--label)) * ${span.start / total})`;
      arrow.style.setProperty("--from", String(Math.min(from, to)));
      arrow.style.setProperty("--rows", String(Math.abs(to - from)));
      tracks.append(arrow);
      continue;
    }
    const track = rows[laneOf.get(laneKey(span))].querySelector(".track");
    const bar = el(span.kind === "model" ? "button" : "div", {
      class: `bar ${span.kind}`, "data-span": span.id, "data-kind": span.kind,
      title: spanTitle(span), type: span.kind === "model" ? "button" : null,
      "aria-label": span.kind === "agent" ? `${span.name}'s turn` : barLabel(span) },
      span.kind === "agent" ? null : el("span", {}, barLabel(span)));
    if (span.attributes?.error_code || span.attributes?.status === "error") bar.classList.add("failed");
    place(bar, span);
    const share = ((span.end ?? total) - span.start) / total;
    if (span.kind !== "agent" && share < 0.3) {  // too short to hold its label: beside it
      bar.classList.add(span.start / total > 0.6 ? "label-left" : "label-right");
    }
    if (span.kind === "model") {
      bar.onclick = () => detail.replaceChildren(...payloadView(span, trace.payloads));
    }
    track.append(bar);
  }
  const scale = el("div", { class: "scale" }, el("span", {}, "0"), el("span", {}, ms(total)));
  const note = trace.ended ? null
    : el("p", { class: "inspect-note" }, "The run is still going: this is what it has done so far.");
  const dropped = trace.dropped
    ? el("p", { class: "inspect-note" }, `${trace.dropped} more spans were not kept.`) : null;
  const refresh = el("button", { type: "button", class: "refresh", onclick: () => show("Timeline") },
                     "Refresh");
  return el("div", { class: "timeline" }, el("div", { class: "inspect-bar" }, refresh), note,
            dropped, tracks, scale, detail);
}

function payloadView(span, recorded) {
  const head = el("h3", {}, `${span.name} (${span.agent})`);
  if (!span.payload) {
    return [head, el("p", { class: "inspect-note" }, recorded === false
      ? "Not recorded: the server keeps what models are sent only with Settings.inspect_payloads "
        + "(on in dev mode)."
      : "Nothing was recorded for this call.")];
  }
  const request = span.payload.request;
  const parts = [head];
  if (request) {
    parts.push(el("h4", {}, "System instruction"),
               el("pre", {}, request.system_instruction ?? "(none)"),
               el("h4", {}, `Contents (${request.contents.length})`),
               el("pre", {}, json(request.contents)),
               el("h4", {}, `Tools (${request.tools.length})`),
               el("pre", {}, json(request.tools.map((t) => t.name))),
               el("h4", {}, "Generation config"),
               el("pre", {}, json({ config: request.config,
                                    generate_content_config: request.generate_content_config })));
  }
  parts.push(el("h4", {}, "Answer"), el("pre", {}, json(span.payload.response ?? null)));
  return parts;
}

// -- Frames -------------------------------------------------------------------------------

function frames(runId) {
  const run = runs.get(runId);
  if (!run || !run.frames.length) {
    return el("p", { class: "inspect-note", role: "note" },
              "This run's frames were not streamed to this page (it ran before the page was "
              + "loaded, or elsewhere): the timeline and the events come from the server.");
  }
  const first = Math.min(run.frames[0].at, run.resumes[0]?.at ?? Infinity);
  const rows = [];
  let resume = 0;
  for (const f of run.frames) {
    while (resume < run.resumes.length && run.resumes[resume].at <= f.at) {
      const r = run.resumes[resume++];
      rows.push(el("tr", { class: "resumed" }, el("td", { colspan: "4" },
        `resumed after frame ${r.after} (+${r.at - first} ms)`)));
    }
    rows.push(el("tr", { "data-frame": f.id ?? "" },
      el("td", {}, f.id ?? "–"), el("td", {}, `+${f.at - first} ms`), el("td", {}, f.type),
      el("td", {}, el("code", {}, JSON.stringify(f.data)))));
  }
  return el("table", { class: "frames" },
    el("thead", {}, el("tr", {}, el("th", {}, "id"), el("th", {}, "arrived"),
                           el("th", {}, "type"), el("th", {}, "data"))),
    el("tbody", {}, ...rows));
}

// -- Events and State ---------------------------------------------------------------------

async function sessionEvents() {
  const id = options.session();
  const events = [];
  let cursor = null;
  do {
    const page = await options.api("GET", `/sessions/${id}/events?limit=200`
                                          + (cursor ? `&cursor=${cursor}` : ""));
    events.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor);
  return { id, events };
}

async function events(runId) {
  const { events: all } = await sessionEvents();
  const mine = all.filter((e) => e.invocation_id === runId);
  if (!mine.length) return el("p", { class: "inspect-note" }, "The run stored no events.");
  return el("ol", { class: "events" }, ...mine.map((e) => {
    const changed = Object.keys(e.state_delta ?? {});
    return el("li", { "data-event": e.id },
      el("details", { open: mine.length <= 12 },  // a short run: every event's JSON shown
        el("summary", {}, el("strong", {}, e.author),
           e.branch ? el("span", { class: "branch" }, ` on ${e.branch}`) : null,
           ` · ${summary(e)}`,
           changed.length ? el("span", { class: "changed" }, ` · changed ${changed.join(", ")}`)
             : null),
        el("pre", {}, json(e))));
  }));
}

function summary(e) {
  if (e.error) return `error ${e.error.code}`;
  if (e.calls?.length) return `calls ${e.calls.map((c) => c.name).join(", ")}`;
  if (e.results?.length) return `results of ${e.results.map((r) => r.name).join(", ")}`;
  if (e.text) return e.text.length > 60 ? `${e.text.slice(0, 60)}…` : e.text;
  return e.transfer_to ? `to ${e.transfer_to}` : "(no text)";
}

async function stateView(runId) {
  const { id, events: all } = await sessionEvents();
  const session = await options.api("GET", `/sessions/${id}`);
  // Keys no event changed were there from the session's start (or set outside a run).
  const touched = new Set(all.flatMap((e) => Object.keys(e.state_delta ?? {})));
  const state = Object.fromEntries(Object.entries(session.state ?? {})
    .filter(([key]) => !touched.has(key)));
  const steps = [];
  for (const e of all) {
    const delta = e.state_delta ?? {};
    Object.assign(state, delta);
    if (e.invocation_id === runId) steps.push({ event: e, state: { ...state }, delta });
  }
  if (!steps.length) return el("p", { class: "inspect-note" }, "The run stored no events.");
  return el("ol", { class: "states" }, ...steps.map(({ event, state: after, delta }) => {
    const keys = Object.keys(after);
    return el("li", { "data-event": event.id },
      el("p", {}, el("strong", {}, event.author), ` · ${summary(event)}`),
      keys.length ? el("table", { class: "state" }, el("tbody", {}, ...keys.map((key) =>
        el("tr", { class: key in delta ? "changed" : null, "data-key": key },
           el("th", {}, key), el("td", {}, el("code", {}, JSON.stringify(after[key]))))))
        ) : el("p", { class: "inspect-note" }, "(empty state)"));
  }));
}

const VIEWS = { Timeline: timeline, Frames: frames, Events: events, State: stateView };

// -- where it opens from -------------------------------------------------------------------

function decorate(log) {
  // An "Inspect" button after each run's last answer on the main line.
  const lastOf = new Map();
  for (const node of log.querySelectorAll("article.message[data-run]:not([data-draft])")) {
    if (node.dataset.author !== "user") lastOf.set(node.dataset.run, node);
  }
  for (const [runId, node] of lastOf) {
    if (node.querySelector(":scope > button.inspect")) continue;
    node.append(el("button", { type: "button", class: "inspect", "data-run": runId,
                               "aria-label": "Inspect this run", title: "Inspect (Alt+I)",
                               onclick: () => open(runId) }, "Inspect"));
  }
}

function newestRun() {
  // The run streaming into this session now, else the last one answered in the log.
  if (lastRun && runs.get(lastRun)?.session === options.session()) return lastRun;
  const buttons = document.querySelectorAll("#log button.inspect");
  return buttons[buttons.length - 1]?.dataset.run ?? null;
}

function install(given) {
  options = given;
  const log = document.getElementById("log");
  new MutationObserver(() => decorate(log)).observe(log, { childList: true, subtree: true });
  decorate(log);
  document.addEventListener("keydown", (event) => {
    if (event.altKey && !event.ctrlKey && !event.metaKey && event.code === "KeyI") {
      event.preventDefault();
      if (current) close(); else open(newestRun());
    } else if (event.key === "Escape" && current) {
      close();
    }
  });
}

export const inspector = { install, frame, resumed, open, close };

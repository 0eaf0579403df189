// Drives headwater's POST /ag-ui/{agent} with the real AG-UI client (@ag-ui/client, pinned in
// package-lock.json): its SSE parser, schema enforcement, event verifier and message builder.
//
//   node agui_client.mjs '<plan JSON>'        (or the plan in env AGUI_PLAN)
//
// plan: {"url": "http://127.0.0.1:port/ag-ui/agent", "token"?: "...", "threadId"?: "...",
//        "runs": [{"message"?: "text", "resume"?: "approve" | "deny",
//                  "forwardedProps"?: {...}}]}
// Every run goes through one HttpAgent.runAgent on the same agent (so the client keeps the
// thread's messages and pending interrupts between runs, as an app does). Prints one JSON
// object: per run the events the client accepted, the run's outcome, RUN_ERROR events and a
// failure (a rejected runAgent: an HTTP error or a verifier refusal); then the messages the
// client rebuilt, every warning the client printed (schema strips, dropped events, patches it
// could not apply) and every error it logged.

import { HttpAgent, buildResumeArray } from "@ag-ui/client";

// console.warn is where the client reports what it stripped, dropped or could not apply;
// console.error where it reports a failed run (already in that run's "failure").
const warnings = [];
const errors = [];
console.warn = (...args) => warnings.push(args.map(String).join(" "));
console.error = (...args) => errors.push(args.map(String).join(" "));

const plan = JSON.parse(process.argv[2] ?? process.env.AGUI_PLAN ?? "{}");
if (!plan.url) {
  process.stderr.write("usage: node agui_client.mjs '{\"url\": ..., \"runs\": [...]}'\n");
  process.exit(2);
}

const agent = new HttpAgent({
  url: plan.url,
  threadId: plan.threadId,
  headers: plan.token ? { Authorization: `Bearer ${plan.token}` } : {},
});

function resumeFor(answer) {
  const approved = answer === "approve";
  const responses = Object.fromEntries(agent.pendingInterrupts.map((interrupt) => [
    interrupt.id,
    answer === "cancel" ? { status: "cancelled" } : { status: "resolved", payload: { approved } },
  ]));
  return buildResumeArray(agent.pendingInterrupts, responses);
}

const runs = [];
let counter = 0;
for (const step of plan.runs ?? []) {
  const seen = { events: [], runErrors: [], outcome: null, interrupts: [], usage: null,
                 failure: null, newMessages: [] };
  if (step.message !== undefined) {
    counter += 1;
    agent.addMessage({ id: `user-${counter}`, role: "user", content: step.message });
  }
  const parameters = {};
  if (step.resume !== undefined) parameters.resume = resumeFor(step.resume);
  if (step.forwardedProps !== undefined) parameters.forwardedProps = step.forwardedProps;
  try {
    const result = await agent.runAgent(parameters, {
      onEvent({ event }) { seen.events.push(event); },
      onRunErrorEvent({ event }) { seen.runErrors.push(event); },
      onRunFinishedEvent(params) {
        seen.outcome = params.outcome;
        seen.interrupts = params.interrupts ?? [];
        seen.usage = params.event.usage ?? null;
      },
      onRunFailed({ error }) { seen.failure ??= { message: String(error?.message ?? error) }; },
    });
    seen.newMessages = result.newMessages;
  } catch (error) {
    seen.failure = { message: String(error?.message ?? error), status: error?.status ?? null,
                     payload: error?.payload ?? null };
  }
  seen.pendingInterrupts = agent.pendingInterrupts.map((interrupt) => interrupt.id);
  runs.push(seen);
}

process.stdout.write(JSON.stringify({ runs, messages: agent.messages, warnings, errors }) + "\n");

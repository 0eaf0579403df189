"""Each example runs on its own: ``python examples/<name>.py ["message"]`` exits 0 and prints
its conversation, the streamed answer once, on the offline demo model.

The scripts are run as child processes from the repository, as a user would;
``headwater.examples.<name>.main`` is the same code in process.
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from headwater.examples import docs_search, index_server, support

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow  # each test starts a Python child


@pytest.fixture
def env(child_env: dict[str, str]) -> dict[str, str]:
    """The demo model (no HEADWATER_MODEL from outside), at a fast reading pace."""
    clean = {k: v for k, v in child_env.items() if not k.startswith("HEADWATER_")}
    return {**clean, "HEADWATER_DEMO_WORD_DELAY": "0.002"}


def run(env: dict[str, str], name: str, *args: str, stdin: str = "") -> list[str]:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / f"{name}.py"), *args],
                          cwd=ROOT, env=env, input=stdin, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    return done.stdout.splitlines()


def test_support_answers_where_an_order_is(env: dict[str, str]) -> None:
    assert run(env, "support") == [
        "you> Where is order 1042?",
        '[call] lookup_order({"order_id": "1042"})',
        '[result] lookup_order -> {"order_id": "1042", "status": "shipped", '
        '"shipped_on": "30 September", "due": "Monday"}',
        "support> Order 1042 shipped on 30 September and is due Monday."]
    lines = run(env, "support", "Where is order 2001?")
    assert lines[-1] == "support> Order 2001 is packing and is due Thursday."
    lines = run(env, "support", "And order 999?")
    assert lines[-1] == "support> The lookup_order call failed: LookupError: no order 999"


def test_the_docs_search_reports_progress_then_answers(env: dict[str, str]) -> None:
    lines = run(env, "docs_search")
    progress = [line for line in lines if line.startswith("[search_docs]")]
    assert progress == [f"[search_docs] {n}/5 searched {path}"
                        for n, (_, path) in enumerate(docs_search.DOCS, start=1)]
    assert lines[-1] == ("docs> I found 3 pages about streaming: Streaming events, Streaming "
                         "over HTTP: the frame protocol, Live streaming tools.")
    assert run(env, "docs_search", "Search the docs for approval")[-1] == (
        "docs> I found 1 pages about approval: Approval gates.")


def test_the_indexer_shows_its_mcp_servers_progress_then_answers(env: dict[str, str]) -> None:
    lines = run(env, "indexer")
    progress = [line for line in lines if line.startswith("[index_docs]")]
    assert progress == [f"[index_docs] {n}/8 indexing {page}"
                        for n, (page, _) in enumerate(index_server.PAGES)] + [
        "[index_docs] 8/8 index written"]
    assert lines[-1] == "indexer> I indexed 8 pages of the docs (25,300 words)."


def test_a_deploy_waits_for_approval_then_shows_its_progress(env: dict[str, str]) -> None:
    lines = run(env, "deploy", stdin="y\n")
    start = lines.index("[approval required] deploy version 2 to staging")
    assert lines[start + 1] == "Approve deploy version 2 to staging? [y/N] [approved] deploy"
    assert lines[start + 2:start + 7] == ["[deploy] 1/5 build", "[deploy] 2/5 upload",
                                          "[deploy] 3/5 migrate", "[deploy] 4/5 switch traffic",
                                          "[deploy] 5/5 verify"]
    assert lines[-1] == "deploy> Version 2 is live on staging."
    lines = run(env, "deploy", "Deploy version 3 to production", "--approve")
    assert lines[-1] == "deploy> Version 3 is live on production."


@pytest.mark.parametrize("how", [("--deny",), ()])
def test_a_denied_deploy_never_runs(env: dict[str, str], how: tuple[str, ...]) -> None:
    lines = run(env, "deploy", *how)  # no flag: asked, and the empty input is a no
    assert "[denied] deploy" in lines[-3]
    assert not any(line.startswith("[deploy]") for line in lines)
    assert lines[-2] == ('[result] deploy -> {"error": "A human denied this call.", '
                         '"code": "denied"}')
    assert lines[-1] == ("deploy> Understood: the deploy call was denied, so I did not run it. "
                         "Nothing changed.")


def test_the_price_watcher_watches_live_then_stops(env: dict[str, str]) -> None:
    lines = [re.sub(r"^\[t=\s*[\d.]+s\] ", "", line)
             for line in run(env, "price_watcher", "--seconds", "0.5")]
    assert lines[:3] == [
        "user: Watch GOOG",
        'market calls watch_price({"symbol": "GOOG", "min_move_pct": 0.5})',
        '  watch_price answered: {"status": "The function is running asynchronously and the '
        'results are pending."}']
    told = [json.loads(line.split("returned: ", 1)[1]) for line in lines if "returned: " in line]
    assert told[0] == {"symbol": "GOOG", "price": 171.2}
    assert all(t["symbol"] == "GOOG" and "price" in t for t in told)
    assert "market: GOOG is at 171.20." in lines
    stop = lines.index("user: Stop watching.")
    after = lines[stop:]
    # A price told to the model just before the stop may still be answered after it
    # (the model speaks in turn order; the program ends at the first reply after the
    # stop's result): the stop's own lines come in order, the model speaks after it,
    # and nothing of the stream is told to the model once it stopped.
    call = 'market calls stop_streaming({"function_name": "watch_price"})'
    answered = ('  stop_streaming answered: {"result": "Successfully stopped streaming '
                'function watch_price", "stopped": 1}')
    assert call in after and answered in after
    assert after.index(call) < after.index(answered)
    confirmed = after.index(answered)
    replies = after[confirmed + 1:]
    assert replies and all(line.startswith("market: ") for line in replies)
    assert not [line for line in replies if "returned: " in line]


def test_the_people_counter_counts_the_bundled_frames_live_then_stops(
        env: dict[str, str]) -> None:
    lines = [re.sub(r"^\[t=\s*[\d.]+s\] ", "", line)
             for line in run(env, "people_counter", "--speed", "8")]
    assert lines[:2] == ["user: Count the people", "people calls count_people({})"]
    counts = [json.loads(line.split("returned: ", 1)[1])["people"] for line in lines
              if "count_people returned: " in line]
    assert counts[0] == 0 and len(counts) >= 3  # real time: the sampled frames may vary a bit
    assert set(counts) <= {0, 1, 2, 3}
    assert all(a != b for a, b in itertools.pairwise(counts))  # only changes
    assert "people: Nobody is in view." in lines
    assert lines[-1] == "people: Stopped counting."


def test_the_research_pipeline_searches_in_parallel_checks_with_an_agent_then_writes(
        env: dict[str, str]) -> None:
    lines = run(env, "research")
    assert lines[0] == "you> Research rivers"
    web = [line for line in lines if line.startswith("web [searchers.web]> ")]
    papers = [line for line in lines if line.startswith("papers [searchers.papers]> ")]
    # Each searcher on its own branch: its call, its result, its answer (the two may interleave).
    assert [line.split("> ", 1)[1][:8] for line in web] == ["[call] s", "[result]", "From web"]
    assert papers[-1] == ("papers [searchers.papers]> From papers on rivers: Meandering rivers "
                          "migrate over decades (2019).")
    assert [line for line in lines if line.startswith("[search_web]")] == [
        "[search_web] 1/3 searched encyclopedia", "[search_web] 2/3 searched news",
        "[search_web] 3/3 searched blogs"]
    # The writer, after both: it calls the checker, whose own call runs on the call's branch.
    call = next(n for n, line in enumerate(lines) if line.startswith("writer> [call] fact_checker"))
    assert call > lines.index(web[-1]) and call > lines.index(papers[-1])
    inner = [line for line in lines[call + 1:] if line.startswith("fact_checker [")]
    assert [line.split("> ", 1)[1][:8] for line in inner] == ["[call] c", "[result]", "The clai"]
    assert lines[-3] == 'writer> [result] fact_checker -> {"result": "The claim is supported ' \
        '(2 sources)."}'
    assert lines[-2] == (
        "writer> Here is what the research found. From web on rivers: Rivers carry sediment to "
        "the sea; The Nile is about 6,650 km long. From papers on rivers: Meandering rivers "
        "migrate over decades (2019). fact_checker says: The claim is supported (2 sources).")
    assert json.loads(lines[-1].removeprefix("[state] ")) == {
        "web": web[-1].split("> ", 1)[1], "papers": papers[-1].split("> ", 1)[1]}


@pytest.mark.parametrize("name", ["price_watcher", "people_counter"])
def test_the_virtual_sessions_run_as_scripts(env: dict[str, str], name: str) -> None:
    lines = run(env, name, "--virtual")
    assert lines[0].startswith(f"{name.replace('_', ' ')}: demo model (scripted), virtual clock")
    assert lines[-1].startswith(("quote polls: 151", "frames sent: 41"))


def test_main_in_process_is_the_script(env: dict[str, str],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert support.main(["Where is order 2001?"]) == 0
    assert capsys.readouterr().out.splitlines() == run(env, "support", "Where is order 2001?")


def test_a_bad_argument_is_a_usage_error(env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "people_counter.py"),
                           "--speed", "0"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 2
    assert "--speed must be positive" in done.stderr

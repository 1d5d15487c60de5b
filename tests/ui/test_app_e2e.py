"""The web app end to end through its named API with ``gradio_client``, run the way the Space image runs it: public
mode on, the runs folder outside the working folder and /tmp. Two sessions, a live run, rollouts arithmetic,
base-vs-trained comparison, stop, evaluation, downloads, and a crash that leaves the server usable.

``python -m pytest tests/ui/test_app_e2e.py`` (about two minutes).
"""

import json
import re
import time
from dataclasses import replace

import httpx
import pytest
from apputil import call_event, running_app, wait_until
from gradio_client import Client

from rloo_demo.models.sampling import sample
from rloo_demo.public.gates import Caller
from rloo_demo.public.limits import PUBLIC
from rloo_demo.task import rewards as rewards_module

SHORT = {"max_steps": 200, "prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 8}
# The image's limits; only the Start rate is raised, because this module starts more runs a minute than a visitor
# may (tests/public/test_public.py checks that rate).
LIMITS = replace(PUBLIC, starts_per_minute=50)


def compare_when_allowed(client, *args):
    """A Compare as a polite client makes it: refused for sampling's share while a run trains (a first Compare that
    loads its models can spend this visitor's part alone), it waits the seconds the refusal names and asks once
    more. Any other answer is returned."""
    out = client.predict(*args, api_name="/compare")
    # the sampling share, or this visitor's part of it (public.gates.SamplingGate): both name the wait
    told = re.search(r"a run is training: .*try again in (\d+) s", str(out.get("error", "")))
    if told:
        time.sleep(int(told.group(1)) + 1)
        out = client.predict(*args, api_name="/compare")
    return out


@pytest.fixture(scope="module")
def app(space_runs_dir):
    with running_app(space_runs_dir, limits=LIMITS) as (url, controller):
        yield url, controller


def poll(client, run, since=0):
    return client.predict(run, since, api_name="/poll_metrics")


def test_two_sessions_live_run_rollouts_compare_stop(app):
    url, controller = app
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    started = a.predict(json.dumps(SHORT), "session-a", api_name="/start_run")
    assert "run" in started, started
    run = started["run"]

    # a second Start from the same address (one visitor, two sessions) while the first trains is refused clearly,
    # naming the run in training; another visitor would get a place in the line (tests/public/test_fair_share.py)
    busy = b.predict(json.dumps(SHORT), "session-b", api_name="/start_run")
    assert "still training" in busy["error"] and run in busy["error"]

    data = wait_until(lambda: (d := poll(a, run)) and len(d["records"]) >= 3 and d)
    assert data["status"] == "running"
    assert [r["step"] for r in data["records"]][:3] == [1, 2, 3]
    assert {"reward", "kl", "loss", "entropy", "rewards/vader_compound/mean"} <= set(data["records"][0])
    since = data["records"][1]["step"]
    newer = poll(a, run, since=since)
    assert newer["records"] and newer["records"][0]["step"] == since + 1  # exactly the steps after since_step

    # rollouts of step 1: the baseline and advantage arithmetic holds for every completion
    ro = a.predict(run, 1, api_name="/get_rollouts")
    assert 1 in ro["steps"] and len(ro["groups"]) == SHORT["prompts_per_step"]
    assert {g["step"] for g in ro["groups"]} == {1}
    for g in ro["groups"]:
        comps = g["completions"]
        assert len(comps) == SHORT["num_generations"]
        for i, c in enumerate(comps):
            others = [o["shaped_reward"] for j, o in enumerate(comps) if j != i]
            assert c["baseline"] == pytest.approx(sum(others) / len(others), abs=1e-6)
            assert c["advantage"] == pytest.approx(c["shaped_reward"] - c["baseline"], abs=1e-5)
        assert sum(c["advantage"] for c in comps) == pytest.approx(0.0, abs=1e-5)

    # compare base and trained while the run trains (a snapshot of the policy), from the other session
    cmp = b.predict(run, "This movie was", 3, 7, api_name="/compare")
    assert len(cmp["base"]) == len(cmp["trained"]) == 3, cmp
    for s in cmp["base"] + cmp["trained"]:
        assert {"vader_compound", "sentiment_classifier"} <= set(s["scores"])
    again = compare_when_allowed(b, run, "This movie was", 3, 7)
    assert [s["text"] for s in again["base"]] == [s["text"] for s in cmp["base"]]  # same seed, same base samples

    # only the starting session may stop the run; the run is unharmed by the attempt
    denied = b.predict(run, "session-b", api_name="/stop_run")
    assert "only the browser session that started" in denied["message"]
    assert poll(a, run)["status"] == "running"
    a.predict(run, "session-a", api_name="/stop_run")
    final = wait_until(lambda: (d := poll(a, run)) and d["status"] in ("stopped", "finished") and d, timeout=60)
    steps = [r["step"] for r in final["records"]]
    assert final["status"] == "stopped" and steps == list(range(1, len(steps) + 1))
    assert final["reason"] == "its starter asked it to stop"

    runs = a.predict(api_name="/list_runs")
    assert runs[0]["name"] == run and runs[0]["has_model"] and runs[0]["status"] == "stopped"
    assert "owner" not in json.dumps(runs)  # a listed run never reveals who started it

    # a finished run on disk compares too, and its trained column is the trained model's own samples
    after = compare_when_allowed(b, run, "This movie was", 2, 7)
    base, trained, tok, _ = controller.inference.models_for(run)
    assert [s["text"] for s in after["trained"]] == [
        s["text"] for s in sample(trained, tok, "This movie was", 2, 24, 1.0, 1.0, 7)
    ]
    assert [s["text"] for s in after["base"]] == [
        s["text"] for s in sample(base, tok, "This movie was", 2, 24, 1.0, 1.0, 7)
    ]

    # the Compare tab's held-out evaluation: a visitor's is not saved into the run; the starter's is
    visitor = controller.evaluate(run, 8, 0, Caller("session-b", "127.0.0.1"))
    lo, hi = visitor["difference_ci95"]
    assert lo < hi and lo <= visitor["difference"] <= hi
    assert set(visitor["per_function"]) == {"vader_compound", "sentiment_classifier"}
    assert not visitor["saved"] and controller.runner.run(run).evaluation() is None
    owner = controller.evaluate(run, 8, 1, Caller("session-a", "127.0.0.1"))
    assert owner["saved"] and controller.runner.run(run).evaluation()["seed"] == 1


def test_runs_tab_downloads_are_served_in_the_space_layout(app, space_runs_dir):
    """The Runs tab's details event, called as the browser calls it: gradio accepts the download files (copies in
    the server's export folder) and serves them, although the run itself lives outside the working folder and
    /tmp, as on a Space. Files are not served from the export folder directly, only through gradio's cache."""
    url, controller = app
    run = next(r for r in controller.list_runs() if r["has_model"])["name"]
    call_event(url, "runs_refresh", [[], None], session_hash="runs-tab")  # fills this page's run list, as a click does
    downloads, command, config_text, message = call_event(url, "runs_details", [run], session_hash="runs-tab")
    assert message == "" and command.startswith("python -m rloo_demo train") and "max_steps: 200" in config_text
    names = sorted(f["orig_name"] for f in downloads)
    assert names == sorted(f"{run}-{x}" for x in ("config.yaml", "metrics.csv", "model.zip", "rollouts.jsonl"))
    source = controller.runner.run(run).path
    for f in downloads:
        assert not f["path"].startswith(str(space_runs_dir))
        body = httpx.get(f["url"], timeout=30)
        assert body.status_code == 200, (f["orig_name"], body.status_code)
        if f["orig_name"].endswith("config.yaml"):
            assert body.text == (source / "config.yaml").read_text()
        if f["orig_name"].endswith("rollouts.jsonl"):
            assert body.content == (source / "rollouts.jsonl").read_bytes()
    direct = httpx.get(f"{url}gradio_api/file={source / 'config.yaml'}", timeout=30)
    assert direct.status_code in (403, 404)  # the runs folder itself is not served


def test_crash_in_training_shows_and_server_stays_usable(app, monkeypatch):
    url, _ = app

    def broken_reward(prompts, completions, **kw):
        raise RuntimeError("reward model crashed")

    broken_reward.__name__ = "vader_compound"
    vader = rewards_module.REWARDS["vader_compound"]
    monkeypatch.setitem(rewards_module.REWARDS, "vader_compound", replace(vader, build=lambda: broken_reward))
    c = Client(url, verbose=False)
    wait_until(lambda: all(r["status"] != "running" for r in c.predict(api_name="/list_runs")))
    bad = c.predict(json.dumps(SHORT), "s", api_name="/start_run")
    run = bad["run"]
    failed = wait_until(lambda: (d := poll(c, run)) and d["status"] == "failed" and d, timeout=60)
    assert "RuntimeError: reward model crashed" in failed["error"]
    monkeypatch.undo()
    # the next run starts and trains
    ok = c.predict(json.dumps(SHORT | {"max_steps": 2}), "s", api_name="/start_run")
    assert "run" in ok, ok
    done = wait_until(lambda: (d := poll(c, ok["run"])) and d["status"] == "finished" and d, timeout=120)
    assert [r["step"] for r in done["records"]] == [1, 2]


def test_invalid_config_is_refused_before_anything_starts(app):
    url, controller = app
    c = Client(url, verbose=False)
    before = sorted(p.name for p in __import__("pathlib").Path(controller.runner.runs_dir).iterdir())
    out = c.predict(json.dumps({"num_generations": 3, "generation_batch_size": 10}), "s", api_name="/start_run")
    assert "evenly divisible by num_generations" in out["error"]
    out = c.predict(json.dumps({"policy": "nobody/missing-model"}), "s", api_name="/start_run")
    assert "this server trains" in out["error"]
    after = sorted(p.name for p in __import__("pathlib").Path(controller.runner.runs_dir).iterdir())
    assert after == before

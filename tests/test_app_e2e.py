"""The web app end to end through its named API with ``gradio_client``: two sessions, a live run, rollouts
arithmetic, base-vs-trained comparison, stop, and a crash that leaves the server usable.

``python -m pytest tests/test_app_e2e.py`` (about a minute).
"""

import json

import pytest
from apputil import running_app, wait_until
from gradio_client import Client

from rloo_demo import rewards as rewards_module

SHORT = {"max_steps": 200, "prompts_per_step": 2, "num_generations": 4, "max_new_tokens": 8}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with running_app(tmp_path_factory.mktemp("runs")) as (url, controller):
        yield url, controller


def poll(client, run, since=0):
    return client.predict(run, since, api_name="/poll_metrics")


def test_two_sessions_live_run_rollouts_compare_stop(app):
    url, _ = app
    a, b = Client(url, verbose=False), Client(url, verbose=False)
    started = a.predict(json.dumps(SHORT), "session-a", api_name="/start_run")
    assert "run" in started, started
    run = started["run"]

    # a second Start while the first trains is refused clearly, naming the run in training
    busy = b.predict(json.dumps(SHORT), "session-b", api_name="/start_run")
    assert "busy" in busy["error"] and run in busy["error"]

    data = wait_until(lambda: (d := poll(a, run)) and len(d["records"]) >= 2 and d)
    assert data["status"] == "running"
    assert [r["step"] for r in data["records"]][:2] == [1, 2]
    assert {"reward", "kl", "loss", "entropy", "rewards/vader_compound/mean"} <= set(data["records"][0])
    newer = poll(a, run, since=data["records"][-1]["step"])
    assert all(r["step"] > data["records"][-1]["step"] for r in newer["records"])

    # rollouts of step 1: the baseline and advantage arithmetic holds for every completion
    ro = a.predict(run, 1, api_name="/get_rollouts")
    assert 1 in ro["steps"] and len(ro["groups"]) == SHORT["prompts_per_step"]
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
    assert len(cmp["base"]) == len(cmp["trained"]) == 3
    for s in cmp["base"] + cmp["trained"]:
        assert {"vader_compound", "sentiment_classifier"} <= set(s["scores"])
    again = b.predict(run, "This movie was", 3, 7, api_name="/compare")
    assert [s["text"] for s in again["base"]] == [s["text"] for s in cmp["base"]]  # same seed, same base samples

    # only the starting session may stop the run; the run is unharmed by the attempt
    denied = b.predict(run, "session-b", api_name="/stop_run")
    assert "only the browser session that started" in denied["message"]
    assert poll(a, run)["status"] == "running"
    a.predict(run, "session-a", api_name="/stop_run")
    final = wait_until(lambda: (d := poll(a, run)) and d["status"] in ("stopped", "finished") and d, timeout=60)
    steps = [r["step"] for r in final["records"]]
    assert final["status"] == "stopped" and steps == list(range(1, len(steps) + 1))

    runs = a.predict(api_name="/list_runs")
    assert runs[0]["name"] == run and runs[0]["has_model"]
    after = b.predict(run, "This movie was", 2, 7, api_name="/compare")  # a finished run on disk compares too
    assert len(after["trained"]) == 2

    # the Compare tab's held-out evaluation, on the stopped run
    _, controller = app
    result = controller.evaluate(run, num_prompts=8, samples_per_prompt=1, seed=0)
    assert (
        result["num_prompts"] == 8
        and result["difference_ci95"][0] <= result["difference"] <= result["difference_ci95"][1]
    )
    assert set(result["per_function"]) == {"vader_compound", "sentiment_classifier"}
    assert controller.runner.run(run).evaluation()["seed"] == 0


def test_crash_in_training_shows_and_server_stays_usable(app, monkeypatch):
    url, _ = app

    def broken_reward(prompts, completions, **kw):
        raise RuntimeError("reward model crashed")

    monkeypatch.setitem(rewards_module.REWARDS, "broken_reward", lambda: broken_reward)
    c = Client(url, verbose=False)
    wait_until(
        lambda: not c.predict(api_name="/list_runs") or c.predict(api_name="/list_runs")[0]["status"] != "running"
    )
    bad = c.predict(json.dumps(SHORT | {"rewards": ["broken_reward"]}), "s", api_name="/start_run")
    run = bad["run"]
    failed = wait_until(lambda: (d := poll(c, run)) and d["status"] == "failed" and d, timeout=60)
    assert "RuntimeError: reward model crashed" in failed["error"]
    # the next run starts and trains
    ok = c.predict(json.dumps(SHORT | {"max_steps": 2}), "s", api_name="/start_run")
    assert "run" in ok, ok
    done = wait_until(lambda: (d := poll(c, ok["run"])) and d["status"] == "finished" and d, timeout=120)
    assert [r["step"] for r in done["records"]] == [1, 2]


def test_invalid_config_is_refused_before_anything_starts(app):
    url, controller = app
    c = Client(url, verbose=False)
    before = len(controller.runner.runs())
    out = c.predict(json.dumps({"num_generations": 3, "generation_batch_size": 10}), "s", api_name="/start_run")
    assert "evenly divisible by num_generations" in out["error"]
    out = c.predict(json.dumps({"policy": "nobody/missing-model"}), "s", api_name="/start_run")
    assert "not in the local Hugging Face cache" in out["error"]
    assert len(controller.runner.runs()) == before

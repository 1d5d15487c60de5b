"""A public Space is hostile ground: every named endpoint and page event, called by an anonymous visitor with any
values, against the app as the image runs it (public mode, runs outside the working folder and /tmp).

Each hostile call must get a clear error, create nothing, and name no server path. The regression tests at the
end replay the rows of the first audit that an API caller can reach. ``python -m pytest tests/public/test_public.py``
(about two minutes).
"""

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from apputil import call_event, running_app, wait_until
from gradio_client import Client

from rloo_demo.i18n import t as translated
from rloo_demo.public.limits import PUBLIC
from rloo_demo.ui.forms import FIELD, FORM_FIELDS, defaults

SERVER_PATH = re.compile(r"(/(home|root|tmp|etc|work|var|usr|proc|srv)\b)|(\.rloo-demo-test-runs)")


# Public mode as shipped, but for the event budget: these tests send a hundred hostile values from one address, and
# the budget (tests/public/test_visitor_budget.py) would refuse most of them before the checks they are about.
LIMITS = replace(PUBLIC, event_ms_per_minute=None)


@pytest.fixture(scope="module")
def app(space_runs_dir):
    with running_app(space_runs_dir, limits=LIMITS) as (url, controller):
        client = Client(url, verbose=False)
        started = client.predict(json.dumps({"max_steps": 2, "prompts_per_step": 1}), "owner", api_name="/start_run")
        run = started["run"]
        wait_until(lambda: client.predict(run, 0, api_name="/poll_metrics")["status"] == "finished", timeout=180)
        yield url, controller, client, run


def listing(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*"))


def assert_clean_refusal(message, controller, before):
    assert isinstance(message, str) and message.strip(), message
    assert not SERVER_PATH.search(message), f"a server path in: {message}"
    assert controller.runner.runs_dir not in message
    assert listing(controller.runner.runs_dir) == before, "the refusal created or changed files"


HOSTILE_SETTINGS = [
    # (settings sent to /start_run, words the refusal must contain)
    ({"data_source": "/etc/passwd.jsonl", "text_column": "token"}, "takes prompts from"),
    ({"data_source": "../../secret.csv"}, "takes prompts from"),
    ({"data_source": "some/hub-dataset"}, "takes prompts from"),
    ({"policy": "/etc"}, "trains 'embedded:tiny-imdb-gpt2' only"),
    ({"policy": "./assets/tiny-imdb-gpt2"}, "trains 'embedded:tiny-imdb-gpt2' only"),
    ({"policy": "gpt2"}, "trains 'embedded:tiny-imdb-gpt2' only"),
    ({"rewards": ["classifier:/etc"]}, "is not available here"),
    ({"rewards": ["classifier:embedded:tiny-imdb-gpt2"]}, "is not available here"),
    ({"rewards": ["vader_compound", "os.system"]}, "is not available here"),
    ({"use_lora": True, "lora_r": 1_000_000}, "at most 64 as LoRA rank"),
    ({"use_lora": True, "lora_alpha": 10**9}, "at most 128 as LoRA alpha"),
    ({"prompts_per_step": 10**6}, "at most 8 prompts per step"),
    ({"generation_batch_size": 10**7, "num_generations": 4}, "at most 64 completions a step"),
    ({"prompt_words": 10**6}, "at most 64 prompt words"),
    ({"max_steps": 2000}, "at most 500 steps"),
    ({"num_generations": 16}, "at most 8 completions per prompt"),
    ({"max_new_tokens": 128}, "at most 64 new tokens"),
    ({"max_steps": True}, "must be a whole number, not True"),
    ({"max_steps": None}, "must be a whole number, not None"),
    ({"max_steps": 1.5}, "must be a whole number"),
    ({"max_steps": "10"}, "must be a whole number"),
    ({"seed": -1}, "between 0 and"),
    ({"seed": 2**40}, "between 0 and"),
    ({"reward_weights": ["a"]}, "list of finite numbers"),
    ({"reward_weights": [1, 2]}, "give one each"),
    ({"rewards": "vader_compound"}, "must be a list of texts"),
    ({"rewards": []}, "at least one"),
    ({"run_name": ".."}, "not starting with '.'"),
    ({"run_name": "y`<img src=\\\\host\\p.png>`"}, "A-Z a-z 0-9"),
    ({"run_name": "a/b"}, "A-Z a-z 0-9"),
    ({"run_name": "x" * 101}, "A-Z a-z 0-9"),
    ({"output_dir": "/var/tmp/elsewhere"}, "the server decides where runs are saved"),
    ({"report_to": "wandb"}, "allows none"),
    ({"bf16": True}, "fp32"),
    ({"num_gens": 4}, "unknown setting"),
    ({"use_lora": "yes"}, "must be true or false"),
    ({"prompt_template": "<script>alert(1)</script>"}, "unknown template"),
    ({"lora_target_modules": ["../../x"]}, "module names"),
    ({"temperature": 0}, "[0.01, 10]"),
    ({"top_p": 2}, "(0, 1]"),
    ({"policy": {"nested": "object"}}, "must be a text"),
    ({"max_new_tokens": [24]}, "must be a whole number"),
    ({"variance_every": 1}, "at most every 55 steps"),
    ({"variance_every": -5}, "0 (off) or a number of steps"),
    ({"variance_every": "often"}, "must be a whole number"),
    ({"estimator": "ppo"}, "unknown estimator"),
    ({"estimator": "grpo", "variance_every": 100}, "use it with estimator rloo or reinforce"),
    ({"rewards": ["module:examples/rewards.py:keyword_count"]}, "only a local server"),
    ({"rewards": ["module:/etc/passwd.py:x"]}, "only a local server"),
    ({"rewards": ["module:../../x.py:os.system"]}, "only a local server"),
    ({"use_vllm": True}, "generates with transformers"),
    ({"rewards": ["keyword:a b"]}, "letters or digits"),
    ({"rewards": ["length_target:1e9"]}, "from 1 to 256"),
    ({"system_prompt": "x" * 501}, "at most 500 characters"),
    ({"system_prompt": ["not", "text"]}, "must be a text or null"),
    ({"snapshot_every": 1}, "at most every 10 steps"),  # a 5 MB model save every step
    ({"snapshot_every": -25}, "must be 0 (no snapshots)"),
    ({"record_tokens": "no"}, "must be true or false"),
]
HOSTILE_TEXT = [
    ("[1, 2]", "must be a mapping"),
    ("null", "must be a mapping"),
    ("{", "not valid JSON"),
    ('{"beta": NaN}', "finite number"),
    ('{"temperature": Infinity}', "finite number"),
    ('{"learning_rate": -Infinity}', "finite number"),
    ("[" * 30_000, "characters long"),
]


@pytest.mark.parametrize(("settings", "needle"), HOSTILE_SETTINGS, ids=[str(i) for i in range(len(HOSTILE_SETTINGS))])
def test_hostile_settings_are_refused_clearly(app, settings, needle):
    url, controller, client, _ = app
    before = listing(controller.runner.runs_dir)
    out = client.predict(json.dumps(settings), "visitor", api_name="/start_run")
    assert "run" not in out, out
    assert needle in out["error"], out["error"]
    assert_clean_refusal(out["error"], controller, before)


@pytest.mark.parametrize(("text", "needle"), HOSTILE_TEXT, ids=[str(i) for i in range(len(HOSTILE_TEXT))])
def test_hostile_json_is_refused_clearly(app, text, needle):
    url, controller, client, _ = app
    before = listing(controller.runner.runs_dir)
    out = client.predict(text, "visitor", api_name="/start_run")
    assert "run" not in out and needle in out["error"], out
    assert_clean_refusal(out["error"], controller, before)


@pytest.mark.parametrize("client_id", ["", "x" * 1000])
def test_start_needs_a_sane_client_id(app, client_id):
    url, controller, client, _ = app
    before = listing(controller.runner.runs_dir)
    out = client.predict("{}", client_id, api_name="/start_run")
    assert "client id" in out["error"]
    assert_clean_refusal(out["error"], controller, before)


@pytest.mark.parametrize(
    ("endpoint", "args", "needle"),
    [
        ("/poll_metrics", ("..", 0), "no such run"),  # row 12: the parent of the runs folder
        ("/poll_metrics", ("../..", 0), "no such run"),
        ("/poll_metrics", ("nope", 0), "no run named 'nope'"),
        ("/compare", ("nope", "This movie was", 2, 0), "no run named 'nope'"),  # row 16: no server path
        ("/compare", ("..", "This movie was", 2, 0), "no such run"),
        ("/compare", ("RUN", "x" * 10_000, 2, 0), "at most 500"),
        ("/compare", ("RUN", "This movie was", 1000, 0), "between 1 and 8"),
        ("/compare", ("RUN", "This movie was", 0, 0), "between 1 and 8"),
        ("/compare", ("RUN", "This movie was", 2, -5), "seed must be between 0"),
        ("/compare", ("RUN", "", 2, 0), "type a prompt"),
        ("/get_rollouts", ("RUN", 10**12), "between"),
        ("/stop_run", ("..", "visitor"), "Nothing to stop"),  # a name that is no run: not echoed
        ("/stop_run", ("RUN", "visitor"), "is not training"),
    ],
)
def test_other_endpoints_refuse_clearly(app, endpoint, args, needle):
    url, controller, client, run = app
    args = tuple(run if a == "RUN" else a for a in args)
    before = listing(controller.runner.runs_dir)
    out = client.predict(*args, api_name=endpoint)
    message = out.get("error") or out.get("message")
    assert message and needle in message, out
    assert_clean_refusal(message, controller, before)


def test_reading_endpoints_of_unknown_runs_answer_empty(app):
    url, controller, client, run = app
    assert client.predict("..", 0, api_name="/get_rollouts")["groups"] == []
    assert client.predict("no-such-run", 1, api_name="/get_rollouts") == {
        "run": "no-such-run",
        "steps": [],
        "groups": [],
    }
    good = client.predict(run, 0, api_name="/get_rollouts")
    assert good["steps"] == [1, 2] and {g["step"] for g in good["groups"]} == {2}


def test_page_events_called_directly_with_hostile_values(app):
    """The page's own events are callable by anyone, with any values: they answer with a message, never crash."""
    url, controller, client, run = app
    before = listing(controller.runner.runs_dir)
    # a value outside the policy's choices (a public server offers no free policy box): the server refuses it by the
    # field's label (Start reads its values raw, so gradio's own check, an HTTP 500, never runs), naming no path
    odd = call_event(url, "train_start", ["visitor", *[(defaults() | {"policy": "/etc"})[f] for f in FORM_FIELDS]])
    assert odd[0] is None and "**Policy**: this server trains" in odd[2] and "/etc" not in odd[2]
    # a number above its limit: refused by the server, naming the field's label and the limit (not gradio's range
    # error, an HTTP 500 that names no field), and never clamped
    over = call_event(url, "train_start", ["visitor", *[(defaults() | {"max_steps": 10**9})[f] for f in FORM_FIELDS]])
    assert over[0] is None and "**Steps**: this server allows at most 500 steps, not 1000000000" in over[2]
    form = defaults() | {
        "policy": "embedded:tiny-imdb-gpt2",
        "data_source": "/etc/passwd.csv",
        "custom_classifier": "nobody/model",
        "learning_rate": 5.0,
        "seed": -1,
    }
    watched, drawn, error, *_ = call_event(url, "train_start", ["visitor", *[form[f] for f in FORM_FIELDS]])
    assert watched is None and "Not started" in error
    for field in ("data_source", "rewards", "learning_rate", "seed"):  # each named by its label on the page
        assert f"**{translated('en', FIELD[field].label)}**" in error, (field, error)
    assert not SERVER_PATH.search(error), error
    estimate = call_event(url, "train_estimate", [defaults()[f] for f in FORM_FIELDS])[0]
    assert "Estimated time" in estimate and "stops runs after 5:00" not in estimate  # the default run fits
    long = defaults() | {"max_steps": 500, "num_generations": 8, "prompts_per_step": 8, "max_new_tokens": 64}
    estimate = call_event(url, "train_estimate", [long[f] for f in FORM_FIELDS])[0]
    assert "This server stops runs after 5:00" in estimate
    # a page's watched run is server-side session state: a caller cannot name another run through it
    stop = call_event(url, "train_stop", ["visitor", run])[0]
    assert stop == "Nothing to stop."
    tick = call_event(url, "page_tick", ["visitor", "..", -1, 0.6, -1, True, None, "train"])
    assert tick[0] in (None, run)  # the watched run is session state: ".." never reaches the server's reads
    assert listing(controller.runner.runs_dir) == before


def test_uploads_are_refused(app):
    """Row 6: the app needs no upload, so anonymous uploads are refused whatever their size (403: the admission
    middleware answers before gradio reads one; tests/public/test_admission.py)."""
    url, *_ = app
    r = httpx.post(f"{url}gradio_api/upload", files={"files": ("x.bin", b"x" * 20_000)}, timeout=30)
    assert r.status_code == 403, r.status_code


def test_sampling_runs_one_job_at_a_time(app, monkeypatch):
    """Row 4: concurrent Compare calls from several clients never sample at the same time."""
    import threading
    import time

    from rloo_demo.server import inference as sampling  # where Compare looks the sampler up

    url, controller, client, run = app
    real, active, peak = sampling.sample, [0], [0]
    lock = threading.Lock()

    def slow_sample(*a, **k):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.3)
        try:
            return real(*a, **k)
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(sampling, "sample", slow_sample)
    results = []
    clients = [Client(url, verbose=False) for _ in range(3)]
    threads = [
        threading.Thread(target=lambda c=c: results.append(c.predict(run, "A film", 1, 0, api_name="/compare")))
        for c in clients
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 3 and all("trained" in r for r in results), results
    assert peak[0] == 1


def test_start_attempts_are_rate_limited_per_client(app):
    """Valid Start attempts (each resolves models and may make a run) are limited per client; a refused bad
    request costs nothing."""
    url, controller, client, _ = app
    controller.starts._calls.clear()  # the module's fixture started a run from this host
    settings = json.dumps({"max_steps": 100, "prompts_per_step": 1, "max_new_tokens": 4})
    out = [client.predict(settings, "rate", api_name="/start_run") for _ in range(PUBLIC.starts_per_minute + 2)]
    assert "run" in out[0], out[0]
    # the same visitor again while its run trains: refused, naming its run (one run a visitor at a time)
    assert all(
        "still training" in o["error"] and out[0]["run"] in o["error"] for o in out[1 : PUBLIC.starts_per_minute]
    )
    assert all("too many Start attempts" in o["error"] for o in out[PUBLIC.starts_per_minute :]), out
    client.predict(out[0]["run"], "rate", api_name="/stop_run")
    folder = Path(controller.runner.runs_dir) / out[0]["run"]
    wait_until(lambda: json.loads((folder / "status.json").read_text())["status"] != "running", timeout=60)
    wait_until(lambda: not controller.runner.active(), timeout=60)
    shutil.rmtree(folder)  # the module's run stays the newest, as the later tests that watch "the newest run" expect


def test_markup_in_a_refusal_is_inert(app):
    """Row 11: what a caller sends comes back escaped, never as markup another viewer's page would render."""
    url, controller, client, _ = app
    out = client.predict(json.dumps({"rewards": ["<img src=x onerror=alert(1)>"]}), "v", api_name="/start_run")
    assert "<img" not in out["error"] and "&lt;img" in out["error"]


def test_a_corrupt_run_breaks_no_page(app):
    """Row 14: one corrupt, non-UTF-8 or other-version run file: that run reads 'unreadable', every page still
    loads, and the run list still lists the others."""
    url, controller, client, run = app
    root = Path(controller.runner.runs_dir)
    for name, filename, content in (
        ("corrupt-status", "status.json", b"{half"),
        ("latin1-config", "config.yaml", "max_steps: 3 # caf\xe9\n".encode("latin-1")),
        ("newer-version", "config.yaml", b"max_steps: 3\nsetting_from_2027: true\n"),
    ):
        (root / name).mkdir()
        (root / name / "config.yaml").write_text("max_steps: 3\n")
        (root / name / "status.json").write_text('{"status": "finished", "created": 1}')
        (root / name / filename).write_bytes(content)
    try:
        listed = {r["name"]: r["status"] for r in client.predict(api_name="/list_runs")}
        assert listed[run] == "finished"
        for name in ("corrupt-status", "latin1-config", "newer-version"):
            assert listed[name].startswith("unreadable: "), listed
        assert call_event(url, "page_load", ["a-new-visitor"], session_hash="fresh")[0] == "a-new-visitor"
        table = call_event(url, "runs_refresh", [[], None], session_hash="fresh")[0]
        table = table.get("value", table) if table.get("__type__") == "update" else table  # headers come localized
        assert {row[0] for row in table["data"]} >= {run, "corrupt-status", "latin1-config", "newer-version"}
        poll = client.predict("newer-version", 0, api_name="/poll_metrics")
        assert poll["status"].startswith("unreadable: config.yaml") and poll["records"] == []
        assert client.predict("latin1-config", 0, api_name="/get_rollouts")["groups"] == []
    finally:
        for name in ("corrupt-status", "latin1-config", "newer-version"):
            import shutil

            shutil.rmtree(root / name)


def test_estimator_lab_events_called_with_hostile_values(app):
    """The arena views read files from the runs folder: only arena summaries, by a strict name, inertly."""
    url, controller, client, run = app
    before = listing(controller.runner.runs_dir)
    assert "No arena yet" in call_event(url, "runs_arena", [None])[0]
    for name in ("../../etc/passwd", "arena-20260101-000000", "<img src=x onerror=alert(1)>"):
        with pytest.raises(RuntimeError, match="not in the list of choices"):  # gradio refuses it first
            call_event(url, "runs_arena", [name])
    assert controller.arenas() == []
    with pytest.raises(RuntimeError, match="not in the list of choices"):
        call_event(url, "runs_arena_overlay", ["../x"])
    form = defaults() | {"variance_every": 1}
    watched, _, error, *_ = call_event(url, "train_start", ["visitor", *[form[f] for f in FORM_FIELDS]])
    assert watched is None and f"**{translated('en', FIELD['variance_every'].label)}**" in error and "55" in error
    assert_clean_refusal(error, controller, before)


def test_a_completion_clicked_as_the_rollouts_tab_moves_on_shows_the_clicked_one(app):
    """Following a live run, the Rollouts tab moves to each new step, whose prompt groups replace the group list's
    choices. A click on a completion sent just before that move names the step and group it was made on; it shows
    that completion's arithmetic, not an error. (The browser test met this: gradio refused the old group's label as
    "not in the list of choices" of the new step, and the click did nothing.)"""
    from rloo_demo.ui.views import group_label

    url, controller, client, run = app
    call_event(url, "page_load", [""], session_hash="race")
    watched = run  # what the session watches: its address started it (the module's run, from the API)
    steps = controller.rollout_steps(watched)
    first, later = steps[0], steps[1]  # 1 and 2: a fresh page's step slider goes up to 2
    clicked = group_label(controller.rollouts(watched, first)[0])
    assert clicked not in [group_label(g) for g in controller.rollouts(watched, later)]  # other prompts each step
    call_event(url, "pick_step", [None, later, None], session_hash="race")  # the tab moves on to the next step
    arithmetic, *_ = call_event(
        url,
        "rollouts_completion",
        [None, first, clicked, "delta"],
        session_hash="race",
        event_data={"index": [1, 0], "value": "x"},
    )
    assert "baseline = mean" in arithmetic and f"**Completion #2** of prompt 1 (step {first})" in arithmetic
    # the group list now takes any value from a client, so a made-up one must read as the step's first group
    _, _, arithmetic, whatif = call_event(url, "pick_group", [None, later, "<script>x</script>"], session_hash="race")
    assert "Select a row above" in arithmetic and "<script>" not in whatif and "prompt 1" in whatif


def test_token_and_probe_events_called_directly_with_hostile_values(app):
    """Issue #10's events (token view, colour, held-out prompts, probe) take any values from anyone: each answers
    with a message or a refusal, creates nothing, names no path, and shows a token's text only as text."""
    url, controller, client, run = app
    before = listing(controller.runner.runs_dir)
    # a session that never loaded the page watches nothing: naming a run in its state's slot does not help
    view, note = call_event(
        url, "rollouts_probe", ["visitor", run, "This movie was", 2, 0], session_hash="never-loaded"
    )
    assert view == "" and "pick a run first" in note
    # a session that loaded the page watches the newest run
    call_event(url, "page_load", [""], session_hash="tokens")
    probe = lambda *a: call_event(url, "rollouts_probe", ["visitor", run, *a], session_hash="tokens")  # noqa: E731
    for args, needle in [
        (("x" * 10_000, 2, 0), "at most 500"),
        (("   ", 2, 0), "pick a held-out prompt"),
        (("A film", 1.5, 0), "whole number"),
    ]:
        try:
            view, note = probe(*args)
        except RuntimeError as exc:  # gradio's own check of a slider's or a number box's range
            note = str(exc)
        assert needle in note or "maximum" in note or "minimum" in note, (args, note)
        assert not SERVER_PATH.search(note), note
    view, note = probe("A film", 1000, 0)  # past the slider: refused by its label, not by gradio's toast
    assert view == "" and "“K” must be between 1 and 8, not 1000" in note, note
    view, note = probe("<img src=x onerror=alert(1)>", 1, 0)  # a valid probe: base and final model
    assert "<img" not in view and "&lt;img" in view and "base policy" in view
    # the session watches the newest run, which an earlier test may have started after the fixture's run
    assert re.search(r"(final|latest) \(step \d+\)", view), view

    # the token view: no selection, or a selection of nothing, is the placeholder; a bad colour never renders
    def select(index, step=1):
        event = {"index": index, "value": "x"}
        return call_event(url, "rollouts_completion", ["..", step, None, "delta"], "tokens", event_data=event)

    arithmetic, *_ = select([0, 0], step=10**12)  # a step no run has: refused by the step box's label, no toast
    assert f"“{translated('en', 'rollouts.step')}” must be between" in arithmetic, arithmetic
    for index in (["<b>", 0], [10**9, 0], [-1, 0], [True, 0], "0", None, []):
        arithmetic, _, tokens_view, _ = select(index)  # outputs: arithmetic, the selection (state), tokens, note
        assert "Select a row above" in arithmetic and "Select a completion" in tokens_view, index
    arithmetic, _, tokens_view, note = select([0, 1])  # a real selection: the first completion of step 1
    assert "baseline = mean" in arithmetic and tokens_view.count("class='rloo-tok'") >= 1 and "Σ Δ log π" in note
    # the selection is the session's state: a fresh session has none, whatever it sends in that slot
    spans, note = call_event(
        url, "rollouts_token_measure", [{"name": run, "index": 0}, "k1"], session_hash="never-loaded"
    )
    assert "Select a completion" in spans
    spans, note = call_event(url, "rollouts_token_measure", [None, "k1"], session_hash="tokens")
    assert "data-measure='k1'" in spans and "Σ = " in note  # the session's own selection, recoloured
    with pytest.raises(RuntimeError, match="not in the list of choices"):
        call_event(url, "rollouts_token_measure", [None, "<script>"], session_hash="tokens")
    prompts = call_event(url, "rollouts_prompts", ["..", "<script>"], session_hash="tokens")
    assert prompts and "error" not in json.dumps(prompts).lower()
    assert listing(controller.runner.runs_dir) == before

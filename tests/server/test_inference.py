"""The inference service (Compare, the probe, Evaluate) on stand-ins for the runner, the reader and the models.

The sampling itself is tested against the embedded policy elsewhere (test_controller, test_snapshots); here every
model call is recorded, so each test can say which run's settings, which models, which prompt and which caller's
rate a job used, and what it answered, word for word. Live runs (the runner's ``get_active``) and finished runs
(its ``run``) take different paths through every method, and both are driven.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from rloo_demo.chat import prompt_text
from rloo_demo.config import RunConfig
from rloo_demo.errors import Busy, InputError, NotFound
from rloo_demo.eval.evaluation import heldout_prompts
from rloo_demo.public.gates import Caller, owner_digest
from rloo_demo.public.limits import Limits
from rloo_demo.server import inference as inference_mod
from rloo_demo.server.inference import Inference
from rloo_demo.task.data import as_run_prompt

CHAT = dict(prompt_template="chat", system_prompt="Answer as a film critic.")


class _Run:
    def __init__(self, path, config=None, model_dir=None, status=None, unreadable=None):
        self.path, self._config, self.model_dir = Path(path), config or RunConfig(), model_dir
        self._status, self._unreadable = status or {"status": "finished", "step": 3}, unreadable
        self.evaluations = []

    def config(self):
        return self._config

    def status(self):
        return dict(self._status)

    def unreadable(self):
        return self._unreadable

    def write_evaluation(self, result):
        self.evaluations.append(result)


class _Active:
    def __init__(self, run, config, snapshot="live-policy", step=7):
        self.run, self.config, self._snapshot, self._step = run, config, snapshot, step

    def policy_snapshot(self):
        return self._snapshot

    def latest_step(self):
        return self._step


class _Runner:
    def __init__(self, runs=(), actives=()):
        self.runs = {r.path.name: r for r in runs}
        self.actives = {a.run.path.name: a for a in actives}
        self.asked = []  # every name the service looked up, live or on disk

    def get_active(self, name):
        self.asked.append(("active", name))
        return self.actives.get(name)

    def active(self):
        return list(self.actives.values())

    def run(self, name):
        self.asked.append(("run", name))
        return self.runs[name]


class _Reader:
    def __init__(self, views):
        self.views, self.asked = views, []

    def view(self, name):
        self.asked.append(name)
        return self.views.get(name)


class _View:
    def __init__(self, config):
        self.config = config


def _service(runner, limits=None, reader=None):
    service = Inference(runner, limits or Limits(), reader or _Reader({}))
    loads = []

    def load(name):
        loads.append(name)
        return (f"model<{name}>", "tok")

    service._load = load
    gates = []

    @contextlib.contextmanager
    def sampling(who):
        gates.append(who)
        yield

    sampling.pace = lambda: gates.append("pace")  # a long job's pacing (SamplingGate.pace)
    service.sampling = sampling
    return service, loads, gates


# ------------------------------------------------------------------ held-out choices


def test_heldout_choices_are_the_user_turns_of_the_named_runs_own_prompts():
    chat = RunConfig(prompt_words=3, **CHAT)
    reader = _Reader({"chatty": _View(chat), "blank": _View(None)})
    service, _, _ = _service(_Runner(), reader=reader)
    mine = service.heldout_choices("chatty")
    expected = [prompt_text(p) for p in heldout_prompts(chat, 40)]
    assert len(expected) == 40 and mine == expected and reader.asked == ["chatty"]
    assert all(isinstance(p, list) for p in heldout_prompts(chat, 2))  # a chat's prompts are messages: text shown
    default = [prompt_text(p) for p in heldout_prompts(RunConfig(), 40)]
    assert default != mine  # three words a prompt, not the default eight
    # a run the reader does not know, or one without a readable config, offers the default run's prompts
    assert service.heldout_choices("gone") == default and service.heldout_choices("blank") == default
    assert service.heldout_choices("chatty", limit=5) == expected[:5]
    assert len(heldout_prompts(chat, 41)) == 41  # so the default limit of 40 is what cuts the list


def test_heldout_choices_of_a_run_whose_data_cannot_be_read_are_empty(tmp_path):
    lost = RunConfig(data_source=str(tmp_path / "gone.csv"))
    service, _, _ = _service(_Runner(), reader=_Reader({"lost": _View(lost)}))
    assert service.heldout_choices("lost") == []


# ------------------------------------------------------------------ which models a job samples


@pytest.mark.parametrize("name", [None, "", 5, ["a"]])
def test_a_job_without_a_run_name_is_refused_before_any_lookup(name):
    runner = _Runner()
    service, loads, gates = _service(runner)
    with pytest.raises(InputError) as e:
        service._check_comparable(name)
    assert str(e.value) == "pick a run first (train one on the Train tab)"
    with pytest.raises(InputError) as e:
        service.probe(name, "a prompt", 2, 1, Caller(host="10.0.0.1"))
    assert str(e.value) == "pick a run first (train one on the Train tab)"
    assert runner.asked == [] and loads == [] and gates == []


def test_a_finished_run_without_a_model_is_not_comparable_and_says_its_status(tmp_path):
    crashed = _Run(tmp_path / "crashed", status={"status": "failed"})
    live = _Active(_Run(tmp_path / "live"), RunConfig())
    runner = _Runner(runs=[crashed], actives=[live])
    service, _, _ = _service(runner)
    with pytest.raises(NotFound) as e:
        service._check_comparable("crashed")
    assert str(e.value) == "run 'crashed' has no trained model (status: failed)"
    assert runner.asked == [("active", "crashed"), ("run", "crashed")]
    runner.asked.clear()
    service._check_comparable("live")  # a live run has no model folder yet, and is comparable
    assert runner.asked == [("active", "live")]
    with pytest.raises(NotFound) as e:
        service.models_for("crashed")
    assert str(e.value) == "run 'crashed' has no trained model (status: failed)"


def test_a_live_run_lends_a_copy_of_its_policy_and_its_own_settings(tmp_path):
    config = RunConfig(policy="embedded:tiny-imdb-gpt2", seed=9, **CHAT)
    live = _Active(_Run(tmp_path / "live", config=RunConfig(seed=1)), config, snapshot="copy-at-step-7")
    runner = _Runner(actives=[live])
    service, loads, _ = _service(runner)
    assert service.models_for("live") == ("model<embedded:tiny-imdb-gpt2>", "copy-at-step-7", "tok", config)
    assert loads == ["embedded:tiny-imdb-gpt2"] and runner.asked == [("active", "live")]


def test_a_live_run_without_a_policy_yet_is_busy_not_missing(tmp_path):
    live = _Active(_Run(tmp_path / "live"), RunConfig(), snapshot=None)
    service, _, _ = _service(_Runner(actives=[live]))
    with pytest.raises(Busy) as e:
        service.models_for("live")
    assert str(e.value) == (
        "this run's policy is not available yet (it is loading, or it trains in a subprocess); "
        "compare again once it has a first step, or when it ends"
    )


def test_a_finished_run_gives_its_base_and_its_saved_model(tmp_path):
    config = RunConfig(policy="embedded:tiny-imdb-gpt2", seed=5)
    done = _Run(tmp_path / "done", config=config, model_dir=tmp_path / "done" / "model")
    unreadable = _Run(tmp_path / "broken", unreadable="config.json is not JSON", model_dir=tmp_path / "m")
    service, loads, _ = _service(_Runner(runs=[done, unreadable]))
    model = str(tmp_path / "done" / "model")
    assert service.models_for("done") == ("model<embedded:tiny-imdb-gpt2>", f"model<{model}>", "tok", config)
    assert loads == ["embedded:tiny-imdb-gpt2", model]
    with pytest.raises(NotFound) as e:
        service.models_for("broken")
    assert str(e.value) == "run 'broken' is unreadable: config.json is not JSON"


# ------------------------------------------------------------------ fitting a prompt


def _record_fit(monkeypatch, dropped=0, had=0, context=0):
    seen = []

    def fit(model, prompt, max_new_tokens, render):
        seen.append((model, prompt, max_new_tokens, render("hello")))
        return (prompt[-4:] if dropped else prompt), dropped, had, context

    monkeypatch.setattr(inference_mod, "fit_prompt", fit)
    monkeypatch.setattr(inference_mod, "resolve_model", lambda name: f"folder<{name}>")
    return seen


def test_a_prompt_is_fitted_to_the_live_or_saved_runs_own_policy_and_template(tmp_path, monkeypatch):
    chat = RunConfig(policy="embedded:tiny-imdb-gpt2", **CHAT)
    plain = RunConfig(policy="embedded:tiny-imdb-gpt2")
    live = _Active(_Run(tmp_path / "live", config=plain), chat)
    done = _Run(tmp_path / "done", config=plain)
    seen = _record_fit(monkeypatch)
    service, _, _ = _service(_Runner(runs=[done], actives=[live]))
    assert service._fit("live", "a prompt", 12) == ("a prompt", {})
    assert service._fit("done", "b prompt", 3) == ("b prompt", {})
    assert seen == [
        ("folder<embedded:tiny-imdb-gpt2>", "a prompt", 12, as_run_prompt(chat, "hello")),
        ("folder<embedded:tiny-imdb-gpt2>", "b prompt", 3, as_run_prompt(plain, "hello")),
    ]
    assert as_run_prompt(chat, "hello") != as_run_prompt(plain, "hello")  # the render is the run's own


def test_a_cut_prompt_says_how_many_tokens_it_lost(tmp_path, monkeypatch):
    _record_fit(monkeypatch, dropped=1234, had=2048, context=1024)
    service, _, _ = _service(_Runner(runs=[_Run(tmp_path / "done")]))
    fitted, cut = service._fit("done", "a long prompt", 16)
    assert fitted == "ompt"
    assert cut == {
        "prompt_cut": {"dropped": 1234, "tokens": 2048, "context": 1024},
        "prompt_note": "the prompt was 2,048 tokens long and this policy reads 1,024 tokens, 16 of them for the "
        "completion: its first 1,234 tokens were dropped",
    }


# ------------------------------------------------------------------ Compare


def _fake_sampling(monkeypatch):
    """sample, the scorer and the judges recorded: each model's texts carry its name, so a swapped column shows."""
    calls = {"sample": [], "scorer": [], "perplexity": [], "collapse": []}

    def sample(model, tok, asked, n, max_new, temperature, top_p, seed):
        calls["sample"].append((model, tok, asked, n, max_new, temperature, top_p, seed))
        return [{"text": f"{model}#{i}", "token_ids": [i, i + 1]} for i in range(n)]

    class Scorer:
        def __init__(self, config):
            self.trained = type("T", (), {"names": [f"reward-of-seed-{config.seed}"]})()

        def __call__(self, prompts, texts):
            calls["scorer"].append((list(prompts), list(texts)))
            rewards = [float(len(t)) + i / 10 for i, t in enumerate(texts)]
            return {"length": [r * 2 for r in rewards], "other": [-r for r in rewards]}, rewards

    monkeypatch.setattr(inference_mod, "sample", sample)
    monkeypatch.setattr(inference_mod, "Scorer", Scorer)
    monkeypatch.setattr(inference_mod, "judge_texts", lambda texts: {"first": texts[0]})

    def perplexity(base, tok, asked, ids):
        calls["perplexity"].append((base, list(asked), [list(i) for i in ids]))
        return 2.5

    monkeypatch.setattr(inference_mod, "base_perplexity", perplexity)

    def collapse(trained, base):
        calls["collapse"].append((trained, base))
        return f"trained {trained['first']} vs base {base['first']}"

    monkeypatch.setattr(inference_mod, "collapse_warning", collapse)
    return calls


def test_compare_samples_both_models_with_the_callers_seed_and_keeps_each_in_its_column(tmp_path, monkeypatch):
    config = RunConfig(policy="embedded:tiny-imdb-gpt2", seed=11, **CHAT)
    done = _Run(tmp_path / "done", config=config, model_dir=tmp_path / "done" / "model")
    _record_fit(monkeypatch)
    calls = _fake_sampling(monkeypatch)
    service, _, gates = _service(_Runner(runs=[done]))
    out = service.compare("done", "The film", 2, 5, 0.7, 0.9, 123, Caller(client_id="c1", host="10.0.0.2"))
    trained = f"model<{tmp_path / 'done' / 'model'}>"
    base = "model<embedded:tiny-imdb-gpt2>"
    asked = as_run_prompt(config, "The film")
    assert gates == ["10.0.0.2"]  # the rate is the caller's address, not its client id
    assert calls["sample"] == [(base, "tok", asked, 2, 5, 0.7, 0.9, 123), (trained, "tok", asked, 2, 5, 0.7, 0.9, 123)]
    assert calls["scorer"] == [
        (["The film"] * 2, [f"{base}#0", f"{base}#1"]),
        (["The film"] * 2, [f"{trained}#0", f"{trained}#1"]),
    ]
    assert calls["perplexity"] == [(base, [asked] * 2, [[0, 1], [1, 2]])] * 2  # both judged by the base model

    def column(model):
        rewards = [float(len(f"{model}#0")), float(len(f"{model}#1")) + 0.1]
        return [
            {"text": f"{model}#{i}", "reward": r, "scores": {"length": r * 2, "other": -r}}
            for i, r in enumerate(rewards)
        ]

    judges = {
        "base": {"first": f"{base}#0", "base_perplexity": 2.5},
        "trained": {"first": f"{trained}#0", "base_perplexity": 2.5},
    }
    assert out == {
        "run": "done",
        "prompt": "The film",
        "seed": 123,
        "trained_on": ["reward-of-seed-11"],
        "base": column(base),
        "trained": column(trained),
        "judges": judges,
        "collapse_warning": f"trained {trained}#0 vs base {base}#0",
    }
    assert calls["collapse"] == [(judges["trained"], judges["base"])]


def test_compare_of_a_cut_prompt_samples_the_cut_text_and_says_so(tmp_path, monkeypatch):
    done = _Run(tmp_path / "done", model_dir=tmp_path / "m")
    _record_fit(monkeypatch, dropped=3, had=10, context=9)
    calls = _fake_sampling(monkeypatch)
    service, _, gates = _service(_Runner(runs=[done]))
    out = service.compare("done", "one two three", 1, 4, 1.0, 1.0, 0, Caller(client_id="only-an-id"))
    assert out["prompt"] == "hree" and out["prompt_cut"] == {"dropped": 3, "tokens": 10, "context": 9}
    assert calls["sample"][0][2] == "hree" and calls["scorer"][0][0] == ["hree"]
    assert gates == ["only-an-id"]


def test_a_compare_refused_by_its_checks_never_reaches_the_gate(tmp_path, monkeypatch):
    calls = _fake_sampling(monkeypatch)
    service, loads, gates = _service(_Runner(runs=[_Run(tmp_path / "failed", status={"status": "failed"})]))
    with pytest.raises(NotFound):
        service.compare("failed", "The film", 1, 4, 1.0, 1.0, 0, Caller(host="h"))
    with pytest.raises(InputError):
        service.compare("failed", "   ", 1, 4, 1.0, 1.0, 0, Caller(host="h"))
    assert gates == [] and loads == [] and calls["sample"] == []


# ------------------------------------------------------------------ the probe


def _fake_probe(monkeypatch, kept):
    seen = {}

    def probe(policies, tok, prompt, n, max_new, seed, scorer, temperature, top_p, asked):
        seen.update(
            labels=[(s, label) for s, label, _ in policies],
            loaded=[load() for _, _, load in policies],
            tok=tok,
            prompt=prompt,
            n=n,
            max_new=max_new,
            seed=seed,
            temperature=temperature,
            top_p=top_p,
            asked=asked,
            scorer=scorer,
        )
        return [{"step": s} for s, _, _ in policies]

    monkeypatch.setattr(inference_mod.snapshots, "probe", probe)
    monkeypatch.setattr(inference_mod.snapshots, "list_snapshots", lambda path: [(s, path / f"snap-{s}") for s in kept])
    monkeypatch.setattr(inference_mod.snapshots, "load_snapshot", lambda folder, policy: f"{folder.name}<{policy}>")
    monkeypatch.setattr(inference_mod, "Scorer", lambda config: f"scorer-of-seed-{config.seed}")
    return seen


def test_the_probe_of_a_live_run_samples_base_each_snapshot_and_the_policy_in_training(tmp_path, monkeypatch):
    config = RunConfig(
        policy="embedded:tiny-imdb-gpt2",
        max_new_tokens=50,
        temperature=0.8,
        top_p=0.95,
        seed=4,
        snapshot_every=5,
        **CHAT,
    )
    live = _Active(_Run(tmp_path / "live", config=RunConfig(max_new_tokens=7)), config, "now-copy", step=12)
    fits = _record_fit(monkeypatch)
    seen = _fake_probe(monkeypatch, kept=[5, 10])
    service, loads, gates = _service(_Runner(actives=[live]), limits=Limits(max_compare_tokens=32))
    out = service.probe("live", "The plot", 3, 77, Caller(host="10.0.0.3"))
    assert gates == ["10.0.0.3"] and loads == ["embedded:tiny-imdb-gpt2"]
    assert [f[2] for f in fits] == [32]  # fitted for the live run's own tokens (50), cut to the server's 32
    assert seen["labels"] == [
        (0, "base policy (step 0)"),
        (5, "step 5"),
        (10, "step 10"),
        (12, "now (step 12, training)"),
    ]
    policy = "embedded:tiny-imdb-gpt2"
    assert seen["loaded"] == [f"model<{policy}>", f"snap-5<{policy}>", f"snap-10<{policy}>", "now-copy"]
    assert (seen["prompt"], seen["n"], seen["max_new"], seen["seed"]) == ("The plot", 3, 32, 77)
    assert (seen["temperature"], seen["top_p"], seen["tok"]) == (0.8, 0.95, "tok")
    assert seen["asked"] == as_run_prompt(config, "The plot") and seen["scorer"] == "scorer-of-seed-4"
    assert out == {
        "run": "live",
        "prompt": "The plot",
        "seed": 77,
        "num_samples": 3,
        "max_new_tokens": 32,
        "snapshot_every": 5,
        "kept": inference_mod.snapshots.KEEP_SNAPSHOTS,
        "steps": [{"step": 0}, {"step": 5}, {"step": 10}, {"step": 12}],
    }


def test_the_probe_of_a_finished_run_ends_with_its_saved_model_once(tmp_path, monkeypatch):
    config = RunConfig(policy="embedded:tiny-imdb-gpt2", max_new_tokens=6, snapshot_every=2)
    model = tmp_path / "done" / "model"
    done = _Run(tmp_path / "done", config=config, model_dir=model, status={"status": "finished", "step": 4})
    at_end = _Run(tmp_path / "end", config=config, model_dir=model, status={"status": "finished", "step": 2})
    _record_fit(monkeypatch)
    seen = _fake_probe(monkeypatch, kept=[2])
    service, _, _ = _service(_Runner(runs=[done, at_end]))
    out = service.probe("done", "x", 1, 0, Caller(host="h"))
    assert seen["labels"] == [(0, "base policy (step 0)"), (2, "step 2"), (4, "final (step 4)")]
    assert seen["loaded"][-1] == f"model<{model}>" and out["max_new_tokens"] == 6
    service.probe("end", "x", 1, 0, Caller(host="h"))  # its last step has a snapshot already: not twice
    assert seen["labels"] == [(0, "base policy (step 0)"), (2, "step 2")]


def test_the_probe_refuses_an_unreadable_run_and_passes_on_a_cut(tmp_path, monkeypatch):
    broken = _Run(tmp_path / "broken", unreadable="status.json is empty")
    done = _Run(tmp_path / "done", config=RunConfig(max_new_tokens=20))
    fits = _record_fit(monkeypatch, dropped=2, had=5, context=4)
    _fake_probe(monkeypatch, kept=[])
    service, _, gates = _service(_Runner(runs=[broken, done]), limits=Limits(max_compare_tokens=9))
    with pytest.raises(NotFound) as e:
        service.probe("broken", "x", 1, 0, Caller(host="h"))
    assert str(e.value) == "run 'broken' is unreadable: status.json is empty" and gates == []
    out = service.probe("done", "a long prompt", 1, 0, Caller(host="h"))
    assert fits[-1][2] == 9  # fitted for the tokens the probe will sample: the run's, at most the server's cap
    assert out["prompt"] == "ompt" and out["prompt_cut"] == {"dropped": 2, "tokens": 5, "context": 4}


@pytest.mark.parametrize(
    ("step", "label"),
    [(6, "final (step 6)"), (True, "final (step 0)"), ("6", "final (step 0)"), (None, "final (step 0)")],
)
def test_the_latest_policy_of_a_saved_run_is_its_model_at_its_recorded_step(tmp_path, step, label):
    run = _Run(tmp_path / "done", model_dir=tmp_path / "done" / "model", status={"status": "finished", "step": step})
    service, loads, _ = _service(_Runner(runs=[run]))
    number, text, load = service._latest_policy(None, run)
    assert (number, text) == (int(label.split()[-1][:-1]), label) and loads == []
    assert load() == f"model<{tmp_path / 'done' / 'model'}>"
    assert service._latest_policy(None, _Run(tmp_path / "none")) is None  # no saved model: nothing to end with
    assert service._latest_policy(_Active(run, RunConfig(), snapshot=None), run) is None  # loading: not yet


# ------------------------------------------------------------------ Evaluate


def _fake_evaluate(monkeypatch):
    seen = []

    def evaluate(base, trained, tok, config, prompts, samples_per_prompt, seed, progress=None):
        seen.append((base, trained, tok, config.seed, list(prompts), samples_per_prompt, seed, progress))
        return {"reward": {"base": 0.1, "trained": 0.9}}

    monkeypatch.setattr(inference_mod, "evaluate", evaluate)
    monkeypatch.setattr(inference_mod, "heldout_prompts", lambda config, n: [f"p{i}-{config.seed}" for i in range(n)])
    return seen


def test_evaluate_is_saved_only_for_the_runs_starter_on_a_public_server(tmp_path, monkeypatch):
    seen = _fake_evaluate(monkeypatch)
    config = RunConfig(seed=3)
    mine = _Run(
        tmp_path / "mine",
        config=config,
        model_dir=tmp_path / "m",
        status={"status": "finished", "owner": owner_digest("starter")},
    )
    service, _, gates = _service(_Runner(runs=[mine]), limits=Limits(public=True))
    told = []
    result = service.evaluate("mine", 2, 8, Caller(client_id="starter", host="10.0.0.4"), lambda *a: told.append(a), 3)
    assert result == {"reward": {"base": 0.1, "trained": 0.9}, "saved": True} and mine.evaluations == [result]
    ((*args, paced),) = seen
    assert args == ["model<embedded:tiny-imdb-gpt2>", f"model<{tmp_path / 'm'}>", "tok", 3, ["p0-3", "p1-3"], 3, 8]
    assert gates == ["10.0.0.4"]
    paced(1, 4)  # the progress evaluate is handed: the gate paces the job, then the page is told
    assert gates == ["10.0.0.4", "pace"] and told == [(1, 4)]
    other = service.evaluate("mine", 1, 0, Caller(client_id="someone-else", host="10.0.0.5"))
    assert other["saved"] is False and len(mine.evaluations) == 1
    anonymous = service.evaluate("mine", 1, 0, Caller(client_id="", host="10.0.0.6"))
    assert anonymous["saved"] is False and len(mine.evaluations) == 1


def test_evaluate_on_a_local_server_saves_for_anyone_but_never_while_the_run_trains(tmp_path, monkeypatch):
    seen = _fake_evaluate(monkeypatch)
    done = _Run(tmp_path / "done", model_dir=tmp_path / "m", status={"status": "finished", "owner": "x"})
    live = _Active(_Run(tmp_path / "live"), RunConfig())
    service, _, _ = _service(_Runner(runs=[done], actives=[live]))
    assert service.evaluate("done", 1, 0, Caller())["saved"] is True and len(done.evaluations) == 1
    assert seen[-1][5] == 1  # one sample a prompt unless asked for more
    assert service.evaluate("live", 1, 0, Caller())["saved"] is False and live.run.evaluations == []


@pytest.mark.parametrize(("cache", "size"), [(0, 1), (1, 1), (3, 3)])
def test_the_model_cache_holds_what_the_server_allows_and_at_least_one(cache, size):
    service = Inference(_Runner(), Limits(model_cache=cache), _Reader({}))
    assert service._models.size == size


def test_the_sampling_gate_knows_whether_a_run_trains_now(tmp_path):
    runner = _Runner()
    service = Inference(runner, Limits(), _Reader({}))
    assert service.sampling.training() is False
    runner.actives["live"] = _Active(_Run(tmp_path / "live"), RunConfig())
    assert service.sampling.training() is True

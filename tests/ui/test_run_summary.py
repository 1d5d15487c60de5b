"""The end of a run and its warnings: a summary (reward, length, KL and the judges, first steps
-> last steps) on the Train tab and in the run's folder as summary.json, and the warnings as a callout with the step
each fired at, marked on the reward and KL plots.

``python -m pytest tests/ui/test_run_summary.py`` (a few seconds).
"""

import json

from factories import records, written_run

from rloo_demo import i18n
from rloo_demo.config import RunConfig
from rloo_demo.eval.judges import DISTINCT_2_MIN, REPETITION_MAX
from rloo_demo.public.limits import LOCAL
from rloo_demo.server.runner import Runner
from rloo_demo.store.summary import WINDOW, summarize
from rloo_demo.ui.controller import Controller
from rloo_demo.ui.views.train import alerts_html, run_alerts, summary_markdown


def test_the_summary_is_the_mean_of_the_first_and_last_steps_from_metrics_jsonl(tmp_path):
    metrics = records(20)
    run = written_run(tmp_path, metrics)
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        summary, alerts = controller.run_summary("ended")
    finally:
        controller.close()
    first, last = metrics[:WINDOW], metrics[-WINDOW:]
    mean = lambda rows, key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    assert summary["steps"] == 20 and alerts == []
    for name, key in (("reward", "reward"), ("length", "completions/mean_length"), ("kl", "kl")):
        assert abs(summary[name]["first"] - mean(first, key)) < 1e-9
        assert abs(summary[name]["last"] - mean(last, key)) < 1e-9
    saved = json.loads((run.path / "summary.json").read_text(encoding="utf-8"))  # written into the run's folder
    assert saved["reward"] == summary["reward"] and saved["alerts"] == []
    shown = summary_markdown(summary, alerts, "ru")
    assert f"{mean(first, 'reward'):+.3f} → {mean(last, 'reward'):+.3f}" in shown
    assert i18n.t("ru", "summary.no_alerts") in shown


def test_a_collapse_is_a_callout_with_the_step_it_fired_at_and_a_marker_on_the_plots(tmp_path):
    metrics = records(30, collapse_from=21)
    alerts = run_alerts(metrics, "ru")
    # the live warning averages the latest 5 steps: the first step whose window crosses a judge's threshold
    window = lambda key, i: sum(r[key] for r in metrics[max(0, i - 4) : i + 1]) / len(metrics[max(0, i - 4) : i + 1])  # noqa: E731
    fired = next(
        metrics[i]["step"]
        for i in range(len(metrics))
        if window("judges/distinct_2", i) < DISTINCT_2_MIN or window("judges/repetition", i) > REPETITION_MAX
    )
    assert fired == 24  # 4 of the 5 latest steps collapsed: repetition (0.05 + 4 x 0.8) / 5 = 0.65 > 0.5
    assert [a["kind"] for a in alerts] == ["collapse"] and alerts[0]["step"] == fired
    html = alerts_html(alerts, "ru")
    assert 'role="alert"' in html and "⚠" in html and i18n.t("ru", "alert.collapse_title") in html
    assert i18n.t("ru", "alert.at_step", step=fired) in html

    from rloo_demo.ui.tabs.train import figures

    reward, kl = (json.loads(f.plot) for f in figures(metrics, 0.0, "ru")[:2])
    for fig in (reward, kl):
        assert [s["x0"] for s in fig["layout"]["shapes"]] == [fired]
        assert any(i18n.t("ru", "alert.collapse_title") in a["text"] for a in fig["layout"]["annotations"])

    run = written_run(tmp_path, metrics, status="stopped")
    controller = Controller(Runner(str(tmp_path), limits=LOCAL, watchdog=False))
    try:
        summary, _ = controller.run_summary(run.name, "ru")
    finally:
        controller.close()
    assert summary["alerts"] == [{"kind": "collapse", "step": fired}]
    assert summary["distinct_2"]["last"] == 0.1


def test_groups_with_no_signal_raise_their_own_alert():
    metrics = [{"step": s, "reward": 0.0, "frac_reward_zero_std": 0.75} for s in range(1, 8)]
    alerts = run_alerts(metrics)
    assert [(a["kind"], a["step"]) for a in alerts] == [("no_signal", 1)]
    assert "75%" in alerts[0]["text"]


def test_summarize_skips_what_a_run_never_logged():
    summary = summarize([{"step": 1, "reward": 0.2}, {"step": 2, "reward": float("nan")}])
    assert summary == {"steps": 2, "window": WINDOW, "reward": {"first": 0.2, "last": 0.2}}


def test_the_summary_file_is_written_indented_and_read_back_and_anything_else_reads_as_none(tmp_path):
    from rloo_demo.store.summary import SUMMARY_FILE, read_summary, write_summary

    summary = summarize(records(8))
    write_summary(tmp_path, summary)
    assert (tmp_path / SUMMARY_FILE).read_text(encoding="utf-8") == json.dumps(summary, indent=2) + "\n"
    assert read_summary(tmp_path) == summary
    assert read_summary(tmp_path / "nowhere") is None
    for text in ("[1, 2]", "{torn", '"a text"'):
        (tmp_path / SUMMARY_FILE).write_text(text, encoding="utf-8")
        assert read_summary(tmp_path) is None, text
    (tmp_path / SUMMARY_FILE).write_text('{"note": "é"}', encoding="utf-8")
    assert read_summary(tmp_path) == {"note": "é"}  # read as UTF-8, whatever the locale


def test_a_run_with_no_steps_summarizes_to_zero_steps():
    assert summarize([]) == {"steps": 0, "window": WINDOW}
    assert summarize([{"reward": 1.0}]) == {"steps": 0, "window": WINDOW, "reward": {"first": 1.0, "last": 1.0}}


GAPS = [1, 2, 5, 9]  # a run that logged only these steps (lines it could not write, a logging interval)


def test_every_step_count_of_a_run_with_gaps_is_its_last_step_not_its_number_of_records(tmp_path):
    """Four records, the last at step 9: the end-of-run summary, the Runs table's summary, the Train tab's status
    line and the slot's progress (the "busy training" message) all say 9, where a count of records says 4."""
    from types import SimpleNamespace

    from rloo_demo.engine.callbacks import MetricsChannel
    from rloo_demo.server.runner import ActiveRun
    from rloo_demo.ui.views.train import status_line

    rows = [{"step": s, "reward": 0.1 * s, "max_steps": 12, "time": 2.0 * s} for s in GAPS]
    assert summarize(rows)["steps"] == 9
    run = written_run(tmp_path, rows)
    assert run.summary()["steps"] == 9
    line = status_line("running", rows, 12, 20.0, "ended", None, "en")
    assert i18n.t("en", "status.step", step=9, max_steps=12) in line
    channel = MetricsChannel()
    for row in rows:
        channel.publish(row)
    job = SimpleNamespace(state=SimpleNamespace(channel=channel, config=RunConfig(max_steps=12)))
    assert Runner.progress(ActiveRun(job, "owner", 0.0)) == (9, 12)

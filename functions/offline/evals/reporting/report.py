"""The self-contained HTML report of a run (plots inlined, no external URL) and the side-by-side of two runs."""

from __future__ import annotations

import json
from dataclasses import dataclass

from jinja2 import Environment, select_autoescape

from functions.offline.evals.reporting import plots
from functions.offline.evals.results import EvalRun, HistoryEntry
from functions.offline.evals.suite import Metric

# Cases shown per suite (failed ones first); the JSON keeps them all.
MAX_CASES = 200
LOCAL_JUDGE_NOTE = (
    "Local deployment: every pool is SmolLM2-135M and the default judge is the local flagship pool, i.e. SmolLM2 too. "
    "Its grades are noise: judged scores here test the mechanism (judge calls, parsing, calibration, the gate), not "
    "answer quality. Only a deployed run with a real judge measures quality."
)

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1em}
td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}
th{background:#f3f3f3}.pass{color:#1e8449;font-weight:600}.fail{color:#c0392b;font-weight:600}
.note{background:#fff8e1;border-left:4px solid #f1c40f;padding:.5em 1em;margin:1em 0}
.err{background:#fdecea;border-left:4px solid #c0392b;padding:.5em 1em}code{font-size:12px}
img{max-width:100%}details{margin:.5em 0}
"""

_RUN_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fleetchat eval {{ run.run_id }}</title>
<style>{{ style }}</style></head><body>
<h1>Eval run {{ run.run_id }}
{% if run.gate %}<span class="{{ 'pass' if run.gate.passed else 'fail' }}">
{{ 'PASSED' if run.gate.passed else 'FAILED' }}</span>{% endif %}</h1>
<p>{{ run.started_at.isoformat() }} → {{ run.finished_at.isoformat() if run.finished_at else '?' }} ·
target <code>{{ run.base_url }}</code> · options <code>{{ options }}</code></p>
{% if run.local %}<div class="note">{{ local_note }}</div>{% endif %}
<h2>Model versions</h2>
<table><tr><th>pool</th><th>model version</th></tr>
{% for pool, version in run.model_versions.items() %}<tr><td>{{ pool }}</td><td><code>{{ version }}</code></td></tr>
{% endfor %}</table>
<h2>Gate</h2>
{% if run.gate %}<p>Baseline: {{ run.gate.baseline_run_id or 'none for these model versions (thresholds only)' }};
{{ run.gate.compared }} metrics compared with it.</p>
{% if run.gate.findings %}<ul>{% for f in run.gate.findings %}<li class="fail">[{{ f.kind }}] {{ f.message }}</li>
{% endfor %}</ul>{% else %}<p class="pass">No threshold broken, no regression, no suite error.</p>{% endif %}
{% endif %}
{% for s in suites %}
<h2>Suite {{ s.result.suite }} <small>({{ '%.1f' % s.result.duration_s }} s)</small></h2>
{% if s.result.error %}<div class="err">Suite error: {{ s.result.error }}</div>{% endif %}
{% for note in s.result.notes %}<div class="note">{{ note }}</div>{% endfor %}
{% if s.rows %}<table><tr><th>metric</th><th>value</th><th>unit</th><th>n</th><th>baseline</th><th>tolerance</th>
<th>threshold</th><th>status</th><th>note</th></tr>
{% for r in s.rows %}<tr><td>{{ r.metric.name }}</td><td>{{ fmt(r.metric.value) }}</td><td>{{ r.metric.unit }}</td>
<td>{{ r.metric.n if r.metric.n is not none else '' }}</td><td>{{ fmt(r.baseline) }}</td>
<td>{{ fmt(r.metric.tolerance) }}</td><td>{{ fmt(r.metric.threshold) }}</td>
<td class="{{ 'fail' if r.status != 'ok' else 'pass' }}">{{ r.status }}</td><td>{{ r.metric.note }}</td></tr>
{% endfor %}</table>{% endif %}
{% if s.plot %}<img alt="{{ s.result.suite }} metrics" src="{{ s.plot }}">{% endif %}
{% if s.cases %}<details{% if s.failed %} open{% endif %}><summary>{{ s.result.cases|length }} cases,
{{ s.failed }} failed{% if s.result.cases|length > s.cases|length %} (first {{ s.cases|length }} shown){% endif %}
</summary><table><tr><th>case</th><th>passed</th><th>score</th><th>detail</th></tr>
{% for c in s.cases %}<tr><td>{{ c.case_id }}</td>
<td class="{{ 'fail' if c.passed is false else 'pass' if c.passed else '' }}">{{ c.passed }}</td>
<td>{{ fmt(c.score) }}</td><td><code>{{ detail(c.detail) }}</code></td></tr>{% endfor %}</table></details>{% endif %}
{% endfor %}
<h2>Trend ({{ history|length }} runs)</h2>
{% for suite, uri in trends %}<h3>{{ suite }}</h3><img alt="{{ suite }} trend" src="{{ uri }}">{% endfor %}
{% if history %}<table><tr><th>run</th><th>started</th><th>passed</th><th>errors</th><th>model versions</th></tr>
{% for h in history|reverse %}<tr><td>{{ h.run_id }}</td><td>{{ h.started_at.isoformat() }}</td>
<td class="{{ 'pass' if h.passed else 'fail' }}">{{ h.passed }}</td><td>{{ ', '.join(h.errors) }}</td>
<td><code>{{ h.version_key }}</code></td></tr>{% endfor %}</table>{% endif %}
</body></html>
"""

_COMPARE_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>fleetchat eval {{ a.run_id }} vs {{ b.run_id }}</title>
<style>{{ style }}</style></head><body>
<h1>{{ b.run_id }} (B) vs {{ a.run_id }} (A)</h1>
<table><tr><th>pool</th><th>A</th><th>B</th></tr>
{% for pool in pools %}<tr><td>{{ pool }}</td><td><code>{{ a.model_versions.get(pool, '-') }}</code></td>
<td><code>{{ b.model_versions.get(pool, '-') }}</code></td></tr>{% endfor %}</table>
<table><tr><th>metric</th><th>A</th><th>B</th><th>B − A</th><th>verdict</th></tr>
{% for r in rows %}<tr><td>{{ r.name }}</td><td>{{ fmt(r.a) }}</td><td>{{ fmt(r.b) }}</td><td>{{ fmt(r.delta) }}</td>
<td class="{{ 'fail' if r.verdict in ('worse', 'regressed') else 'pass' if r.verdict == 'better' else '' }}">
{{ r.verdict }}</td></tr>{% endfor %}</table>
{% if plot %}<img alt="comparison" src="{{ plot }}">{% endif %}
</body></html>
"""

_env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))


def fmt(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.4g}"


def _detail(detail: dict[str, object]) -> str:
    text = json.dumps(detail, ensure_ascii=False, default=str)
    return text if len(text) <= 600 else text[:600] + "…"


@dataclass
class _Row:
    metric: Metric
    baseline: float | None
    status: str


def _status(metric: Metric, baseline: float | None) -> str:
    if metric.breaks_threshold():
        return "threshold"
    if baseline is not None and metric.tolerance is not None and metric.worsening(baseline) > metric.tolerance + 1e-9:
        return "regressed"
    return "ok"


def render_run(run: EvalRun, history: list[HistoryEntry], baseline: EvalRun | None) -> str:
    """The run's HTML report: gate, per-suite metrics, plots and cases, and the trend of every run in `history`."""
    base = {} if baseline is None else baseline.metrics()
    suites = []
    for result in run.suites:
        rows = [
            _Row(
                m,
                base[m.name].value if m.name in base else None,
                _status(m, base[m.name].value if m.name in base else None),
            )
            for m in result.metrics
        ]
        ordered = sorted(result.cases, key=lambda c: c.passed is not False)
        suites.append(
            {
                "result": result,
                "rows": rows,
                "plot": plots.suite_plot(run, result.suite, baseline),
                "cases": ordered[:MAX_CASES],
                "failed": sum(1 for c in result.cases if c.passed is False),
            }
        )
    names = sorted({name.split(".", 1)[0] for entry in history for name in entry.metrics})
    trends = [(suite, uri) for suite in names if (uri := plots.trend_plot(history, suite))]
    return _env.from_string(_RUN_TEMPLATE).render(
        run=run,
        style=_STYLE,
        options=json.dumps(run.options, default=str),
        local_note=LOCAL_JUDGE_NOTE,
        suites=suites,
        history=history,
        trends=trends,
        fmt=fmt,
        detail=_detail,
    )


@dataclass
class CompareRow:
    name: str
    a: float | None
    b: float | None
    delta: float | None
    verdict: str  # better / worse / regressed (beyond tolerance) / same / only A / only B


def compare_rows(a: EvalRun, b: EvalRun) -> list[CompareRow]:
    ma, mb = a.metrics(), b.metrics()
    rows = []
    for name in sorted(set(ma) | set(mb)):
        if name not in mb:
            rows.append(CompareRow(name, ma[name].value, None, None, "only A"))
            continue
        if name not in ma:
            rows.append(CompareRow(name, None, mb[name].value, None, "only B"))
            continue
        metric, worse = mb[name], mb[name].worsening(ma[name].value)
        if metric.tolerance is not None and worse > metric.tolerance + 1e-9:
            verdict = "regressed"
        elif abs(worse) <= 1e-12:
            verdict = "same"
        else:
            verdict = "worse" if worse > 0 else "better"
        rows.append(CompareRow(name, ma[name].value, metric.value, metric.value - ma[name].value, verdict))
    return rows


def render_compare(a: EvalRun, b: EvalRun) -> str:
    return _env.from_string(_COMPARE_TEMPLATE).render(
        a=a,
        b=b,
        pools=sorted(set(a.model_versions) | set(b.model_versions)),
        rows=compare_rows(a, b),
        plot=plots.compare_plot(a, b),
        style=_STYLE,
        fmt=fmt,
    )

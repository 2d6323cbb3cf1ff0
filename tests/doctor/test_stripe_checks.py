"""The Stripe checks against the local fake Stripe over real HTTP: key mode by environment, a refused key, missing
meters, and no answer at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from functions.local_stack.doctor.results import Status
from tests.doctor.conftest import only, run
from tests.support.fake_stripe import FakeStripe
from tests.support.processes import free_port

OTHERS = ("stores", "workers", "web")
METERS = ("fleetchat_input_tokens", "fleetchat_cached_input_tokens", "fleetchat_output_tokens")
SESSION_SECRET = "s" * 40


def test_a_test_key_locally_reaches_stripe_and_finds_every_meter(tmp_path: Path) -> None:
    with FakeStripe(meters=METERS) as fake:
        report = run(
            skip=OTHERS,
            data_dir=tmp_path,
            stripe={"api_key": "sk_test_doctor", "api_base": fake.url},
        )
        assert [(r.method, r.path) for r in fake.requests] == [("GET", "/v1/billing/meters")]
    mode, api = only(report, "stripe")
    assert (mode.status, api.status) == (Status.OK, Status.OK), report.results
    assert mode.detail == "test key, local environment"


def test_missing_meters_fail_naming_them(tmp_path: Path) -> None:
    with FakeStripe(meters=METERS[:1]) as fake:
        report = run(
            skip=OTHERS,
            data_dir=tmp_path,
            stripe={"api_key": "rk_test_doctor", "api_base": fake.url},
        )
    (api,) = only(report, "stripe", "API")
    assert api.status is Status.FAIL and "fleetchat_output_tokens" in api.detail and "Meters" in (api.hint or "")


def test_a_refused_key_fails(tmp_path: Path) -> None:
    with FakeStripe(api_key="sk_test_the_right_one", meters=METERS) as fake:
        report = run(
            skip=OTHERS,
            data_dir=tmp_path,
            stripe={"api_key": "sk_test_revoked", "api_base": fake.url},
        )
    (api,) = only(report, "stripe", "API")
    assert api.status is Status.FAIL and "401" in api.detail


def test_an_unreachable_stripe_fails(tmp_path: Path) -> None:
    base = f"http://127.0.0.1:{free_port()}"
    (api,) = only(
        run(
            skip=OTHERS,
            data_dir=tmp_path,
            stripe={"api_key": "sk_test_x", "api_base": base},
        ),
        "stripe",
        "API",
    )
    assert api.status is Status.FAIL and api.detail.startswith("unreachable")


@pytest.mark.parametrize(
    ("key", "environment", "status", "words"),
    [
        ("sk_live_abc", "local", Status.FAIL, "live key on a local stack"),
        ("pk_test_abc", "local", Status.FAIL, "not a Stripe secret"),
        ("sk_test_abc", "deployed", Status.WARN, "test key on a deployment"),
        ("rk_live_abc", "deployed", Status.OK, "live key, deployed environment"),
    ],
)
def test_the_key_mode_must_fit_the_environment(
    tmp_path: Path, key: str, environment: str, status: Status, words: str
) -> None:
    deployed = {"worker_urls": {"mini": ["http://w"]}, "session_secret": SESSION_SECRET}
    extra = deployed if environment == "deployed" else {}
    # An address nothing answers on: the mode is judged from the key alone, before any call.
    base = f"http://127.0.0.1:{free_port()}"
    report = run(skip=OTHERS, timeout_s=1.0, data_dir=tmp_path, environment=environment,
                 stripe={"api_key": key, "api_base": base}, **extra)  # fmt: skip
    (mode,) = only(report, "stripe", "key mode")
    assert mode.status is status and words in mode.detail and (status is Status.OK or mode.hint)


def test_no_key_is_fine_locally_and_a_warning_deployed(tmp_path: Path) -> None:
    (local,) = only(run(skip=OTHERS, data_dir=tmp_path), "stripe")
    assert local.status is Status.OK
    deployed = run(
        skip=OTHERS, data_dir=tmp_path, environment="deployed", worker_urls={"mini": ["http://w"]},
        session_secret=SESSION_SECRET,
    )  # fmt: skip
    (warned,) = only(deployed, "stripe")
    assert warned.status is Status.WARN and "FLEETCHAT_STRIPE_API_KEY" in (warned.hint or "")

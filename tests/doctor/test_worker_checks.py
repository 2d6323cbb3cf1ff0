"""Worker checks against real loopback stand-in workers: healthy ones pass, a down one and one serving another pool's
model fail with their fix; every replica is asked at once."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

from functions.local_stack.doctor.results import Status
from tests.doctor.conftest import only, run
from tests.support.processes import free_port
from tests.support.servers import serve
from tests.support.stand_ins.stand_in import stand_in_worker

OTHERS = ("stores", "stripe", "web")


def test_every_replica_is_healthy_and_serves_its_pool(tmp_path: Path) -> None:
    with ExitStack() as stack:
        mini = [stack.enter_context(serve(stand_in_worker("m", model="mini"))) for _ in range(2)]
        flagship = stack.enter_context(serve(stand_in_worker("f", model="flagship")))
        urls = {"mini": mini, "flagship": [flagship]}
        report = run(skip=OTHERS, data_dir=tmp_path, worker_urls=urls)
    workers = only(report, "workers")
    assert len(workers) == 3 and {r.status for r in workers} == {Status.OK}, workers
    assert {r.name for r in workers} == {f"mini {mini[0]}", f"mini {mini[1]}", f"flagship {flagship}"}
    assert not report.failed


def test_a_down_replica_and_a_wrong_model_fail_with_their_fix(tmp_path: Path) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with ExitStack() as stack:
        good = stack.enter_context(serve(stand_in_worker("m", model="mini")))
        wrong = stack.enter_context(serve(stand_in_worker("f", model="mini")))  # flagship's URL serves mini
        report = run(skip=OTHERS, data_dir=tmp_path, worker_urls={"mini": [good, down], "flagship": [wrong]})
    by_name = {r.name: r for r in only(report, "workers")}
    assert by_name[f"mini {good}"].status is Status.OK
    refused = by_name[f"mini {down}"]
    assert refused.status is Status.FAIL and "unreachable" in refused.detail and "fleetchat up" in (refused.hint or "")
    mismatch = by_name[f"flagship {wrong}"]
    assert mismatch.status is Status.FAIL and "serves ['mini'], not flagship" in mismatch.detail
    assert "--served-model-name flagship" in (mismatch.hint or "")
    assert report.failed


def test_an_unhealthy_replica_fails(tmp_path: Path) -> None:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    sick = FastAPI()

    @sick.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "loading"}, status_code=503)

    with serve(sick) as url:
        report = run(skip=OTHERS, data_dir=tmp_path, worker_urls={"mini": [url], "flagship": [url]})
    assert {r.detail for r in only(report, "workers")} == {"/health answered 503"}


def test_a_stalled_replica_fails_within_the_bound(tmp_path: Path) -> None:
    """A worker that accepts the connection and never answers (a hung process): the check gives up, says so, and the
    other replicas are still reported."""
    import socket

    with socket.socket() as stalled, serve(stand_in_worker("m", model="mini")) as good:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(8)  # the kernel completes handshakes; nobody ever reads or writes
        hung = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        report = run(skip=OTHERS, timeout_s=0.5, data_dir=tmp_path, worker_urls={"mini": [good], "flagship": [hung]})
    by_name = {r.name: r for r in only(report, "workers")}
    assert by_name[f"mini {good}"].status is Status.OK
    assert by_name[f"flagship {hung}"].detail == "no answer in time"
    assert "--timeout" in (by_name[f"flagship {hung}"].hint or "")


def test_the_doctor_presents_the_stacks_worker_key_and_names_a_refused_one(tmp_path: Path) -> None:
    from functions.accounts.private_files import write_private
    from gpu_workers.server.app import create_worker_app
    from tests.unit.workers.test_worker_server import ScriptedEngine

    write_private(tmp_path / "worker_api_key", "the-stacks-key")  # what `fleetchat up` made for this data dir
    with ExitStack() as stack:
        ours = stack.enter_context(
            serve(create_worker_app(ScriptedEngine("a"), accepted_keys=frozenset({"the-stacks-key"})))
        )
        other = stack.enter_context(serve(create_worker_app(ScriptedEngine("a"), accepted_keys=frozenset({"another"}))))
        report = run(skip=OTHERS, data_dir=tmp_path, worker_urls={"mini": [ours, other]}, pools=["mini"])
    by_name = {r.name: r for r in only(report, "workers")}
    assert by_name[f"mini {ours}"].status is Status.OK, by_name
    refused = by_name[f"mini {other}"]
    assert refused.status is Status.FAIL and "refused the worker key (401)" in refused.detail
    assert "worker_api_key" in (refused.hint or "")

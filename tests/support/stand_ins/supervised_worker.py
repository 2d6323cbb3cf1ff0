"""A stand-in worker as its own process, for `fleetchat up` to supervise where the model is not the point (start-up
in well under a second instead of loading SmolLM2). Arms parent death like `fleetchat worker` does. Its answer names
the replica ("mini:8100"), so a test sees which one served.

    python -m tests.support.stand_ins.supervised_worker --pool mini --port 8100
"""

from __future__ import annotations

import argparse

from gpu_workers.server.parent_death import die_with_supervisor


def main() -> None:
    how = die_with_supervisor()
    parser = argparse.ArgumentParser()
    parser.add_argument("--pool", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()

    import uvicorn

    from tests.support.stand_ins.stand_in import stand_in_worker

    print(f"stand-in worker for {args.pool} on port {args.port}; parent death: {how}", flush=True)
    app = stand_in_worker(f"{args.pool}:{args.port}")
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()

"""`jarvis-agents worker`: a small supervisor around one Celery worker process.

Why a supervisor: with kombu 5.7 and redis-py 8, a Redis restart while a message is
received and unacknowledged crashes the Celery consumer (`'NoneType' object has no
attribute 'hostname'` in kombu's restore_unacked, once the connection is closed).
Agent runs are acknowledged as they start (workers.tasks) and no message is taken
before a thread is free for it (workers.celery_app), so a restart under running
agents finds nothing to restore and the consumer reconnects. Should it crash all the
same (a message received in the instant Redis went away, or another task's), the
worker stops warmly: its running agents end first, nothing is lost or counted, and
the process exits. A worker that does not come back is an outage, so the supervisor
restarts the Celery process whenever it exits on its own, with a capped backoff, and
passes SIGTERM/SIGINT through for a warm shutdown. The supervisor also fires the due
schedules (jarvis_agents/scheduler.py), on a thread of its own.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from jarvis_agents.config import Settings
from jarvis_agents.routing import QueueDirectory, WorkerPresence

if TYPE_CHECKING:
    from jarvis_agents.components import SchedulerComponents, WorkerComponents

log = logging.getLogger(__name__)


def run_worker(
    settings: Settings, *, concurrency: int | None = None, loglevel: str = "INFO",
    models: tuple[str, ...] | None = None,
) -> int:
    """Run and supervise the Celery worker until asked to stop; returns the exit code.

    With `models`, it takes only agents of those models (jarvis_agents.routing)."""
    from jarvis_agents.components import check_dependencies

    check_dependencies(settings)
    firing = start_firing(settings, loglevel=loglevel)
    try:
        return _supervise(settings, concurrency=concurrency, loglevel=loglevel, models=models)
    finally:
        firing.close()


def start_firing(settings: Settings, *, loglevel: str) -> SchedulerComponents:
    """The schedules' firing loop, in this supervisor process (README, Schedules): it runs
    while the worker runs, through restarts of the Celery process, and no agent thread
    competes with it for the interpreter."""
    from jarvis_agents.components import build_scheduler
    from jarvis_agents.logs import configure_logging
    from workers.celery_app import CeleryDispatcher, create_celery

    configure_logging(json_lines=settings.log_json,
                      level=getattr(logging, loglevel.upper(), logging.INFO))
    app = create_celery(settings)
    firing = build_scheduler(settings, lambda redis: CeleryDispatcher(
        app, directory=QueueDirectory(redis, idle_s=settings.model_idle_s)))
    firing.start()
    return firing


def _supervise(
    settings: Settings, *, concurrency: int | None, loglevel: str,
    models: tuple[str, ...] | None,
) -> int:
    """Start the Celery process and start it again whenever it exits on its own."""
    # -P: the child imports the package its parent runs, never a `workers/` folder that
    # happens to be in the current directory (a checkout beside an installed copy).
    args = [sys.executable, "-P", "-m", "workers.main", f"--loglevel={loglevel}"]
    if concurrency is not None:
        args.append(f"--concurrency={concurrency}")
    if models is not None:
        args.append(f"--models={','.join(models)}")
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    backoff_s = 1.0
    while True:
        started = time.monotonic()
        # A process group of its own: a signal sent to ours (a terminal's Ctrl-C, a
        # killpg) reaches the child once, through `forward`, not twice; a second one
        # would cut the shutdown's grace period to nothing.
        child = subprocess.Popen(args, process_group=0)
        code = child.wait()
        if stopping or code == FATAL:
            return code
        if time.monotonic() - started > 60:
            backoff_s = 1.0
        print(f"jarvis-agents worker: the Celery process exited with code {code}; "
              f"restarting in {backoff_s:g} s", file=sys.stderr, flush=True)
        time.sleep(backoff_s)
        if stopping:
            return code
        backoff_s = min(backoff_s * 2, 30.0)


FATAL = 3  # the child found a problem a restart cannot fix (configuration)


def celery_main(
    settings: Settings, *, concurrency: int | None, loglevel: str,
    models: tuple[str, ...] | None = None,
) -> None:
    """The supervised process: the Celery worker with its runner attached."""
    from celery.signals import worker_ready, worker_shutting_down
    from prometheus_client import start_http_server

    from jarvis_agents import tracing
    from jarvis_agents.components import build_worker, freeze_start_up_objects, redis_client
    from jarvis_agents.logs import configure_logging
    from jarvis_agents.routing import queue_for
    from workers.celery_app import QUEUE, CeleryDispatcher, create_celery
    from workers.tracing import instrument_celery

    if concurrency is not None:
        settings = settings.with_overrides(worker_concurrency=concurrency)
    level = getattr(logging, loglevel.upper(), logging.INFO)
    configure_logging(json_lines=settings.log_json, level=level)
    if level > logging.DEBUG:
        # Celery's "Task … received" / "succeeded" lines repeat, per agent, what the
        # runner logs with the agent's id; two formatted lines per agent cost CPU.
        for name in ("celery.worker.strategy", "celery.app.trace"):
            logging.getLogger(name).setLevel(max(level, logging.WARNING))
    if settings.worker_metrics_port:
        # Planning, tool and agent latency histograms live in the worker process.
        start_http_server(settings.worker_metrics_port)
    if tracing.configure(settings, service="jarvis-agents-worker"):
        instrument_celery()
    app = create_celery(settings)
    directory = QueueDirectory(redis_client(settings, max_connections=10),
                               idle_s=settings.model_idle_s)
    components = build_worker(settings, CeleryDispatcher(app, directory=directory))
    app.jarvis = components  # the tasks reach the runner through their app
    components.start_background()
    presence = worker_presence(app, settings, directory, components, models)
    queues = [queue_for(model) for model in sorted(presence.subscribed)]
    if models is None:
        queues.insert(0, QUEUE)  # what was queued without a model (before routing)

    @worker_ready.connect
    def on_ready(**_: object) -> None:
        presence.start()  # consuming now: it may say so
        freeze_start_up_objects()  # Celery's consumer, the runner and the pools exist now

    signals_received = 0

    @worker_shutting_down.connect
    def on_shutdown(**_: object) -> None:
        # Celery's warm shutdown waits for every running task; an agent may run for
        # minutes, so after the grace period the runner stops them and hands them back.
        # Celery signals this again on every further SIGTERM: that one means "now"
        # (`jarvis-agents up` sends it on a second Ctrl-C).
        nonlocal signals_received
        signals_received += 1
        runner = components.runner
        grace_s = settings.shutdown_grace_s if signals_received == 1 else 0.0
        running = runner.active()
        log.info("shutting down: %s handed back in %g s unless they end first",
                 "1 running agent is" if running == 1 else f"{running} running agents are", grace_s)
        runner.begin_shutdown(grace_s)
        presence.withdraw()  # no model's agents wait for this worker any more

    _stop_when_orphaned()
    try:
        app.worker_main([
            "worker", f"--loglevel={loglevel}", "--pool=threads",
            f"--concurrency={settings.worker_concurrency}", f"--hostname={presence.name}",
            f"--queues={','.join(queues)}",
            "--without-gossip", "--without-mingle",
        ])
    finally:
        gc.unfreeze()  # see freeze_start_up_objects
        presence.stop()
        components.close()
        tracing.flush()
        directory.redis.close()


def worker_presence(
    app: Any, settings: Settings, directory: QueueDirectory, components: WorkerComponents,
    models: tuple[str, ...] | None,
) -> WorkerPresence:
    """This worker's advert and queues: those of `models`, or, without, the default
    queue and every model's, added as they are listed and dropped, with what the process
    keeps of the model, once they are no longer (jarvis_agents.routing)."""
    from workers.probe import node_name

    name = node_name()  # one per process: add_consumer targets it (and ping-worker finds it)
    runner = components.runner

    def subscribe(queue: str) -> None:
        # Celery's remote control, to this worker only: its consumer adds the queue.
        app.control.add_consumer(queue, destination=[name], reply=False)

    def unsubscribe(queue: str) -> None:
        app.control.cancel_consumer(queue, destination=[name], reply=False)

    presence = WorkerPresence(
        directory, name=name, models=models, concurrency=settings.worker_concurrency,
        running=runner.active, subscribe=subscribe, interval_s=settings.heartbeat_interval_s,
        busy_models=runner.repository.statistics.busy_models, unsubscribe=unsubscribe,
        forget=components.forget_model)
    if models is None:
        # The default model's queue is nearly always in use.
        presence.subscribed |= {settings.model, *directory.models()}
    return presence


def _stop_when_orphaned(poll_s: float = 1.0) -> None:
    """Stop warmly if the supervisor dies (SIGKILL): the child has a process group of
    its own, so nothing else would reach it."""
    import os
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        log.warning("the supervisor is gone; shutting down")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="jarvis-orphan-watch", daemon=True).start()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="workers.main")
    parser.add_argument("--concurrency", type=int, default=None)
    parser.add_argument("--loglevel", default="INFO")
    parser.add_argument("--models", default=None)
    options = parser.parse_args()
    from jarvis_agents.errors import JarvisError
    from jarvis_agents.routing import parse_models

    try:
        celery_main(Settings.from_env(), concurrency=options.concurrency, loglevel=options.loglevel,
                    models=parse_models(options.models))
        code: object = 0
    except JarvisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = FATAL
    except SystemExit as exc:  # how Celery's worker_main ends
        code = exc.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
    # Every part is closed by now (celery_main's `finally`) and the spans are sent.
    # What is left is the interpreter's teardown of the heap (Celery, kombu, SQLAlchemy,
    # OpenTelemetry: a wait felt on every stop), so the logs are flushed and
    # the process ends here.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)

"""Map-reduce on one process, a Ray cluster or a Dask cluster: the engines of `polyquant calibrate`.

`map_reduce(engine, tasks, worker_factory, merge)` runs `worker(task)` for every task, where each
worker process builds `worker = worker_factory()` once (so a worker holds one expensive object, e.g.
an onnxruntime session, for all its tasks), and folds the partial results with `merge(a, b)`.

Contract with the caller: `merge` must be exact, associative and commutative (a + b == b + a,
(a + b) + c == a + (b + c), bit for bit). The engines fold the partial results in whatever order they
arrive and in whatever tree suits them, so only such a merge gives a result that does not depend on
the engine, the number of workers or the scheduling. This module knows nothing of what the tasks do.

Engines:
- "local" (the default): this process, tasks taken one at a time from the iterable (a generator is
  never materialised), each partial result merged as soon as it is made;
- "ray": Ray Data, `map_batches` over the tasks with an actor class whose instances each build one
  worker; the partial results stream back to this process and are merged there. A local cluster
  (`num_cpus=workers`) is started unless `address=` names an existing one or Ray is already
  initialised in this process;
- "dask": `distributed` futures on a `LocalCluster(n_workers=workers, threads_per_worker=1,
  processes=True)` or on the scheduler at `address=`; partial results are merged on the cluster as
  they complete (a tree of merge tasks), and only the final result comes back.
A cluster or connection this module opens is closed at the end, also on error.
"""

from __future__ import annotations

import os
import pickle
import uuid
import warnings
from contextlib import contextmanager
from typing import Any, Callable, Iterable

from .common import CommandError

ENGINES = ("local", "ray", "dask")


def map_reduce(engine: str | None, tasks: Iterable[Any], worker_factory: Callable[[], Callable[[Any], Any]],
               merge: Callable[[Any, Any], Any], *, workers: int | None = None, address: str | None = None,
               on_done: Callable[[], None] | None = None) -> Any:
    """merge(...merge(worker(t1), worker(t2))..., worker(tn)) in some order and tree, over the tasks.

    `tasks`: picklable task descriptions (an iterable; the local engine consumes it lazily).
    `worker_factory()`: builds a worker function task -> partial result, once per worker (it and the
    tasks and partial results are pickled for the Ray and Dask engines).
    `merge(a, b)`: exact, associative and commutative; may return a modified `a`.
    `workers`: positive number of workers of a cluster this call starts (default: the CPU count) or of
    an existing one (default: its CPUs / its workers); the local engine runs one.
    `address`: an existing cluster (Ray: "ray://host:10001" or "auto"; Dask: "tcp://host:8786").
    `on_done()`: called in this process once per finished task (a progress bar).
    Returns None when there are no tasks.
    """
    engine = "local" if engine is None else engine
    if engine not in ENGINES:
        raise CommandError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise CommandError(f"workers: expected a positive integer, got {workers!r}")
    if address is not None and not isinstance(address, str):
        raise CommandError(f"address: expected a string (the cluster's address), got {type(address).__name__}")
    on_done = on_done or (lambda: None)
    if engine == "local":
        if workers not in (None, 1):
            raise CommandError(f"workers: the local engine runs one worker, got {workers}; use engine='ray' or 'dask'")
        if address is not None:
            raise CommandError("address: the local engine runs in this process; address= is for engine='ray' or 'dask'")
        return _local(tasks, worker_factory, merge, on_done)
    if engine == "ray":
        return _ray(list(tasks), worker_factory, merge, workers, address, on_done)
    return _dask(list(tasks), worker_factory, merge, workers, address, on_done)


def _local(tasks, worker_factory, merge, on_done):
    worker, total = worker_factory(), None
    for task in tasks:
        part = worker(task)
        total = part if total is None else merge(total, part)
        on_done()
    return total


def _missing(engine: str, exc: ImportError) -> CommandError:
    return CommandError(f"engine: {engine!r} needs the optional dependency {engine} ({exc.name or exc} is not importable); "
                        f"install it with: pip install .[{engine}]")


# ---- Ray ---------------------------------------------------------------------------------------
class _RayWorker:
    """A Ray Data actor: builds the worker once, then maps a batch of pickled tasks to their partial
    results (pickled: Ray Data's columns hold bytes, not arbitrary objects), merged within the batch."""

    def __init__(self, worker_factory, merge):
        self.worker, self.merge = worker_factory(), merge

    def __call__(self, batch):
        total = None
        try:
            for blob in batch["task"]:
                part = self.worker(pickle.loads(blob))
                total = part if total is None else self.merge(total, part)
        except Exception as exc:  # noqa: BLE001 - returned, so that the caller sees it as it was raised
            total = _WorkerError(exc)
        import numpy as np
        out = np.empty(1, dtype=object)
        out[0] = pickle.dumps(total)
        return {"partial": out, "tasks": np.array([len(batch["task"])])}


class _WorkerError:
    """A worker's exception carried back as a result: Ray Data re-raises a worker's exception as its
    own UserCodeException, whose message no longer holds the original one."""

    def __init__(self, exc: Exception):
        try:
            pickle.dumps(exc)
            self.exc = exc
        except Exception:  # noqa: BLE001 - an exception that does not pickle travels as its text
            self.exc = RuntimeError(f"{type(exc).__name__}: {exc}")


@contextmanager
def _quiet_ray():
    # Ray Data logs each execution at INFO / WARNING level on stderr; calibrate shows its own bar. Its
    # logger is quieted once Ray Data is imported (the import configures it), and its level restored
    # on the way out (the caller's logging is not ours to change).
    import logging
    with _ignored_warnings():
        import ray.data  # noqa: F401 - configures the "ray.data" logger
        data_logger = logging.getLogger("ray.data")
        level = data_logger.level
        data_logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            data_logger.setLevel(level)


@contextmanager
def _ignoring(*categories):
    """Warnings of these categories ignored inside the block (the cluster libraries' own)."""
    with warnings.catch_warnings():
        for category in categories:
            warnings.simplefilter("ignore", category)
        yield


def _ignored_warnings():
    # Ray's import and its Data library raise DeprecationWarnings / FutureWarnings of their own
    # dependencies, which are not the caller's to fix.
    return _ignoring(DeprecationWarning, FutureWarning, PendingDeprecationWarning)


def _ray(tasks, worker_factory, merge, workers, address, on_done):
    if not tasks:
        return None
    try:
        with _ignored_warnings():
            import ray
            import ray.data  # noqa: F401
    except ImportError as exc:
        raise _missing("ray", exc) from None
    with _quiet_ray():
        started = False
        if not ray.is_initialized():
            init = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            if address is not None:
                ray.init(address=address, **init)
            else:
                ray.init(num_cpus=workers or os.cpu_count() or 1, **init)
            started = True
        try:
            n = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            ctx = ray.data.DataContext.get_current()
            ctx.enable_progress_bars = False
            ctx.print_on_execution_start = False
            ds = ray.data.from_items([{"task": pickle.dumps(t)} for t in tasks], override_num_blocks=len(tasks))
            # one task per call: partial results come back (and the bar moves) task by task
            # max_restarts=0: a worker that dies fails the run (its partial statistics would be lost)
            ds = ds.map_batches(_RayWorker, fn_constructor_args=(worker_factory, merge), batch_size=1,
                                batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=n), num_cpus=1,
                                max_restarts=0)
            total = None
            try:
                for row in ds.iter_rows():
                    part = pickle.loads(row["partial"])
                    if isinstance(part, _WorkerError):
                        raise part.exc
                    total = part if total is None else merge(total, part)
                    for _ in range(int(row["tasks"])):
                        on_done()
            except Exception as exc:  # noqa: BLE001 - Ray wraps what fails outside the worker function
                raise _cause(exc) from None
            return total
        finally:
            if started:
                ray.shutdown()


def _cause(exc: BaseException) -> BaseException:
    """The worker's own exception inside Ray's / Dask's wrappers (a CommandError keeps its message)."""
    seen = set()
    e = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, CommandError):
            return e
        inner = getattr(e, "cause", None)
        if isinstance(inner, BaseException):
            e = inner
            continue
        e = e.__cause__ or e.__context__
    return exc


# ---- Dask --------------------------------------------------------------------------------------
# The worker built in this process (a Dask worker process) by the map_reduce call `key`: each
# process builds one per call, and holds only the latest call's.
_DASK_WORKER: tuple = (None, None)


def _dask_run(key, worker_factory, task):
    global _DASK_WORKER
    if _DASK_WORKER[0] != key:
        _DASK_WORKER = (key, worker_factory())
    return _DASK_WORKER[1](task)


def _quiet_dask():
    # distributed warns about ports in use, large graphs and the like: not the caller's to fix
    return _ignoring(UserWarning, DeprecationWarning, FutureWarning, ResourceWarning)


def _dask(tasks, worker_factory, merge, workers, address, on_done):
    if not tasks:
        return None
    with _quiet_dask():
        try:
            from distributed import Client, LocalCluster, as_completed
        except ImportError as exc:
            raise _missing("dask", exc) from None
        cluster = None
        if address is None:
            cluster = LocalCluster(n_workers=workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
        try:
            with Client(cluster if cluster is not None else address) as client:
                key = uuid.uuid4().hex
                # the factory (with the model inside) goes to every worker once, not once per task
                factory = client.scatter(worker_factory, broadcast=True, hash=False)
                maps = client.map(_dask_run, [key] * len(tasks), [factory] * len(tasks), tasks, pure=False)
                map_keys = {f.key for f in maps}
                pending = None
                stream = as_completed(maps)
                for fut in stream:
                    if fut.status == "error":
                        try:
                            fut.result()
                        except Exception as exc:  # noqa: BLE001 - the worker's exception, unwrapped
                            raise _cause(exc) from None
                    if fut.key in map_keys:
                        on_done()
                    if pending is None:
                        pending = fut
                    else:  # any two finished results merge on the cluster: a tree in completion order
                        stream.add(client.submit(merge, pending, fut, pure=False))
                        pending = None
                return pending.result()
        finally:
            if cluster is not None:
                cluster.close()

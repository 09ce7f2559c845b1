"""Fixtures shared by the tools' tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def dask_cluster():
    """The address of a 2-worker Dask LocalCluster (one process per worker, one thread each), started
    once for every test that asks for it; skipped without distributed."""
    distributed = pytest.importorskip("distributed")
    from polyquant._tools import engines
    with engines._quiet_dask():
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        yield cluster.scheduler_address
    finally:
        with engines._quiet_dask():
            cluster.close()

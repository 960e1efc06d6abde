"""The pure modules of kopflet import no I/O framework, and every other module is named as doing I/O.

The pure list lives in one place, `.importlinter`'s `pure` contract (which `make lint` checks statically); here
each pure module is also imported in a fresh interpreter (the test process itself has imported everything already),
then sys.modules is checked for the frameworks that only the I/O modules may use.
"""

from __future__ import annotations

import configparser
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import kopflet

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("grpc", "kopf", "aiohttp", "kubernetes")
_INI = configparser.ConfigParser()
_INI.read(REPO / ".importlinter")
PURE = tuple(_INI["importlinter:contract:pure"]["source_modules"].split())
# The modules that do I/O: every kopflet module that is neither a package's __init__ nor under PURE.
IMPURE = frozenset({
    "kopflet.allocation.state", "kopflet.apis.podresources.server",
    "kopflet.apis.podresources.proto.v1.api_pb2", "kopflet.apis.podresources.proto.v1.api_pb2_grpc",
    "kopflet.apis.podresources.proto.v1alpha1.api_pb2", "kopflet.apis.podresources.proto.v1alpha1.api_pb2_grpc",
    "kopflet.certificate.bootstrap", "kopflet.certificate.login", "kopflet.certificate.manager",
    "kopflet.certificate.openssl", "kopflet.certificate.signing", "kopflet.certificate.store",
    "kopflet.client.events", "kopflet.client.informer", "kopflet.client.kubeapi", "kopflet.client.standalone",
    "kopflet.cm.cgroups",
    "kopflet.cm.container_manager", "kopflet.cm.cpumanager.manager", "kopflet.cm.memorymanager.manager",
    "kopflet.cm.devicemanager.manager", "kopflet.cm.devicemanager.proto.api_pb2_grpc",
    "kopflet.config.file_source",
    "kopflet.config.http_source", "kopflet.envvars.services", "kopflet.eviction.manager", "kopflet.eviction.signals",
    "kopflet.hollow.runtime", "kopflet.hooks.loader", "kopflet.hooks.runner",
    "kopflet.images.gc_manager", "kopflet.images.manager", "kopflet.kuberuntime.executor",
    "kopflet.kuberuntime.gc_manager", "kopflet.lifecycle.hooks", "kopflet.logs.manager", "kopflet.logs.reader",
    "kopflet.logs.setup",
    "kopflet.checkpointmanager", "kopflet.libc", "kopflet.lockfile", "kopflet.node", "kopflet.nodestatus.heartbeat",
    "kopflet.nodeshutdown.manager", "kopflet.nodeshutdown.systemd",
    "kopflet.oom.watcher",
    "kopflet.pluginmanager.operationexecutor", "kopflet.pluginmanager.plugin_manager",
    "kopflet.pluginmanager.pluginwatcher", "kopflet.pluginmanager.proto.api_pb2",
    "kopflet.pluginmanager.proto.api_pb2_grpc",
    "kopflet.pleg.evented", "kopflet.pleg.own_stops", "kopflet.pleg.relist", "kopflet.pods.housekeeping",
    "kopflet.pods.teardown",
    "kopflet.pods.workers",
    "kopflet.sdnotify",
    "kopflet.prober.manager", "kopflet.server.auth_reviews", "kopflet.server.backend", "kopflet.server.http",
    "kopflet.server.healthz_server", "kopflet.server.http_server",
    "kopflet.server.server", "kopflet.server.system_logs",
    "kopflet.stats.collector", "kopflet.status.manager", "kopflet.tracing.exporter", "kopflet.userns.userns_manager",
    "kopflet.util.manager", "kopflet.util.scavenger",
    "kopflet.volumes.csi.client", "kopflet.volumes.csi.handler", "kopflet.volumes.csi.nodeinfomanager",
    "kopflet.volumes.csi.proto.csi_pb2", "kopflet.volumes.csi.proto.csi_pb2_grpc",
    "kopflet.volumes.manager", "kopflet.volumes.trust_bundle_manager", "kopflet.watchdog.health_checker",
    "kopflet.podcertificate.keys",
    "kopflet.podcertificate.manager",
})

_WALKED = list(pkgutil.walk_packages(kopflet.__path__, "kopflet."))
ALL = sorted(m.name for m in _WALKED)
PACKAGES = {m.name for m in _WALKED if m.ispkg}
MODULES = sorted(m for m in ALL if m in PACKAGES or any(m == p or m.startswith(p + ".") for p in PURE))


def _loaded_after_import(*modules: str) -> list[str]:
    script = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(FORBIDDEN)!r}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_core_modules_are_found() -> None:
    for expected in ("kopflet.api.spec", "kopflet.container.labels", "kopflet.container.podstate", "kopflet.backoff",
                     "kopflet.kuberuntime.reconciler"):
        assert expected in MODULES


def test_every_module_is_pure_or_named_io() -> None:
    assert sorted(set(ALL) - set(MODULES)) == sorted(IMPURE)


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_no_io_framework(module: str) -> None:
    assert _loaded_after_import(module) == [], f"importing {module} pulls in I/O frameworks"


def test_whole_core_imports_no_io_framework() -> None:
    assert _loaded_after_import("kopflet", *MODULES) == []

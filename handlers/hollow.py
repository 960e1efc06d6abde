"""``kopflet hollow --nodes N``: N whole kopflet nodes in one process and one event loop, over simulated runtimes.

Why one loop: the agent is asyncio throughout and idles between events, so N nodes cost N sets of tasks and sockets,
not N interpreters (upstream kubemark needs a process, a pod, per hollow kubelet). Each node is a Kopf operator of
its own, built by `kopf.spawn_tasks` with the handlers every agent has (the default registry, which holds only
functions: all of a node's state is in its own memo), its own settings, credentials vault (Kopf keeps the vault and
the settings in context variables, set inside the node's own task, so each node's tasks see its own), stop flag and
`kopflet.node.Node`. Only the container runtime is simulated: a `HollowRuntime` per node on its own socket.

Kopf assumes the loop is its own in two places, both handled here:
- `kopf.run_tasks` cancels, once its operator stops, every task created since it started (its "hung tasks"), which
  would be every other node's. Each task is tagged with the node whose context created it (a task factory reading
  the `NODE` context variable), and each node's `run_tasks` is told to ignore every task not its own.
- `kopf.spawn_tasks` takes SIGINT and SIGTERM for its operator; the last node's would win. Once every node is
  spawned, the signals are taken back here and stop every node. A node's own fatal stop (`startup.stop_operator`
  sends SIGTERM, as a kubelet exits) therefore stops the whole process, as a kubelet's exit would stop its pod.
  Kopf's "ultimate termination" (SIGKILL after 10 minutes of stopping without a stop flag) is off for hollow nodes:
  one node ending must not kill the others.

Log lines name their node (``[hollow-node-3] ...``): the agent's modules log through module loggers.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import signal
import socket
import sys
import weakref
from collections.abc import Collection, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any

import kopf

import handlers  # noqa: F401  (registers every handler in Kopf's default registry, which every node runs)
from handlers import configuring
from kopflet.config import settings as configuration
from kopflet.hollow import plan as hollow_plan
from kopflet.hollow.runtime import HollowRuntime, Latencies, Simulation
from kopflet.logs import setup as logs_setup
from kopflet.node import HostFacts

logger = logging.getLogger(__name__)

USAGE_ERROR = 2
NODE: contextvars.ContextVar[str] = contextvars.ContextVar("kopflet_hollow_node", default="")
"""The hollow node whose task runs (set in each node's own task; inherited by every task and thread it starts)."""


class TaskOwners:
    """Which node's context created each task: installed as the loop's task factory."""

    def __init__(self) -> None:
        self._owners: weakref.WeakKeyDictionary[asyncio.Future[Any], str] = weakref.WeakKeyDictionary()

    def factory(self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], *,
                context: contextvars.Context | None = None, **kwargs: Any) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, context=context, **kwargs)
        owner = NODE.get() if context is None else context.get(NODE, "")
        if owner:
            self._owners[task] = owner
        return task

    def owner(self, task: asyncio.Future[Any]) -> str:
        return self._owners.get(task, "")

    def not_of(self, node: str) -> NotOwnedBy:
        return NotOwnedBy(self, node)


class NotOwnedBy(Collection[asyncio.Task[Any]]):
    """`kopf.run_tasks`'s ``ignored`` for one node: every task some other node (or nobody) created. Kopf only asks
    ``task in ignored``."""

    def __init__(self, owners: TaskOwners, node: str) -> None:
        self.owners, self.node = owners, node

    def __contains__(self, task: object) -> bool:
        return not isinstance(task, asyncio.Future) or self.owners.owner(task) != self.node

    def __iter__(self) -> Iterator[asyncio.Task[Any]]:
        return iter(())

    def __len__(self) -> int:
        return 0


class NodeNames(logging.Filter):
    """Prefix each record logged from a hollow node's tasks with the node's name."""

    def filter(self, record: logging.LogRecord) -> bool:
        node = NODE.get()
        if node and not getattr(record, "hollow_node", None):
            record.hollow_node = node
            record.msg = f"[{node}] {record.msg}"
        return True


def simulation(options: hollow_plan.HollowOptions, node: hollow_plan.NodePlan) -> Simulation:
    """The node's runtime: the chosen latencies, log files made (so ``kubectl logs`` reads an empty log, as of a
    container that printed nothing) and the image filesystem in the node's directory."""
    latencies = Latencies.zero() if options.latency == "zero" else Latencies()
    overrides = dict(options.latency_overrides)
    unknown = set(overrides) - {field.name for field in dataclasses.fields(Latencies)}
    if unknown:
        raise hollow_plan.PlanError(f"--runtime-latency-of: no such call {', '.join(sorted(unknown))}")
    return Simulation(latencies=dataclasses.replace(latencies, **overrides), pod_cidrs=(node.pod_cidr,),
                      log_files=True, image_fs_path=node.directory)


def node_host(host: HostFacts, node: hollow_plan.NodePlan) -> HostFacts:
    """The machine as one hollow node reports it: the host's, with a machine ID and system UUID of its own."""
    machine_id, system_uuid = node.machine_ids()
    return dataclasses.replace(host, machine=dataclasses.replace(host.machine, machine_id=machine_id,
                                                                 system_uuid=system_uuid))


async def run_operator(name: str, *, owners: TaskOwners, stop: asyncio.Event, spawned: asyncio.Event,
                       memo: kopf.Memo, registry: kopf.OperatorRegistry | None = None) -> None:
    """One node's Kopf operator, in its own task (so Kopf's vault and settings context variables, set in here, are
    only this node's): Kopf's default registry (every handler), settings of its own, and Kopf's stop after a root
    task ends confined to the tasks this node made."""
    NODE.set(name)
    settings = kopf.OperatorSettings()
    settings.process.ultimate_exiting_timeout = None
    try:
        tasks = await kopf.spawn_tasks(registry=registry, settings=settings, memo=memo, standalone=True,
                                       clusterwide=True, stop_flag=stop)
    finally:
        spawned.set()
    await kopf.run_tasks(tasks, ignored=owners.not_of(name))


def node_memo(node: hollow_plan.NodePlan, environ: dict[str, str], host: HostFacts) -> kopf.Memo:
    """What `handlers.startup` takes from a hollow node instead of the process: its environment (its flags), its
    directories for what no flag moves, and its machine."""
    return kopf.Memo(environ=environ, host_facts=node_host(host, node),
                     config_overrides={"pod_log_root": node.pod_log_root,
                                       "container_logs_dir": node.container_logs_dir})


async def run(options: hollow_plan.HollowOptions, plans: Sequence[hollow_plan.NodePlan],
              first: configuration.AgentConfig) -> int:
    """Every node until SIGINT or SIGTERM (or until every node has stopped by itself); 1 if a node failed. `first`
    is the first node's configuration (the machine is read once, with it)."""
    loop = asyncio.get_running_loop()
    owners = TaskOwners()
    loop.set_task_factory(owners.factory)  # type: ignore[arg-type]
    host = await HostFacts.read(first)  # read once: every node is this machine
    runtimes = [HollowRuntime(node.socket, simulation(options, node)) for node in plans]
    for runtime in runtimes:
        await runtime.start()
    stops = [asyncio.Event() for _ in plans]
    spawned = [asyncio.Event() for _ in plans]
    tasks = [asyncio.create_task(run_operator(node.name, owners=owners, stop=stop, spawned=ready,
                                              memo=node_memo(node, node.environ(os.environ), host)),
                                 name=f"hollow-node {node.name}")
             for node, stop, ready in zip(plans, stops, spawned, strict=True)]
    try:
        await asyncio.gather(*(ready.wait() for ready in spawned))

        def stop_all(signum: int) -> None:
            logger.info(f"{signal.Signals(signum).name}: stopping {len(plans)} hollow nodes")
            for stop in stops:
                stop.set()

        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop_all, signum)
        logger.info(f"{len(plans)} hollow nodes starting: {plans[0].name} .. {plans[-1].name}")
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        for stop in stops:
            stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for runtime in runtimes:
            await runtime.stop()
    failed = [(node.name, result) for node, result in zip(plans, results, strict=True)
              if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError)]
    for name, error in failed:
        logger.error(f"hollow node {name} failed: {error!r}")
    return 1 if failed else 0


def main(argv: Sequence[str]) -> int:
    options = hollow_plan.parse_args(argv)
    try:
        plans = hollow_plan.plan(options)
        for node in plans:
            simulation(options, node)
        cfg = configuring.load_agent_config(plans[0].environ(os.environ))  # the flags checked before anything runs
    except (hollow_plan.PlanError, configuration.ConfigError) as exc:
        print(f"kopflet hollow: {exc}", file=sys.stderr)
        return USAGE_ERROR
    routing = cfg.log_routing
    logs_setup.apply(cfg.log_format, cfg.log_verbosity, cfg.log_vmodule, split_stream=routing.split_stream,
                     info_buffer_bytes=routing.info_buffer_bytes, flush_frequency=cfg.log_flush_frequency)
    names = NodeNames()
    for handler in logging.getLogger().handlers:
        handler.addFilter(names)
    logger.info(f"kopflet hollow: {len(plans)} nodes on {socket.gethostname()}, state in {options.state_dir}")
    for node in plans:
        for sub in ("root", "pki", "pods-logs", "containers-logs"):
            Path(node.directory, sub).mkdir(parents=True, exist_ok=True)
    return asyncio.run(run(options, plans, cfg))

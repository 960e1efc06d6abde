"""handlers/hollow.py: several Kopf operators in one event loop, each seeing only its own credentials and stopping
only its own tasks; the log names the node; each node's simulated runtime as the options say."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import auth  # the vault's context variable: what an API call of the node would use

from handlers import hollow
from kopflet.hollow import plan as hollow_plan
from kopflet.hollow.runtime import Latencies


@contextlib.asynccontextmanager
async def tagging() -> AsyncIterator[hollow.TaskOwners]:
    """The fleet's task factory on the (session's) loop while the block runs."""
    loop = asyncio.get_running_loop()
    owners = hollow.TaskOwners()
    previous = loop.get_task_factory()
    loop.set_task_factory(owners.factory)  # type: ignore[arg-type]
    try:
        yield owners
    finally:
        loop.set_task_factory(previous)


async def test_tasks_belong_to_the_node_whose_context_made_them() -> None:
    async with tagging() as owners:
        async def make() -> asyncio.Task[None]:
            hollow.NODE.set("n1")
            return asyncio.create_task(asyncio.sleep(0))

        outside = asyncio.create_task(asyncio.sleep(0))
        inside = await asyncio.create_task(make())
        context = contextvars.copy_context()
        context.run(hollow.NODE.set, "n2")
        given = asyncio.get_running_loop().create_task(asyncio.sleep(0), context=context)
        await asyncio.gather(outside, inside, given)
    assert [owners.owner(t) for t in (outside, inside, given)] == ["", "n1", "n2"]
    ignored = owners.not_of("n1")
    assert (outside in ignored, inside in ignored, given in ignored) == (True, False, True)
    assert len(ignored) == 0 and list(ignored) == []  # Kopf only asks `in`


def registry(startup: Callable[..., Any]) -> kopf.OperatorRegistry:
    """A registry with one startup handler that keeps the operator off the network (no watch, no events), and a
    login handler: Kopf will not run without credentials."""
    reg = kopf.OperatorRegistry()

    @kopf.on.startup(registry=reg)
    async def configure(settings: kopf.OperatorSettings, **kwargs: Any) -> None:
        settings.scanning.disabled = True
        settings.posting.enabled = False
        await startup(settings=settings, **kwargs)

    @kopf.on.login(registry=reg)
    def login(memo: kopf.Memo, **_: Any) -> kopf.ConnectionInfo:  # never used: nothing is watched
        return kopf.ConnectionInfo(server=f"https://{memo.name}.invalid", token=memo.name)

    return reg


@pytest.mark.filterwarnings("ignore:coroutine 'authenticator' was never awaited")  # Kopf's, after a failed start
async def test_one_nodes_end_stops_neither_the_other_node_nor_its_tasks() -> None:
    started: dict[str, asyncio.Task[None]] = {}
    vaults: dict[str, object] = {}

    async def healthy(memo: kopf.Memo, **_: Any) -> None:
        vaults[memo.name] = auth.vault_var.get()
        started[memo.name] = asyncio.create_task(asyncio.sleep(3600), name=f"{memo.name}'s loop")

    async def broken(memo: kopf.Memo, **_: Any) -> None:
        vaults[memo.name] = auth.vault_var.get()
        started[memo.name] = asyncio.create_task(asyncio.sleep(3600), name=f"{memo.name}'s loop")
        raise kopf.PermanentError("cannot start")

    async with tagging() as owners:
        stops = {name: asyncio.Event() for name in ("a", "b")}
        spawned = {name: asyncio.Event() for name in ("a", "b")}
        tasks = {name: asyncio.create_task(hollow.run_operator(
            name, owners=owners, stop=stops[name], spawned=spawned[name], memo=kopf.Memo(name=name),
            registry=registry(startup))) for name, startup in (("a", healthy), ("b", broken))}
        with pytest.raises(Exception, match="One or more handlers failed"):  # kopf's ActivityError
            await asyncio.wait_for(tasks["b"], 30)  # b's startup failed: its operator ended
        assert started["b"].cancelled()  # its own tasks were stopped with it
        assert not tasks["a"].done() and not started["a"].done()  # a's were not (Kopf would stop every task)
        assert vaults["a"] is not vaults["b"]  # each its own credentials
        stops["a"].set()
        await asyncio.wait_for(tasks["a"], 30)
        assert started["a"].cancelled()


def test_log_lines_from_a_node_name_it() -> None:
    record = logging.LogRecord("kopflet.node", logging.INFO, __file__, 1, "registered node %s", ("x",), None)
    context = contextvars.copy_context()
    context.run(hollow.NODE.set, "hollow-node-7")
    names = hollow.NodeNames()
    assert context.run(names.filter, record)
    assert context.run(names.filter, record)  # a second handler: named once
    assert record.getMessage() == "[hollow-node-7] registered node x"
    plain = logging.LogRecord("kopflet.node", logging.INFO, __file__, 1, "hollow: %d nodes", (3,), None)
    assert names.filter(plain) and plain.getMessage() == "hollow: 3 nodes"


@pytest.mark.parametrize(("argv", "start", "pull"), [
    ([], Latencies().start, Latencies().pull),
    (["--runtime-latency=zero"], 0.0, 0.0),
    (["--runtime-latency=zero", "--runtime-latency-of=pull=1.5"], 0.0, 1.5),
])
def test_each_nodes_runtime_has_the_chosen_latencies_and_its_own_pod_range(argv: list[str], start: float,
                                                                           pull: float) -> None:
    options = hollow_plan.parse_args(["--nodes=2", "--state-dir=/s", "--bootstrap-kubeconfig=/b", *argv])
    nodes = hollow_plan.plan(options)
    sims = [hollow.simulation(options, node) for node in nodes]
    assert [(s.latencies.start, s.latencies.pull) for s in sims] == [(start, pull)] * 2
    assert [s.pod_cidrs for s in sims] == [("10.224.0.0/24",), ("10.224.1.0/24",)]
    assert [s.image_fs_path for s in sims] == ["/s/hollow-node-0", "/s/hollow-node-1"]


def test_an_unknown_runtime_call_is_refused() -> None:
    options = hollow_plan.parse_args(["--nodes=1", "--bootstrap-kubeconfig=/b", "--runtime-latency-of=strat=1"])
    with pytest.raises(hollow_plan.PlanError, match="no such call strat"):
        hollow.simulation(options, hollow_plan.plan(options)[0])


def test_a_bad_plan_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert hollow.main(["--nodes=2", "--kubeconfig=/etc/node.conf"]) == hollow.USAGE_ERROR
    assert "kopflet hollow: --kubeconfig: set per hollow node by kopflet hollow" in capsys.readouterr().err

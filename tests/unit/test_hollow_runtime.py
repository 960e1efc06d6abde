"""The hollow node's simulated runtime, driven through kopflet's real CRI client on a temporary unix socket.

The runtime is part of the product (what a hollow node's agent talks to), so these tests hold it to what the agent
relies on: containerd's lifecycle, filters, error codes and texts, its event streams, and the configured exits and
latencies. Latencies are asserted by the order of what happens, never by wall-clock bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest

from cri_client import CriClient, CriError
from cri_client import types as cri
from cri_client.proto import events_pb2 as events_pb
from cri_client.proto import events_pb2_grpc as events_grpc
from kopflet.config.settings import AgentConfig
from kopflet.hollow import runtime as hollow
from kopflet.hollow.runtime import ExitRule, HollowRuntime, Latencies, Simulation
from kopflet.node import Runtime

BUSYBOX = "docker.io/library/busybox:1.36"
E = cri.ContainerEventType


@contextlib.asynccontextmanager
async def serve(simulation: Simulation | None = None) -> AsyncIterator[tuple[HollowRuntime, CriClient]]:
    """A started runtime (no latency unless the simulation says) and an open client on it."""
    simulation = simulation or Simulation(latencies=Latencies.zero())
    with tempfile.TemporaryDirectory(prefix="kopflet-hollow-") as tmp:
        runtime = HollowRuntime(Path(tmp) / "run" / "cri.sock", simulation)
        async with runtime, CriClient(runtime.endpoint, timeout=10) as client:
            yield runtime, client


def sandbox_config(name: str = "web", uid: str = "uid-1", attempt: int = 0, *, host_network: bool = False,
                   labels: dict[str, str] | None = None) -> cri.PodSandboxConfig:
    mode = cri.NamespaceMode.NODE if host_network else cri.NamespaceMode.POD
    return cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(name=name, namespace="default", uid=uid, attempt=attempt),
        log_directory=f"/var/log/pods/default_{name}_{uid}",
        labels={"io.kubernetes.pod.uid": uid, **(labels or {})},
        annotations={"note": name},
        linux=cri.LinuxSandboxConfig(security_context=cri.SandboxSecurityContext(
            namespace_options=cri.NamespaceOptions(network=mode, pid=cri.NamespaceMode.CONTAINER))))


def container_config(name: str = "app", image: str = BUSYBOX, *, command: tuple[str, ...] = (),
                     args: tuple[str, ...] = (), attempt: int = 0,
                     labels: dict[str, str] | None = None) -> cri.ContainerConfig:
    return cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name=name, attempt=attempt), image=image, user_specified_image=image,
        command=command, args=args, labels={"io.kubernetes.container.name": name, **(labels or {})},
        annotations={"io.kubernetes.container.restartCount": str(attempt)}, log_path=f"{name}/{attempt}.log",
        linux=cri.LinuxContainerConfig(resources=cri.LinuxContainerResources(memory_limit_in_bytes=1 << 26)))


async def pod(client: CriClient, config: cri.PodSandboxConfig | None = None,
              containers: tuple[cri.ContainerConfig, ...] = (), *, start: bool = True) -> tuple[str, list[str]]:
    """A sandbox with containers (their images pulled), started unless told not to."""
    config = config or sandbox_config()
    sandbox_id = await client.sandboxes.run(config)
    ids = []
    for container in containers:
        ref = await client.images.pull(container.image)
        ids.append(await client.containers.create(sandbox_id, dataclasses.replace(container, image=ref), config))
        if start:
            await client.containers.start(ids[-1])
    return sandbox_id, ids


async def until(call: Callable[[], Awaitable[Any]], tries: int = 300) -> Any:
    """The call's answer once the runtime is reachable again, after a bounded number of short sleeps."""
    for _ in range(tries):
        try:
            return await call()
        except CriError as exc:
            if not exc.unavailable:
                raise
        await asyncio.sleep(0.01)
    raise AssertionError("the runtime never came back")


class Events:
    """A client event stream read in the background, to be awaited event by event."""

    def __init__(self, stream: AsyncIterator[cri.ContainerEvent]) -> None:
        self.queue: asyncio.Queue[cri.ContainerEvent | None] = asyncio.Queue()
        self.task = asyncio.get_running_loop().create_task(self._read(stream))

    async def _read(self, stream: AsyncIterator[cri.ContainerEvent]) -> None:
        try:
            async for event in stream:
                self.queue.put_nowait(event)
        finally:
            self.queue.put_nowait(None)

    async def next(self) -> cri.ContainerEvent | None:
        return await asyncio.wait_for(self.queue.get(), 10)

    async def synced(self, client: CriClient) -> None:
        """Wait until the server holds the subscription: sandboxes are run and removed until their events arrive,
        then the queue is drained up to the last one's removal."""
        for n in range(100):
            sandbox_id = await client.sandboxes.run(sandbox_config(f"sync{n}", f"uid-sync{n}"))
            await client.sandboxes.remove(sandbox_id)
            try:
                event = await asyncio.wait_for(self.queue.get(), 0.05)
            except TimeoutError:
                continue
            while event is not None and not (event.container_id == sandbox_id and event.type == E.DELETED):
                event = await self.next()
            assert event is not None, "the stream ended"
            return
        raise AssertionError("the event stream never opened")

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


# ---------------------------------------------------------------------------------------------- runtime


@pytest.mark.parametrize(("driver", "expected"), [
    (None, None), ("systemd", cri.CGROUP_DRIVER_SYSTEMD), ("cgroupfs", cri.CGROUP_DRIVER_CGROUPFS)])
async def test_version_status_and_runtime_config(driver: str | None, expected: int | None) -> None:
    async with serve(Simulation(latencies=Latencies.zero(), cgroup_driver=driver)) as (_, client):
        version = await client.check_runtime()
        status = await client.status()
        if expected is None:
            with pytest.raises(CriError) as info:
                await client.runtime_config()
            assert info.value.unimplemented  # containerd 1.6: the agent keeps its configured cgroupDriver
        else:
            assert (await client.runtime_config()).linux_cgroup_driver == expected
    assert (version.runtime_name, version.runtime_api_version) == ("hollow", "v1")
    for kind in ("RuntimeReady", "NetworkReady"):
        condition = status.condition(kind)
        assert condition is not None and condition.status
    assert {h.name for h in status.handlers} == {"", "runc"}


async def test_sandbox_and_container_lifecycle() -> None:
    async with serve() as (_, client):
        config = sandbox_config()
        image_id = await client.images.pull(BUSYBOX)
        sandbox_id = await client.sandboxes.run(config)
        sandbox = await client.sandboxes.status(sandbox_id)
        container = container_config()
        container_id = await client.containers.create(sandbox_id, dataclasses.replace(container, image=image_id),
                                                      config)
        created = await client.containers.status(container_id)
        await client.containers.start(container_id)
        running = await client.containers.status(container_id)
        await client.containers.stop(container_id, timeout=30)
        exited = await client.containers.status(container_id)
        await client.containers.remove(container_id)
        with pytest.raises(CriError) as removed:
            await client.containers.status(container_id)
        await client.sandboxes.stop(sandbox_id)
        stopped = await client.sandboxes.status(sandbox_id)
        await client.sandboxes.remove(sandbox_id)
        with pytest.raises(CriError) as gone:
            await client.sandboxes.status(sandbox_id)
        left = await client.sandboxes.list(), await client.containers.list()

    assert sandbox.state == cri.SandboxState.READY and sandbox.ip.startswith("10.88.")
    assert (sandbox.metadata, sandbox.labels, sandbox.annotations) == (config.metadata, config.labels,
                                                                       config.annotations)
    assert sandbox.namespace_options is not None and sandbox.namespace_options.pid == cri.NamespaceMode.CONTAINER
    assert (created.state, created.started_at, created.finished_at) == (cri.ContainerState.CREATED, 0, 0)
    assert created.created_at > 0 and created.metadata == container.metadata
    assert (created.labels, created.annotations) == (container.labels, container.annotations)
    assert created.log_path == "/var/log/pods/default_web_uid-1/app/0.log"
    assert created.resources is not None and created.resources.memory_limit_in_bytes == 1 << 26
    assert running.state == cri.ContainerState.RUNNING and running.started_at >= running.created_at
    assert exited.state == cri.ContainerState.EXITED and exited.finished_at >= exited.started_at
    assert (exited.exit_code, exited.reason) == (0, "Completed")  # upstream's fake: 0 on a stop too
    # containerd's ContainerStatus: the image's repo tag, its repo digest, its ID.
    assert (exited.image, exited.image_id) == (BUSYBOX, image_id)
    assert exited.image_ref.startswith("docker.io/library/busybox@sha256:")
    assert removed.value.not_found
    assert (stopped.state, stopped.ip) == (cri.SandboxState.NOTREADY, "")
    assert gone.value.not_found
    assert left == ([], [])


@pytest.mark.parametrize(("how", "code", "reason"), [
    ("stop with grace", 0, "Completed"),
    ("stop without grace", 137, "Error"),
    ("stop sandbox", 137, "Error"),
])
async def test_what_a_stop_exits_with(how: str, code: int, reason: str) -> None:
    async with serve() as (_, client):
        sandbox_id, [container_id] = await pod(client, containers=(container_config(),))
        if how == "stop sandbox":
            await client.sandboxes.stop(sandbox_id)
        else:
            await client.containers.stop(container_id, timeout=30 if how == "stop with grace" else 0)
        status = await client.containers.status(container_id)
    assert (status.state, status.exit_code, status.reason) == (cri.ContainerState.EXITED, code, reason)


async def test_remove_sandbox_removes_its_containers_and_frees_names() -> None:
    async with serve() as (_, client):
        sandbox_id, [container_id] = await pod(client, containers=(container_config(),))
        with pytest.raises(CriError) as taken:
            await client.sandboxes.run(sandbox_config())
        await client.sandboxes.remove(sandbox_id)
        with pytest.raises(CriError) as gone:
            await client.containers.status(container_id)
        again = await client.sandboxes.run(sandbox_config())
    assert taken.value.code == "FAILED_PRECONDITION"
    assert taken.value.details == (f'failed to reserve sandbox name "web_default_uid-1_0": name '
                                   f'"web_default_uid-1_0" is reserved for "{sandbox_id}"')
    assert gone.value.not_found and again != sandbox_id


@pytest.mark.parametrize(("driver", "expected"), [(None, ""), ("systemd", "systemd")])
async def test_the_agents_runtime_connection_accepts_it(driver: str | None, expected: str) -> None:
    """What the agent does at start (upstream getRuntimeAndImageServices): CRI v1 checked, the cgroup driver asked."""
    async with serve(Simulation(latencies=Latencies.zero(), cgroup_driver=driver)) as (runtime, _):
        cfg = AgentConfig(node_name="hollow-0", runtime_endpoint=runtime.endpoint, image_endpoint=runtime.endpoint)
        connected = await Runtime.connect(cfg)
        await connected.cri.close()
    assert (connected.name, connected.api_version, connected.cgroup_driver) == ("hollow", "v1", expected)
    assert connected.image_cri is connected.cri


# ---------------------------------------------------------------------------------------------- filters


@pytest.mark.parametrize(("kind", "make_filter", "expected"), [
    ("sandboxes", lambda ids: None, {"a", "b"}),
    ("sandboxes", lambda ids: cri.PodSandboxFilter(id=ids["a"]), {"a"}),
    ("sandboxes", lambda ids: cri.PodSandboxFilter(id=ids["b"][:12]), {"b"}),
    ("sandboxes", lambda ids: cri.PodSandboxFilter(state=cri.SandboxState.NOTREADY), {"b"}),
    ("sandboxes", lambda ids: cri.PodSandboxFilter(label_selector={"tier": "front"}), {"a"}),
    ("sandboxes", lambda ids: cri.PodSandboxFilter(label_selector={"tier": "front", "x": "y"}), set()),
    ("containers", lambda ids: None, {"a1", "a2", "b1"}),
    ("containers", lambda ids: cri.ContainerFilter(id=ids["a2"]), {"a2"}),
    ("containers", lambda ids: cri.ContainerFilter(state=cri.ContainerState.RUNNING), {"a1"}),
    ("containers", lambda ids: cri.ContainerFilter(state=cri.ContainerState.CREATED), {"a2"}),
    ("containers", lambda ids: cri.ContainerFilter(state=cri.ContainerState.EXITED), {"b1"}),
    ("containers", lambda ids: cri.ContainerFilter(pod_sandbox_id=ids["a"]), {"a1", "a2"}),
    ("containers", lambda ids: cri.ContainerFilter(label_selector={"role": "main"}), {"a1", "b1"}),
    ("containers", lambda ids: cri.ContainerFilter(pod_sandbox_id=ids["b"], label_selector={"role": "main"}),
     {"b1"}),
])
async def test_list_filters(kind: str, make_filter: Callable[[dict[str, str]], Any], expected: set[str]) -> None:
    async with serve() as (_, client):
        a, (a1, a2) = await pod(client, sandbox_config("a", "uid-a", labels={"tier": "front"}), (
            container_config("a1", labels={"role": "main"}), container_config("a2")), start=False)
        await client.containers.start(a1)
        b, (b1,) = await pod(client, sandbox_config("b", "uid-b"), (container_config("b1", labels={"role": "main"}),))
        await client.sandboxes.stop(b)
        ids = {"a": a, "b": b, "a1": a1, "a2": a2, "b1": b1}
        names = {value: key for key, value in ids.items()}
        if kind == "sandboxes":
            found = {names[s.id] for s in await client.sandboxes.list(make_filter(ids))}
        else:
            found = {names[c.id] for c in await client.containers.list(make_filter(ids))}
    assert found == expected


# -------------------------------------------------------------------------------------------- not found


@pytest.mark.parametrize(("call", "details"), [
    (lambda c: c.containers.status("nope"), 'an error occurred when try to find container "nope": not found'),
    (lambda c: c.containers.start("nope"), 'an error occurred when try to find container "nope": not found'),
    (lambda c: c.containers.reopen_log("nope"), 'an error occurred when try to find container "nope": not found'),
    (lambda c: c.sandboxes.status("nope"), "an error occurred when try to find sandbox: not found"),
    (lambda c: c.containers.exec_sync("nope", ["true"]),
     'failed to exec in container: failed to find container "nope" in store: not found'),
    (lambda c: c.containers.stats("nope"), "failed to find container: not found"),
    (lambda c: c.sandboxes.stats("nope"), "an error occurred when trying to find sandbox nope: not found"),
    (lambda c: c.containers.update_resources("nope", cri.LinuxContainerResources()),
     "failed to find container: not found"),
    (lambda c: c.containers.create("nope", container_config(), sandbox_config()),
     'failed to find sandbox id "nope": not found'),
])
async def test_absent_objects_are_not_found_with_containerds_text(
        call: Callable[[CriClient], Awaitable[Any]], details: str) -> None:
    async with serve() as (_, client):
        with pytest.raises(CriError) as info:
            await call(client)
    assert info.value.not_found
    assert info.value.details == details


@pytest.mark.parametrize("call", [
    lambda c: c.containers.stop("nope", 10), lambda c: c.containers.remove("nope"),
    lambda c: c.sandboxes.stop("nope"), lambda c: c.sandboxes.remove("nope"), lambda c: c.images.remove("nope"),
])
async def test_stop_and_remove_of_absent_objects_succeed(call: Callable[[CriClient], Awaitable[Any]]) -> None:
    async with serve() as (_, client):
        assert await call(client) is None


async def test_a_missing_image_fails_create() -> None:
    async with serve() as (_, client):
        sandbox_id = await client.sandboxes.run(sandbox_config())
        with pytest.raises(CriError) as info:
            await client.containers.create(sandbox_id, container_config(image="nginx:1"), sandbox_config())
        # The name was given back with the failure: the same container can be created once the image is there.
        await client.images.pull("nginx:1")
        assert await client.containers.create(sandbox_id, container_config(image="nginx:1"), sandbox_config())
    assert info.value.not_found and info.value.details == 'failed to resolve image "nginx:1": not found'


@pytest.mark.parametrize(("call", "code", "details"), [
    (lambda c, i: c.containers.start(i), "UNKNOWN", "container is in CONTAINER_EXITED state"),
    (lambda c, i: c.containers.exec_sync(i, ["true"]), "UNKNOWN",
     "failed to exec in container: container is in CONTAINER_EXITED state"),
    (lambda c, i: c.containers.reopen_log(i), "UNKNOWN", "container is not running"),
])
async def test_calls_an_exited_container_refuses(call: Callable[[CriClient, str], Awaitable[Any]], code: str,
                                                 details: str) -> None:
    async with serve() as (_, client):
        _, [container_id] = await pod(client, containers=(container_config(),))
        await client.containers.stop(container_id, 0)
        with pytest.raises(CriError) as info:
            await call(client, container_id)
    assert (info.value.code, info.value.details) == (code, details)


# ----------------------------------------------------------------------------------------------- events


async def test_containerd_events_seen_through_the_client() -> None:
    async with serve() as (runtime, client):
        events = Events(client.containerd_events())
        await events.synced(client)
        sandbox_id, [container_id] = await pod(client, containers=(container_config(),))
        await client.containers.exec_sync(container_id, ["sh", "-c", "exit 4"])  # an exec's exit is not the task's
        await client.containers.stop(container_id, 30)
        await client.containers.remove(container_id)
        await client.sandboxes.stop(sandbox_id)
        await client.sandboxes.remove(sandbox_id)
        seen = [await events.next() for _ in range(6)]
        await runtime.stop()
        end = await events.next()  # the stream ends with the runtime
        await events.close()
    assert [(e.type, e.container_id) for e in seen if e is not None] == [
        (E.STARTED, sandbox_id), (E.STARTED, container_id), (E.STOPPED, container_id), (E.DELETED, container_id),
        (E.STOPPED, sandbox_id), (E.DELETED, sandbox_id)]
    assert all(e is not None and e.created_at > 0 for e in seen)
    assert end is None


async def test_cri_container_events_seen_through_the_client() -> None:
    async with serve() as (_, client):
        events = Events(client.container_events())
        await events.synced(client)
        sandbox_id = await client.sandboxes.run(sandbox_config())
        await client.images.pull(BUSYBOX)
        container_id = await client.containers.create(sandbox_id, container_config(), sandbox_config())
        await client.containers.start(container_id)
        await client.containers.remove(container_id)  # a running container: killed, then removed
        seen = [await events.next() for _ in range(6)]
        await events.close()
    assert [(e.type, e.container_id) for e in seen if e is not None] == [
        (E.CREATED, sandbox_id), (E.STARTED, sandbox_id), (E.CREATED, container_id), (E.STARTED, container_id),
        (E.STOPPED, container_id), (E.DELETED, container_id)]


async def test_containerd_subscribers_filters_are_honoured() -> None:
    """A raw subscriber asking for task exits alone gets nothing else; a bad filter is INVALID_ARGUMENT."""
    async with serve() as (_, client):
        channel = grpc.aio.insecure_channel(client.endpoint)
        stub = events_grpc.EventsStub(channel)
        call = stub.Subscribe(events_pb.SubscribeRequest(filters=['topic=="/tasks/exit"']))
        bad = stub.Subscribe(events_pb.SubscribeRequest(filters=['topic=="/tasks/exit" junk']))
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await bad.read()
        # The filtered stream is known to be open once an exit arrives: kill containers until one does.
        reading = asyncio.ensure_future(call.read())
        for n in range(100):
            if reading.done():
                break
            _, [warm] = await pod(client, sandbox_config(f"warm{n}", f"uid-w{n}"), (container_config(),))
            await client.containers.stop(warm, 0)
            await asyncio.sleep(0.01)
        envelopes = [await asyncio.wait_for(reading, 10)]
        second_id, [second] = await pod(client, sandbox_config("two", "uid-2"), (container_config(),))
        await client.containers.stop(second, 0)
        await client.sandboxes.stop(second_id)
        exits = [events_pb.TaskExit.FromString(envelopes[0].event.value)]
        while exits[-1].container_id != second_id:
            envelopes.append(await asyncio.wait_for(call.read(), 10))
            exits.append(events_pb.TaskExit.FromString(envelopes[-1].event.value))
        call.cancel()
        await channel.close()
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert {e.topic for e in envelopes} == {"/tasks/exit"}  # none of the starts
    assert [(x.container_id, x.exit_status) for x in exits[-2:]] == [(second, 137), (second_id, 137)]
    assert all(e.namespace == "k8s.io" and e.event.type_url == "containerd.events.TaskExit" for e in envelopes)


@pytest.mark.parametrize(("filters", "topic", "matches"), [
    ([], "/tasks/exit", True),
    (['topic=="/tasks/exit"'], "/tasks/exit", True),
    (['topic=="/tasks/exit"'], "/tasks/start", False),
    (['namespace=="k8s.io",topic=="/tasks/start"'], "/tasks/start", True),
    (['namespace=="moby",topic=="/tasks/start"'], "/tasks/start", False),
    (['topic=="/tasks/exit"', 'topic=="/tasks/start"'], "/tasks/start", True),
    (['topic!="/tasks/exit"'], "/tasks/start", True),
    (['topic~="^/tasks/"'], "/tasks/start", True),
    (['topic~="^/containers/"'], "/tasks/start", False),
    (["topic"], "/tasks/start", True),
    (['event.id=="x"'], "/tasks/start", False),
])
def test_event_filters(filters: list[str], topic: str, matches: bool) -> None:
    envelope = events_pb.Envelope(topic=topic, namespace="k8s.io")
    assert hollow._envelope_matches(envelope, [hollow._parse_filter(f) for f in filters]) is matches


@pytest.mark.parametrize("text", ['topic=="a" x', "", 'topic=="a",', "==x", 'topic=="unterminated'])
def test_bad_event_filters_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="parse error"):
        hollow._parse_filter(text)


# ------------------------------------------------------------------------------------------------ exits


@pytest.mark.parametrize(("rules", "command", "args", "code", "reason"), [
    ((), ("sh", "-c", "exit 3"), (), 3, "Error"),
    ((), ("/bin/bash",), ("-c", "exit 0"), 0, "Completed"),
    ((ExitRule(image="busybox:1.36", exit_code=1),), (), (), 1, "Error"),
    ((ExitRule(command=("run", "job"), exit_code=0),), ("run",), ("job",), 0, "Completed"),
    ((ExitRule(image="nginx", exit_code=9), ExitRule(exit_code=137, reason="OOMKilled")), (), (), 137, "OOMKilled"),
    ((ExitRule(exit_code=5),), ("sh", "-c", "exit 3"), (), 5, "Error"),  # a rule before the shell one-liner
])
async def test_simulated_exits(rules: tuple[ExitRule, ...], command: tuple[str, ...], args: tuple[str, ...],
                               code: int, reason: str) -> None:
    async with serve(Simulation(latencies=Latencies.zero(), exit_rules=rules, shell_exit_after=0.01)) as (_, client):
        events = Events(client.containerd_events())
        await events.synced(client)
        _, [container_id] = await pod(client, containers=(container_config(command=command, args=args),))
        while (event := await events.next()) is not None and not (event.container_id == container_id
                                                                  and event.type == E.STOPPED):
            pass
        status = await client.containers.status(container_id)
        await events.close()
    assert (status.state, status.exit_code, status.reason) == (cri.ContainerState.EXITED, code, reason)


@pytest.mark.parametrize(("simulation", "command"), [
    (Simulation(latencies=Latencies.zero()), ("sleep", "3600")),
    (Simulation(latencies=Latencies.zero(), shell_exit_after=None), ("sh", "-c", "exit 3")),
    (Simulation(latencies=Latencies.zero(), exit_rules=(ExitRule(image="nginx"),)), ("sh", "-c", "sleep 1; exit 1")),
])
async def test_containers_without_an_exit_run_until_stopped(simulation: Simulation, command: tuple[str, ...]) -> None:
    async with serve(simulation) as (runtime, client):
        _, [container_id] = await pod(client, containers=(container_config(command=command),))
        for _ in range(5):  # a few loop turns in which an exit could have happened
            await asyncio.sleep(0.02)
        status = await client.containers.status(container_id)
        crashed = runtime.exit_container(container_id, 2, "Crashed")
        after = await client.containers.status(container_id)
    assert status.state == cri.ContainerState.RUNNING
    assert crashed and (after.state, after.exit_code, after.reason) == (cri.ContainerState.EXITED, 2, "Crashed")


@pytest.mark.parametrize(("argv", "code"), [
    (["sh", "-c", "exit 3"], 3), (["/bin/sh", "-c", " exit 300 ;"], 44), (["dash", "-c", "exit"], 0),
    (["sh", "-c", "echo; exit 3"], None), (["python", "-c", "exit 3"], None), (["sh", "exit 3"], None), ([], None),
])
def test_shell_one_liners(argv: list[str], code: int | None) -> None:
    assert hollow._shell_exit(argv) == code


async def test_exec_sync() -> None:
    async with serve() as (_, client):
        _, [container_id] = await pod(client, containers=(container_config(),))
        plain = await client.containers.exec_sync(container_id, ["cat", "/etc/hostname"], timeout=1)
        failing = await client.containers.exec_sync(container_id, ["sh", "-c", "exit 2"])
    assert (plain.exit_code, plain.stdout, plain.stderr) == (0, b"", b"")
    assert failing.exit_code == 2


# -------------------------------------------------------------------------------------------- latencies


async def test_latencies_order_what_happens() -> None:
    """A slow start issued first finishes after a quick sandbox run issued later: the latency is waited."""
    latencies = dataclasses.replace(Latencies.zero(), start=0.3)
    async with serve(Simulation(latencies=latencies)) as (_, client):
        events = Events(client.containerd_events())
        await events.synced(client)
        _, [container_id] = await pod(client, containers=(container_config(),), start=False)
        starting = asyncio.get_running_loop().create_task(client.containers.start(container_id))
        sandbox_id = await client.sandboxes.run(sandbox_config("quick", "uid-q"))
        during = await client.containers.status(container_id)
        await starting
        order: list[str] = []
        while len(order) < 2 and (event := await events.next()) is not None:
            if event.container_id in (sandbox_id, container_id):  # not the pod's own sandbox
                order.append(event.container_id)
        await events.close()
    assert during.state == cri.ContainerState.CREATED  # not running before its start latency is over
    assert order == [sandbox_id, container_id]


async def test_a_pull_cut_short_by_its_deadline_leaves_no_image() -> None:
    async with serve(Simulation(latencies=dataclasses.replace(Latencies.zero(), pull=5))) as (_, client):
        with pytest.raises(CriError) as info:
            await client.images.pull(BUSYBOX, deadline=0.1)
        await asyncio.sleep(0.05)  # the server's handler is cancelled with the call
        status = await client.images.status(BUSYBOX)
    assert info.value.deadline_exceeded and status is None


async def test_an_exec_slower_than_its_timeout_is_deadline_exceeded() -> None:
    async with serve(Simulation(latencies=dataclasses.replace(Latencies.zero(), exec_sync=5))) as (_, client):
        _, [container_id] = await pod(client, containers=(container_config(),))
        with pytest.raises(CriError) as info:
            await client.containers.exec_sync(container_id, ["true"], timeout=1)
    assert info.value.deadline_exceeded
    assert info.value.details == "failed to exec in container: timeout 1s exceeded: context deadline exceeded"


def test_latencies_default_small_but_not_zero() -> None:
    default, zero = Latencies(), Latencies.zero()
    assert all(0 < value < 1 for value in default.__dict__.values())
    assert set(zero.__dict__.values()) == {0.0}
    with pytest.raises(ValueError, match="negative"):
        Latencies(start=-1)


# ----------------------------------------------------------------------------------------------- images


async def test_images_pull_list_status_remove() -> None:
    async with serve(Simulation(latencies=Latencies.zero(), unpullable=("ghcr.io/x/missing:1",))) as (_, client):
        image_id = await client.images.pull("busybox")
        again = await client.images.pull("docker.io/library/busybox:latest")
        listed = await client.images.list()
        by_name, by_id = await client.images.status("busybox:latest"), await client.images.status(image_id)
        assert by_name is not None
        by_digest = await client.images.status(by_name.repo_digests[0])
        with pytest.raises(CriError) as missing:
            await client.images.pull("ghcr.io/x/missing:1")
        fs = await client.images.fs_info()
        fs_exists = await asyncio.to_thread(Path(fs.image_filesystems[0].mountpoint).is_dir)
        await client.images.remove("busybox")
        after = await client.images.status(image_id), await client.images.list()
    assert again == image_id and image_id.startswith("sha256:")
    assert by_name == by_id == by_digest
    assert by_name.repo_tags == ("docker.io/library/busybox:latest",) and not by_name.pinned
    pause = next(i for i in listed if i.repo_tags == ("registry.k8s.io/pause:3.10",))
    assert pause.pinned and {i.id for i in listed} == {pause.id, image_id}
    assert missing.value.not_found and missing.value.details == (
        'failed to pull and unpack image "ghcr.io/x/missing:1": failed to resolve reference "ghcr.io/x/missing:1": '
        'ghcr.io/x/missing:1: not found')
    assert fs.image_filesystems[0].used_bytes == 2 * by_name.size > 0
    assert fs_exists  # the agent statvfs()es it
    assert after == (None, [pause])


# ---------------------------------------------------------------------------------------- IPs and stats


async def test_pod_ips_come_from_the_cidr_and_go_back() -> None:
    async with serve(Simulation(latencies=Latencies.zero(), pod_cidrs=("10.1.0.0/30", "fd00::/126"))) as (_, client):
        first = await client.sandboxes.run(sandbox_config("one", "uid-1"))
        host = await client.sandboxes.run(sandbox_config("host", "uid-h", host_network=True))
        with pytest.raises(CriError) as full:
            await client.sandboxes.run(sandbox_config("two", "uid-2"))
        first_status = await client.sandboxes.status(first)
        host_status = await client.sandboxes.status(host)
        await client.sandboxes.stop(first)
        second = await client.sandboxes.status(await client.sandboxes.run(sandbox_config("two", "uid-2")))
    assert first_status.ips == ("10.1.0.2", "fd00::2")
    assert host_status.ips == ()  # the node's network: the agent reports the node's IPs
    assert full.value.code == "UNKNOWN" and full.value.details.endswith(
        "no IP addresses available in range set: 10.1.0.1-10.1.0.2")
    assert second.ips == ("10.1.0.2", "fd00::3")  # host-local's way: the next free address after the last given


async def test_stats_and_resources() -> None:
    async with serve() as (_, client):
        sandbox_id, (running, created) = await pod(
            client, containers=(container_config("a"), container_config("b")), start=False)
        await client.containers.start(running)
        one = await client.containers.stats(running)
        listed = await client.containers.list_stats()
        sandbox = await client.sandboxes.stats(sandbox_id)
        await client.containers.update_resources(created, cri.LinuxContainerResources(cpu_shares=512))
        updated = await client.containers.status(created)
    assert one.id == running and one.cpu is not None and one.memory is not None
    assert [s.id for s in listed] == [running]  # containerd lists the running containers' stats
    assert sandbox.linux is not None and [c.id for c in sandbox.linux.containers] == [running]
    assert updated.resources == cri.LinuxContainerResources(cpu_shares=512)


@pytest.mark.parametrize("call", [
    lambda c, i: c.containers.exec(i, ["sh"]), lambda c, i: c.containers.attach(i),
])
async def test_streaming_calls_are_unimplemented(call: Callable[[CriClient, str], Awaitable[Any]]) -> None:
    async with serve() as (_, client):
        _, [container_id] = await pod(client, containers=(container_config(),))
        with pytest.raises(CriError) as info:
            await call(client, container_id)
    assert info.value.unimplemented


# ----------------------------------------------------------------------------------------------- server


async def test_log_files_are_created_when_asked() -> None:
    with tempfile.TemporaryDirectory(prefix="kopflet-hollow-logs-") as logs:
        config = dataclasses.replace(sandbox_config(), log_directory=logs)
        async with serve(Simulation(latencies=Latencies.zero(), log_files=True)) as (_, client):
            _, [container_id] = await pod(client, config, (container_config(),))
            status = await client.containers.status(container_id)
        created = await asyncio.to_thread(Path(status.log_path).is_file)
    assert status.log_path == f"{logs}/app/0.log" and created


async def test_a_restarted_runtime_keeps_its_state_and_the_socket_goes_with_it() -> None:
    async with serve() as (runtime, client):
        sandbox_id, [container_id] = await pod(client, containers=(container_config(),))
        await runtime.stop()
        socket_gone = not runtime.socket_path.exists()
        with pytest.raises(CriError) as down:
            await client.containers.status(container_id)
        runtime.socket_path.touch()  # a stale file where the socket goes is replaced
        await runtime.start()
        back = await until(lambda: client.containers.status(container_id))  # the channel reconnects by itself
        counts = runtime.counts()
    assert socket_gone and down.value.unavailable
    assert back.state == cri.ContainerState.RUNNING
    assert counts == {"sandboxes": 1, "ready_sandboxes": 1, "containers": 1, "running_containers": 1, "images": 2}
    assert sandbox_id


def test_simulation_refuses_what_it_cannot_do() -> None:
    with pytest.raises(ValueError, match="cgroup driver"):
        Simulation(cgroup_driver="cgroupv3")
    with pytest.raises(ValueError):
        Simulation(pod_cidrs=("10.0.0.0/33",))
    with pytest.raises(ValueError, match="not a valid reference"):
        HollowRuntime("/tmp/x.sock", Simulation(images=("Busybox",)))

"""kopflet.container.labels and kopflet.container.podstate: runtime labels round trips and grouping CRI state into
pods."""

from __future__ import annotations

import json
from typing import Any

import pytest

from cri_client import types as cri
from kopflet.api.spec import Pod, pod_from_body
from kopflet.container import labels, podstate
from kopflet.container.podstate import State


def make_pod(uid: str = "uid-a", name: str = "web", **container: Any) -> Pod:
    return pod_from_body({
        "metadata": {"name": name, "namespace": "shop", "uid": uid, "labels": {"app": "web"},
                     "annotations": {"team": "blue"}},
        "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                 "containers": [{"name": "app", "image": "nginx:1.27", **container}]},
    })


def sandbox(pod: Pod, sid: str, attempt: int, created: int, *, ready: bool = True, ip: str = "10.0.0.5",
            mode: cri.NamespaceMode | None = None) -> cri.PodSandboxStatus:
    return cri.PodSandboxStatus(
        id=sid,
        metadata=cri.PodSandboxMetadata(name=pod.name, namespace=pod.namespace, uid=pod.uid, attempt=attempt),
        state=cri.SandboxState.READY if ready else cri.SandboxState.NOTREADY,
        created_at=created, ip=ip,
        namespace_options=None if mode is None else cri.NamespaceOptions(network=mode),
        labels=labels.sandbox_labels(pod), annotations=labels.sandbox_annotations(pod),
    )


def container(pod: Pod, cid: str, name: str, created: int, *, state: cri.ContainerState = cri.ContainerState.RUNNING,
              restart_count: int = 0, exit_code: int = 0, finished: int = 0) -> cri.ContainerStatus:
    spec = pod.spec.container(name)
    assert spec is not None
    return cri.ContainerStatus(
        id=cid, metadata=cri.ContainerMetadata(name=name, attempt=restart_count), state=state,
        created_at=created, started_at=created + 1, finished_at=finished, exit_code=exit_code,
        image=spec.image, image_ref=f"{spec.image}@sha256:abc", image_id="sha256:def",
        reason="Error" if exit_code else "", message="",
        labels=labels.container_labels(pod, spec),
        annotations=labels.container_annotations(pod, spec, restart_count),
    )


# ------------------------------------------------------------------------------------------------ labels


def test_sandbox_labels_carry_the_pod_labels_and_identity() -> None:
    pod = make_pod()
    assert labels.sandbox_labels(pod) == {
        "app": "web",
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "shop",
        "io.kubernetes.pod.uid": "uid-a",
    }
    assert labels.sandbox_annotations(pod) == {"team": "blue"}
    assert labels.pod_labels(labels.sandbox_labels(pod)) == {"app": "web"}
    assert labels.pod_identity(labels.sandbox_labels(pod)) == labels.PodIdentity(uid="uid-a", name="web",
                                                                                 namespace="shop")
    assert labels.pod_uid(labels.sandbox_labels(pod)) == "uid-a"


def test_identity_labels_win_over_pod_labels_of_the_same_key() -> None:
    pod = pod_from_body({"metadata": {"name": "web", "namespace": "shop", "uid": "real",
                                      "labels": {"io.kubernetes.pod.uid": "forged"}},
                         "spec": {"containers": [{"name": "app", "image": "x"}]}})
    assert labels.sandbox_labels(pod)["io.kubernetes.pod.uid"] == "real"


def test_container_labels_and_annotations_match_upstream_keys() -> None:
    pod = make_pod(ports=[{"containerPort": 80, "name": "http"}, {"containerPort": 53, "protocol": "UDP",
                                                                  "hostPort": 5353}],
                   lifecycle={"preStop": {"exec": {"command": ["sleep", "5"]}}})
    app = pod.spec.containers[0]
    assert labels.container_labels(pod, app) == {
        "io.kubernetes.pod.name": "web",
        "io.kubernetes.pod.namespace": "shop",
        "io.kubernetes.pod.uid": "uid-a",
        "io.kubernetes.container.name": "app",
    }
    assert labels.container_annotations(pod, app, 3) == {
        "io.kubernetes.container.hash": app.hash,
        "io.kubernetes.container.restartCount": "3",
        "io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "io.kubernetes.container.terminationMessagePolicy": "File",
        "io.kubernetes.pod.terminationGracePeriod": "30",
        "io.kubernetes.container.preStopHandler": '{"exec":{"command":["sleep","5"]}}',
        "io.kubernetes.container.ports": '[{"name":"http","containerPort":80,"protocol":"TCP"},'
                                         '{"hostPort":5353,"containerPort":53,"protocol":"UDP"}]',
        "io.kubernetes.container.type": "container",
    }
    setup = pod.spec.init_containers[0]
    init_annotations = labels.container_annotations(pod, setup, 0)
    assert init_annotations["io.kubernetes.container.type"] == "init"
    assert "io.kubernetes.container.ports" not in init_annotations
    assert "io.kubernetes.container.preStopHandler" not in init_annotations
    assert "io.kubernetes.pod.deletionGracePeriod" not in init_annotations


def test_container_annotations_round_trip() -> None:
    body = {"metadata": {"name": "web", "namespace": "shop", "uid": "u", "deletionGracePeriodSeconds": 12,
                         "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"terminationGracePeriodSeconds": 45, "containers": [{
                "name": "app", "image": "nginx", "terminationMessagePath": "/msg",
                "terminationMessagePolicy": "FallbackToLogsOnError", "ports": [{"containerPort": 8080}],
                "lifecycle": {"preStop": {"httpGet": {"path": "/quit", "port": 8080}}}}]}}
    pod = pod_from_body(body)
    app = pod.spec.containers[0]
    info = labels.container_annotations_info(labels.container_annotations(pod, app, 7))
    assert info == labels.ContainerAnnotations(
        hash=app.hash, restart_count=7, termination_message_path="/msg",
        termination_message_policy="FallbackToLogsOnError", pod_deletion_grace_period=12,
        pod_termination_grace_period=45, pre_stop_handler={"httpGet": {"path": "/quit", "port": 8080}},
        ports=({"containerPort": 8080, "protocol": "TCP"},), container_type="container",
    )
    assert labels.container_name(labels.container_labels(pod, app)) == "app"


@pytest.mark.parametrize(("annotations", "expected"), [
    ({}, labels.ContainerAnnotations()),
    ({labels.CONTAINER_HASH: "not-hex", labels.CONTAINER_RESTART_COUNT: "three",
      labels.POD_TERMINATION_GRACE_PERIOD: "soon", labels.POD_DELETION_GRACE_PERIOD: "-1",
      labels.CONTAINER_PRESTOP_HANDLER: "{broken", labels.CONTAINER_PORTS: '{"not": "a list"}'},
     labels.ContainerAnnotations()),
    ({labels.CONTAINER_HASH: "00AbC", labels.CONTAINER_RESTART_COUNT: "-4",
      labels.CONTAINER_PRESTOP_HANDLER: '["not", "an", "object"]', labels.CONTAINER_PORTS: '[1, {"containerPort": 1}]'},
     labels.ContainerAnnotations(hash="abc", ports=({"containerPort": 1},))),
    ({labels.CONTAINER_HASH: "1" * 17}, labels.ContainerAnnotations()),  # more than 64 bits: garbled
])
def test_reading_annotations_never_raises(annotations: dict[str, str], expected: labels.ContainerAnnotations) -> None:
    assert labels.container_annotations_info(annotations) == expected


def test_identity_of_unlabelled_objects_is_empty() -> None:
    assert labels.pod_identity({}) == labels.PodIdentity()
    assert labels.pod_uid({}) == "" and labels.pod_uid({labels.POD_UID: 7}) == ""  # type: ignore[dict-item]
    assert labels.container_name({"other": "x"}) == ""


# ---------------------------------------------------------------------------------------------- podstate


def test_one_pod_sandboxes_and_containers_newest_first() -> None:
    pod = make_pod()
    status = podstate.from_cri(
        [sandbox(pod, "sb0", 0, 100, ready=False), sandbox(pod, "sb1", 1, 200)],
        [container(pod, "c-setup", "setup", 210, state=cri.ContainerState.EXITED, finished=215),
         container(pod, "c-app-0", "app", 220, state=cri.ContainerState.EXITED, exit_code=1, finished=230),
         container(pod, "c-app-1", "app", 240, restart_count=1)],
    )
    assert (status.uid, status.name, status.namespace) == ("uid-a", "web", "shop")
    assert [s.id for s in status.sandboxes] == ["sb1", "sb0"]
    assert status.latest_sandbox == podstate.SandboxInfo(id="sb1", attempt=1, ready=True, ip="10.0.0.5",
                                                         created_at=200, network_mode=cri.NamespaceMode.POD)
    assert status.ips == ("10.0.0.5",)
    assert [c.id for c in status.containers] == ["c-app-1", "c-app-0", "c-setup"]
    latest = status.latest_container("app")
    assert latest is not None and latest.id == "c-app-1" and latest.state is State.RUNNING
    assert latest.restart_count == 1 and latest.attempt == 1
    assert latest.hash == pod.spec.containers[0].hash
    assert latest.termination_message_path == "/dev/termination-log"
    exited = status.latest_exited("app")
    assert exited is not None and exited.id == "c-app-0" and exited.exit_code == 1 and exited.finished_at == 230
    assert exited.reason == "Error" and exited.image == "nginx:1.27" and exited.image_id == "sha256:def"
    assert [c.id for c in status.instances("app")] == ["c-app-1", "c-app-0"]
    assert [c.id for c in status.running_containers()] == ["c-app-1"]
    assert status.latest_container("nope") is None and status.latest_exited("setup").id == "c-setup"


def test_two_pods_are_grouped_by_uid_and_foreign_objects_skipped() -> None:
    a, b = make_pod("uid-a", "web"), make_pod("uid-b", "db")
    foreign_sandbox = cri.PodSandboxStatus(id="foreign", labels={"owner": "docker"})
    foreign_container = cri.ContainerStatus(id="foreign-c", metadata=cri.ContainerMetadata(name="x"))
    pods = podstate.group_by_pod(
        [sandbox(b, "b0", 0, 50), sandbox(a, "a0", 0, 10), sandbox(a, "a1", 1, 20, ready=False), foreign_sandbox],
        [container(a, "a-app", "app", 30), container(b, "b-app-0", "app", 60, state=cri.ContainerState.EXITED),
         container(b, "b-app-1", "app", 70, restart_count=1), foreign_container],
        container_sandbox_ids={"a-app": "a0"},
    )
    assert set(pods) == {"uid-a", "uid-b"}
    assert [s.id for s in pods["uid-a"].sandboxes] == ["a1", "a0"]
    assert pods["uid-a"].ips == ()  # the newest sandbox is not ready
    assert [c.id for c in pods["uid-a"].containers] == ["a-app"]
    assert pods["uid-a"].containers[0].sandbox_id == "a0"
    assert (pods["uid-b"].name, [c.id for c in pods["uid-b"].containers]) == ("db", ["b-app-1", "b-app-0"])


def test_from_cri_needs_a_uid_when_several_pods_are_given() -> None:
    a, b = make_pod("uid-a"), make_pod("uid-b")
    sandboxes = [sandbox(a, "a0", 0, 1), sandbox(b, "b0", 0, 2)]
    with pytest.raises(ValueError, match="2 pods"):
        podstate.from_cri(sandboxes, [])
    assert podstate.from_cri(sandboxes, [], uid="uid-b").sandboxes[0].id == "b0"
    assert podstate.from_cri(sandboxes, [], uid="uid-c") == podstate.RuntimePodStatus(uid="uid-c")
    assert podstate.from_cri([], []) == podstate.RuntimePodStatus(uid="")


def test_containers_without_a_sandbox_still_form_a_pod() -> None:
    pod = make_pod()
    status = podstate.from_cri([], [container(pod, "c1", "app", 5, state=cri.ContainerState.EXITED)])
    assert (status.uid, status.name, status.sandboxes) == ("uid-a", "web", ())
    assert status.latest_sandbox is None and status.ips == ()


def test_sandbox_identity_falls_back_to_metadata() -> None:
    bare = cri.PodSandboxStatus(id="s", metadata=cri.PodSandboxMetadata(name="n", namespace="ns", uid="u", attempt=2))
    status = podstate.from_cri([bare], [])
    assert (status.uid, status.name, status.namespace, status.sandboxes[0].attempt) == ("u", "n", "ns", 2)


@pytest.mark.parametrize(("cri_state", "state"), [
    (cri.ContainerState.CREATED, State.CREATED), (cri.ContainerState.RUNNING, State.RUNNING),
    (cri.ContainerState.EXITED, State.EXITED), (cri.ContainerState.UNKNOWN, State.UNKNOWN),
])
def test_container_states_map_to_upstream_names(cri_state: cri.ContainerState, state: State) -> None:
    info = podstate.container_info(container(make_pod(), "c", "app", 1, state=cri_state))
    assert info.state is state
    assert f"{info.state}" == state.value


def test_container_name_falls_back_to_metadata_and_garbled_annotations_read_as_zero() -> None:
    status = cri.ContainerStatus(id="c", metadata=cri.ContainerMetadata(name="meta-name", attempt=4),
                                 labels={labels.POD_UID: "u"},
                                 annotations={labels.CONTAINER_RESTART_COUNT: "x", labels.CONTAINER_HASH: "?"})
    info = podstate.container_info(status)
    assert (info.name, info.attempt, info.restart_count, info.hash) == ("meta-name", 4, 0, "")


def test_sandbox_network_mode_and_ips() -> None:
    pod = make_pod()
    info = podstate.sandbox_info(sandbox(pod, "s", 0, 1, mode=cri.NamespaceMode.NODE, ip=""))
    assert info.network_mode is cri.NamespaceMode.NODE and info.ips == ()
    dual = cri.PodSandboxStatus(id="d", ip="10.0.0.1", additional_ips=("fd00::1",))
    assert podstate.sandbox_info(dual).ips == ("10.0.0.1", "fd00::1")


def test_ports_annotation_is_json_that_kubelet_tools_can_read() -> None:
    pod = make_pod(ports=[{"containerPort": 80, "hostIP": "127.0.0.1", "hostPort": 8080}])
    raw = labels.container_annotations(pod, pod.spec.containers[0], 0)[labels.CONTAINER_PORTS]
    assert json.loads(raw) == [{"hostPort": 8080, "containerPort": 80, "protocol": "TCP", "hostIP": "127.0.0.1"}]


def test_ephemeral_containers_are_labelled_by_name_and_typed() -> None:
    pod = pod_from_body({
        "metadata": {"name": "web", "namespace": "shop", "uid": "uid-a"},
        "spec": {"initContainers": [{"name": "setup", "image": "busybox"}],
                 "containers": [{"name": "app", "image": "nginx:1.27"}],
                 "ephemeralContainers": [{"name": "debugger", "image": "busybox", "targetContainerName": "app"}]}})
    debugger = pod.spec.ephemeral_containers[0]
    assert labels.container_labels(pod, debugger)[labels.CONTAINER_NAME] == "debugger"
    assert [labels.container_type(pod, n) for n in ("setup", "app", "debugger", "gone")] == [
        "init", "container", "ephemeral", ""]
    # After an agent restart the runtime's instance is the pod's ephemeral container again, by name.
    status = container(pod, "c-dbg", "debugger", 5)
    info = podstate.container_info(status)
    assert info.name == "debugger" and pod.spec.is_ephemeral(info.name)
    assert labels.container_annotations_info(status.annotations).container_type == "ephemeral"


def test_active_containers_are_those_of_the_ready_newest_sandbox() -> None:
    pod = make_pod()
    old, new = sandbox(pod, "s-old", 0, 10, ready=False), sandbox(pod, "s-new", 1, 20)
    containers = [container(pod, "c-old", "setup", 11, state=cri.ContainerState.EXITED),
                  container(pod, "c-new", "setup", 21), container(pod, "c-app", "app", 22)]
    ids = {"c-old": "s-old", "c-new": "s-new", "c-app": "s-new"}
    rt = podstate.from_cri([old, new], containers, uid="uid-a", container_sandbox_ids=ids)
    assert rt.active_sandbox_id == "s-new"
    assert [c.id for c in rt.active_containers()] == ["c-app", "c-new"]
    assert rt.latest_active_container("setup").id == "c-new"  # type: ignore[union-attr]
    stopped = podstate.from_cri([old, sandbox(pod, "s-new", 1, 20, ready=False)], containers, uid="uid-a",
                                container_sandbox_ids=ids)
    assert stopped.active_sandbox_id == "" and stopped.active_containers() == ()
    assert stopped.latest_active_container("app") is None
    unknown = podstate.from_cri([new], containers, uid="uid-a")  # no sandbox ids known: all count as active
    assert len(unknown.active_containers()) == 3


def _view(*containers: tuple[str, str, State]) -> podstate.RuntimePodStatus:
    return podstate.RuntimePodStatus(uid="u", containers=tuple(
        podstate.ContainerInfo(id=cid, name=name, state=state) for cid, name, state in containers))


@pytest.mark.parametrize(("before", "after", "stopped", "expected"), [
    # a quick init container exited while the sync ran: look again
    ([("i1", "init", State.RUNNING)], [("i1", "init", State.EXITED)], (), True),
    # started and exited within the sync (not in the earlier view at all)
    ([], [("c1", "main", State.EXITED)], (), True),
    # the sync stopped it itself: the worker knows
    ([("c1", "main", State.RUNNING)], [("c1", "main", State.EXITED)], ("main",), False),
    # already exited before: nothing new
    ([("c1", "main", State.EXITED)], [("c1", "main", State.EXITED)], (), False),
    # started, still running; or created only
    ([], [("c1", "main", State.RUNNING), ("c2", "side", State.CREATED)], (), False),
    # an old exited instance plus a new one that exited: the new one counts
    ([("c1", "main", State.EXITED)], [("c2", "main", State.EXITED), ("c1", "main", State.EXITED)], (), True),
])
def test_exited_meanwhile(before, after, stopped, expected):
    assert podstate.exited_meanwhile(_view(*before), _view(*after), stopped) is expected

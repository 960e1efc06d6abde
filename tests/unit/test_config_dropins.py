"""``--config-dir`` drop-ins (upstream mergeKubeletConfigurations, cmd/kubelet/app/server_test.go's cases), on real
temporary files read through the agent's own I/O edge (handlers/configuring.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from handlers import configuring
from kopflet.config import configz, dropins, settings

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def load(tmp_path: Path, config: str | None, files: dict[str, str], *flags: str) -> settings.AgentConfig:
    argv = [*flags]
    if config is not None:
        (tmp_path / "kubelet.conf").write_text(HEAD + config)
        argv.append(f"--config={tmp_path / 'kubelet.conf'}")
    root = tmp_path / "kubelet.conf.d"
    root.mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    argv.append(f"--config-dir={root}")
    return settings.load(argv, {}, "node", configuring.read_text, configuring.read_dir, str(tmp_path))


@pytest.mark.parametrize(("config", "files", "flags", "expected"), [
    pytest.param("port: 9090\nhealthzPort: 10257\n",
                 {"10-kubelet.conf": HEAD + "port: 9090\n",
                  "20-kubelet.conf": HEAD + "port: 8080\nhealthzPort: 10255\n"},
                 (), {"port": 8080, "healthz_port": 10255}, id="drop-ins override the file, in order"),
    pytest.param("healthzPort: 10256\nkubeReserved: {memory: 100Mi}\nsyncFrequency: 5m\n",
                 {"10-kubelet.conf": HEAD + "healthzPort: 10255\nkubeReserved: {memory: 150Mi, cpu: 200m}\n",
                  "20-kubelet.conf": HEAD + "healthzPort: 10257\nkubeReserved: {memory: 100Mi}\n"},
                 (), {"healthz_port": 10257, "kube_reserved": {"cpu": "200m", "memory": "100Mi"},
                      "resync_period": 300.0}, id="maps merge key by key"),
    pytest.param("clusterDNS: [192.168.1.3, 192.168.1.4]\n",
                 {"10-kubelet.conf": HEAD + "systemReserved: {memory: 1Gi}\n",
                  "20-kubelet.conf": HEAD + "systemReserved: {memory: 2Gi}\nclusterDNS: [192.168.1.1, 192.168.1.5]\n"},
                 (), {"system_reserved": {"memory": "2Gi"}, "cluster_dns": ("192.168.1.1", "192.168.1.5")},
                 id="lists are replaced whole"),
    pytest.param(None, {"10-kubelet.conf": HEAD + "port: 9090\n", "20-kubelet.conf": HEAD + "healthzPort: 10255\n"},
                 ("--port=8081", "--healthz-port=10256"), {"port": 8081, "healthz_port": 10256},
                 id="flags override the drop-ins"),
    pytest.param("port: 123\nhealthzPort: 234\n", {"20-kubelet.conf": HEAD + "port: 0\n"},
                 (), {"port": 10250, "healthz_port": 234}, id="a zero is defaulted again"),
    pytest.param("port: 123\nhealthzPort: 234\n", {"20-kubelet.conf": HEAD + "port: null\n"},
                 (), {"port": 10250, "healthz_port": 234}, id="null removes the file's value"),
    pytest.param("port: 9090\n",
                 {"10-should-be-ignored.yaml": HEAD + "port: 7777\n", "20-should-be-ignored.txt": "readme text",
                  "30-valid.conf": HEAD + "healthzPort: 10255\n", ".conf": HEAD + "maxPods: 50\n"},
                 (), {"port": 9090, "healthz_port": 10255, "max_pods": 50}, id="only .conf files (filepath.Ext)"),
    pytest.param("port: 9090\n",
                 {"10-kubelet.conf": HEAD + "port: 8080\n",
                  "sub-dir1/10-kubelet.conf": HEAD + "port: 7070\nhealthzPort: 8888\n",
                  "sub-dir2/10-kubelet.conf": HEAD + "port: 6060\nhealthzPort: 9999\n"},
                 (), {"port": 6060, "healthz_port": 9999}, id="subdirectories in lexical order"),
    pytest.param(None, {"a.conf": HEAD + "port: 1111\n", "a/x.conf": HEAD + "port: 2222\n"},
                 (), {"port": 1111}, id="WalkDir order: a/ before a.conf"),
    pytest.param("featureGates: {LoggingAlphaOptions: true, QOSReserved: true}\n",
                 {"10.conf": HEAD + "featureGates: {LoggingBetaOptions: false, QOSReserved: null}\n"},
                 (), {"feature_gates": {"LoggingAlphaOptions": True, "LoggingBetaOptions": False}},
                 id="featureGates merge, null drops one"),
    pytest.param("authentication: {webhook: {cacheTTL: 1m}}\n",
                 {"10.conf": HEAD + "authentication: {anonymous: {enabled: true}}\n"},
                 (), {"authentication_token_webhook_cache_ttl": 60.0, "anonymous_auth": True},
                 id="structs merge field by field"),
    pytest.param("staticPodPath: /etc/kubernetes/manifests\n",
                 {"10.conf": HEAD + "staticPodPath: manifests\ntlsCertFile: a.crt\ntlsPrivateKeyFile: a.key\n"},
                 (), {"pod_manifest_path": "manifests", "tls_cert_file": "a.crt"},
                 id="relative paths stay as written (not resolved against the drop-in's directory)"),
    pytest.param("maxPods: 50\n", {"10.conf": HEAD + "noSuchField: 1\nmaxPods: 60\n"},
                 (), {"max_pods": 60}, id="an unknown field is dropped, as encoding/json drops it"),
    pytest.param("maxPods: 50\n", {}, (), {"max_pods": 50}, id="an empty directory"),
])
def test_drop_ins_merge(tmp_path: Path, config: str | None, files: dict[str, str], flags: tuple[str, ...],
                        expected: dict[str, Any]) -> None:
    cfg = load(tmp_path, config, files, *flags)
    got = {name: getattr(cfg, name) for name in expected}
    got = {k: dict(v) if hasattr(v, "items") else v for k, v in got.items()}
    assert got == expected


@pytest.mark.parametrize(("config", "dropin", "expected"), [
    pytest.param("maxPods: 50\n", "evictionHard: {memory.available: 1Gi}\n",
                 {"memory.available": "1Gi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                  "imagefs.available": "15%", "imagefs.inodesFree": "5%"},
                 id="--config without evictionHard: merged onto the defaults (loadConfigFile)"),
    pytest.param(None, "evictionHard: {memory.available: 1Gi}\n", {"memory.available": "1Gi"},
                 id="no --config: evictionHard unset before the drop-in"),
    pytest.param("evictionHard: {memory.available: 500Mi}\n", "evictionHard: {nodefs.available: 5%}\n",
                 {"memory.available": "500Mi", "nodefs.available": "5%"}, id="the file's map, merged"),
    pytest.param("mergeDefaultEvictionSettings: true\nevictionHard: {memory.available: 500Mi}\n",
                 "evictionHard: {imagefs.available: null}\n",
                 {"memory.available": "500Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
                  "imagefs.inodesFree": "5%", "imagefs.available": "15%"},
                 id="DIVERGES from upstream: effective_eviction_hard refills what a null removed (upstream: absent)"),
    pytest.param("maxPods: 50\n", "evictionHard: {imagefs.available: null, imagefs.inodesFree: null}\n",
                 {"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"},
                 id="null drops a default threshold"),
])
def test_eviction_hard_merges_onto_what_load_config_file_leaves(tmp_path: Path, config: str | None, dropin: str,
                                                                 expected: dict[str, str]) -> None:
    cfg = load(tmp_path, config, {"10.conf": HEAD + dropin})
    assert cfg.effective_eviction_hard == expected


def test_configz_shows_the_merged_configuration(tmp_path: Path) -> None:
    cfg = load(tmp_path, "maxPods: 50\nclusterDNS: [10.0.0.10]\nsystemReserved: {cpu: 100m}\n",
               {"10.conf": HEAD + "maxPods: 60\nsystemReserved: {memory: 1Gi}\n"}, "--cluster-dns=10.0.0.53")
    body = configz.kubelet_configuration(cfg)
    assert body["maxPods"] == 60
    assert body["systemReserved"] == {"cpu": "100m", "memory": "1Gi"}
    assert body["clusterDNS"] == ["10.0.0.53"]


def _msg(root: Path | str, rest: str) -> str:
    return f'failed to merge kubelet configs: failed to walk through kubelet dropin directory "{root}": {rest}'


@pytest.mark.parametrize(("name", "text", "message"), [
    pytest.param("10-x.conf", "apiVersion: kubelet.config.k8s.io/v1beta2\nkind: KubeletConfiguration\n",
                 "failed to load kubelet dropin file, path: {path}, unknown apiVersion/kind: "
                 "kubelet.config.k8s.io/v1beta2, Kind=KubeletConfiguration", id="wrong apiVersion"),
    pytest.param("10-x.conf", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration2\n",
                 "failed to load kubelet dropin file, path: {path}, unknown apiVersion/kind: "
                 "kubelet.config.k8s.io/v1beta1, Kind=KubeletConfiguration2", id="wrong kind"),
    pytest.param("10-x.conf", "kind: KubeletConfiguration\n",
                 "failed to load kubelet dropin file, path: {path}, unknown apiVersion/kind: "
                 "/, Kind=KubeletConfiguration", id="no apiVersion"),
    pytest.param("10-x.conf", "port: 123\n",
                 "failed to load kubelet dropin file, path: {path}, error: Object 'Kind' is missing in 'port: 123\n'",
                 id="no kind"),
    pytest.param("10-x.conf", "",
                 'failed to load kubelet dropin file, path: {path}, error: kubelet config file "{path}" was empty',
                 id="empty"),
    pytest.param("10-malformed.conf", HEAD + "port: [this is not valid\n  indentation is wrong\n",
                 "failed to load kubelet dropin file, path: {path}, error: error converting YAML to JSON: yaml: "
                 "line 5: expected ',' or ']', but got '<stream end>'", id="bad YAML"),
    pytest.param("10-x.conf", HEAD + "port: 1\nport: 2\n",
                 "failed to load kubelet dropin file, path: {path}, error: strict decoding error: error converting "
                 'YAML to JSON: yaml: unmarshal errors:\n  line 4: key "port" already set in map',
                 id="a duplicate key (strict decoding)"),
    pytest.param("10-x.conf", "- a\n",
                 "failed to load kubelet dropin file, path: {path}, error: couldn't get version/kind; json parse "
                 "error: json: cannot unmarshal array into Go value of type struct { APIVersion string "
                 '"json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }', id="not a mapping"),
    pytest.param("10-x.conf", HEAD + "resolvConf: /etc/resolv.conf\n",
                 'failed to load kubelet dropin file, path: {path}, error: field "resolvConf" is not supported by '
                 "kopflet (it would have no effect); remove it", id="a field kopflet does not support"),
])
def test_a_bad_drop_in_is_upstreams_error(tmp_path: Path, name: str, text: str, message: str) -> None:
    root = tmp_path / "kubelet.conf.d"
    with pytest.raises(settings.ConfigError) as err:
        load(tmp_path, "maxPods: 50\n", {"05-good.conf": HEAD + "maxPods: 60\n", name: text})
    assert str(err.value) == _msg(root, message.replace("{path}", str(root / name)))


def test_a_wrongly_typed_value_is_the_merged_unmarshal_error(tmp_path: Path) -> None:
    with pytest.raises(settings.ConfigError, match=r"^failed to merge kubelet configs: failed to unmarshal merged "
                                                   r"JSON into kubelet configuration: field \"maxPods\""):
        load(tmp_path, None, {"10.conf": HEAD + "maxPods: lots\n"})


def test_the_directory_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(settings.ConfigError) as err:
        settings.load([f"--config-dir={missing}"], {}, "node", configuring.read_text, configuring.read_dir, "/")
    assert str(err.value) == _msg(missing, f"lstat {missing}: no such file or directory")


def test_an_unreadable_drop_in(tmp_path: Path) -> None:
    root = tmp_path / "kubelet.conf.d"
    root.mkdir()
    path = root / "10.conf"
    path.write_text(HEAD)
    path.chmod(0)

    def read_file(name: str) -> str:  # as open(2) answers a non-root reader (the tests may run as root)
        if os.geteuid() == 0 and name == str(path):
            raise PermissionError(13, "Permission denied", name)
        return configuring.read_text(name)

    with pytest.raises(settings.ConfigError) as err:
        settings.load([f"--config-dir={root}"], {}, "node", read_file, configuring.read_dir, "/")
    assert str(err.value) == _msg(root, f"failed to load kubelet dropin file, path: {path}, error: failed to read "
                                        f'drop-in kubelet config file "{path}", error: open {path}: permission denied')


def test_a_directory_named_conf_cannot_be_read(tmp_path: Path) -> None:
    root = tmp_path / "kubelet.conf.d"
    (root / "sub").mkdir(parents=True)
    (root / "link.conf").symlink_to(root / "sub")  # a link is not followed by the walk: read as a file
    with pytest.raises(settings.ConfigError) as err:
        settings.load([f"--config-dir={root}"], {}, "node", configuring.read_text, configuring.read_dir, "/")
    path = root / "link.conf"
    assert str(err.value) == _msg(root, f"failed to load kubelet dropin file, path: {path}, error: failed to read "
                                        f'drop-in kubelet config file "{path}", error: read {path}: is a directory')


def test_relative_paths_are_shown_absolute_in_the_loaders_message(tmp_path: Path) -> None:
    root = tmp_path / "d"
    root.mkdir()
    (root / "1.conf").write_text("")
    with pytest.raises(settings.ConfigError) as err:
        settings.load(["--config-dir=d/"], {}, "node", lambda p: (tmp_path / p).read_text(),
                      lambda p: configuring.read_dir(str(tmp_path / p)), str(tmp_path))
    assert str(err.value) == _msg("d/", f'failed to load kubelet dropin file, path: d/1.conf, error: kubelet '
                                              f'config file "{root / "1.conf"}" was empty')


@pytest.mark.parametrize(("tree", "files", "skipped"), [
    ({".": [("b.conf", False), ("a", True), ("a.conf", False), ("x.yaml", False)], "a": [("z.conf", False)]},
     ["d/a/z.conf", "d/a.conf", "d/b.conf"], ["d/x.yaml"]),
    ({".": [("conf", False), (".conf", False), ("x.conf.bak", False)]}, ["d/.conf"], ["d/conf", "d/x.conf.bak"]),
])
def test_walk_order(tree: dict[str, list[tuple[str, bool]]], files: list[str], skipped: list[str]) -> None:
    def read_dir(path: str) -> list[tuple[str, bool]]:
        return tree["." if path == "d" else path.removeprefix("d/")]
    assert dropins.walk("d", read_dir) == (files, skipped)


def test_a_file_as_the_directory_is_walked_as_one_file() -> None:
    assert dropins.walk("x.conf", lambda _: None) == (["x.conf"], [])
    assert dropins.walk("x.d", lambda _: None) == ([], ["x.d"])


@pytest.mark.parametrize(("target", "patch", "expected"), [
    ({"a": 1, "b": 2}, {"a": None}, {"b": 2}),
    ({"a": {"x": 1, "y": 2}}, {"a": {"y": None, "z": 3}}, {"a": {"x": 1, "z": 3}}),
    ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),
    ({"a": 1}, {"a": {"x": None, "y": 1}}, {"a": {"y": 1}}),
    ({"a": {"x": 1}}, {"a": 5}, {"a": 5}),
    ({}, {"a": None}, {}),
])
def test_merge_patch_is_rfc_7386(target: dict[str, Any], patch: dict[str, Any], expected: dict[str, Any]) -> None:
    assert dropins.merge_patch(target, patch) == expected


def test_config_dir_is_a_flag_only() -> None:
    (setting,) = [s for s in settings.SETTINGS if s.flag == "config-dir"]
    assert setting.field is None and setting.default == '""'
    assert "'.conf' suffix" in setting.help

"""
Where the kubelet keeps a pod's files on the node: the one place each path form is written.

Mirrors upstream's getters in pkg/kubelet/kubelet_getters.go (`getPodsDir`, `getPodDir`, `getPodVolumesDir`,
`getPodVolumeDir`, `getPodContainerDir`, `getPluginsDir`, `getPluginDir`, `getVolumeDevicePluginDir`,
`getPodVolumeDevicesDir`, `getPodVolumeDeviceDir`), the volume plugins' own path forms (pkg/volume/csi: `getTargetPath`,
`makeDeviceMountPath`, the block mapper's paths; pkg/volume/local), `getEtcHostsPath` (kubelet_pods.go), the checkpoint
file names
(allocation_manager.go `allocatedPodsStateFile`, kuberuntime_manager.go `actuatedPodsStateFile`), the
``--cert-dir`` default (cmd/kubelet/app/options) and the log layout of pkg/kubelet/kuberuntime/helpers.go
(`BuildPodLogsDirectory`, `BuildContainerLogsDirectory`, `buildContainerLogsPath`). Directory names are
kubeletconfig/defaults.go's.

Pure: paths are strings joined with `posixpath` (the node is Linux); callers that do I/O wrap them in a Path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath

DEFAULT_ROOT_DIR = "/var/lib/kopflet"
"""``--root-dir``'s default: upstream's ``/var/lib/kubelet``, renamed so the two agents can share a machine."""
DEFAULT_POD_LOG_ROOT = "/var/log/pods"
"""``podLogsDir``'s default (apis/config/v1beta1 `DefaultPodLogsDir`): log collectors expect it."""
DEFAULT_CONTAINER_LOGS_DIR = "/var/log/containers"
"""Upstream `ContainerLogsDir` (kubelet.go, kuberuntime legacy.go): one symlink per container to its log file,
named ``<pod>_<namespace>_<container>-<id>.log``, where log collectors look."""

# pkg/kubelet/kubeletconfig/defaults.go
PODS_DIR_NAME = "pods"  # DefaultKubeletPodsDirName
VOLUMES_DIR_NAME = "volumes"  # DefaultKubeletVolumesDirName
CONTAINERS_DIR_NAME = "containers"  # DefaultKubeletContainersDirName
ETC_HOSTS_FILE_NAME = "etc-hosts"  # kubelet_pods.go getEtcHostsPath
USERNS_FILE_NAME = "userns"  # upstream userns manager mappingsFile: a pod's user namespace ID mappings
ALLOCATED_PODS_STATE = "allocated_pods_state"  # allocation_manager.go allocatedPodsStateFile
ACTUATED_PODS_STATE = "actuated_pods_state"  # kuberuntime_manager.go actuatedPodsStateFile
CPU_MANAGER_STATE = "cpu_manager_state"  # cpu_manager.go cpuManagerStateFileName
MEMORY_MANAGER_STATE = "memory_manager_state"  # memory_manager.go memoryManagerStateFileName
CERT_DIR_NAME = "pki"  # cmd/kubelet/app/options: CertDirectory "/var/lib/kubelet/pki"
DEVICE_PLUGINS_DIR_NAME = "device-plugins"  # deviceplugin/v1beta1 DevicePluginPath "/var/lib/kubelet/device-plugins/"
SECCOMP_DIR_NAME = "seccomp"  # kuberuntime_manager.go: seccompProfileRoot = filepath.Join(rootDirectory, "seccomp")
POD_RESOURCES_DIR_NAME = "pod-resources"  # DefaultKubeletPodResourcesDirName
PLUGINS_DIR_NAME = "plugins"  # DefaultKubeletPluginsDirName
PLUGINS_REGISTRY_DIR_NAME = "plugins_registry"  # DefaultKubeletPluginsRegistrationDirName
POD_RESOURCES_SOCKET = "kubelet.sock"  # apis/podresources Socket "kubelet", made a path by util.LocalEndpoint
LOG_PATH_DELIMITER = "_"  # kuberuntime/helpers.go logPathDelimiter
VOLUME_DEVICES_DIR_NAME = "volumeDevices"  # DefaultKubeletVolumeDevicesDirName
CSI_PLUGIN_NAME = "kubernetes.io/csi"  # pkg/volume/csi CSIPluginName
LOCAL_PLUGIN_NAME = "kubernetes.io/local-volume"  # pkg/volume/local localVolumePluginName
GLOBAL_MOUNT_DIR_NAME = "globalmount"  # pkg/volume/csi globalMountInGlobalPath
MOUNTS_IN_GLOBAL_PD_PATH = "mounts"  # pkg/volume/util MountsInGlobalPDPath
CSI_MOUNT_DIR_NAME = "mount"  # pkg/volume/csi GetCSIMounterPath
VOL_DATA_FILE_NAME = "vol_data.json"  # pkg/volume/csi volDataFileName


def escape_qualified_name(name: str) -> str:
    """A plugin name as a directory name, ``kubernetes.io/configmap`` → ``kubernetes.io~configmap`` (upstream
    k8s.io/utils/strings `EscapeQualifiedName`)."""
    return name.replace("/", "~")


def pod_uid_from_log_dir(name: str) -> str:
    """The pod UID in a pod log directory's name, ``<namespace>_<name>_<uid>`` (upstream
    parsePodUIDFromLogsDirectory: the last ``_``-separated part)."""
    return name.rsplit(LOG_PATH_DELIMITER, 1)[-1]


@dataclasses.dataclass(frozen=True)
class Layout:
    """The node's kubelet directories: `root_dir` (``--root-dir``) holds the pods' files and the checkpoints,
    `pod_log_root` (``podLogsDir``) the containers' logs, `container_logs_dir` the symlinks to them (fixed
    upstream; a field so tests can move it). Built once from the config and handed around, so no module spells
    a path form of its own."""

    root_dir: str
    pod_log_root: str = DEFAULT_POD_LOG_ROOT
    container_logs_dir: str = DEFAULT_CONTAINER_LOGS_DIR

    # ----------------------------------------------------------------------- <root-dir> (kubelet_getters.go)

    @property
    def pods_dir(self) -> str:
        """``<root>/pods`` (upstream `getPodsDir`): one directory per pod UID, scanned for orphans."""
        return posixpath.join(self.root_dir, PODS_DIR_NAME)

    def pod_dir(self, uid: str) -> str:
        """``<root>/pods/<uid>`` (upstream `getPodDir`): removed whole when the pod is gone."""
        return posixpath.join(self.pods_dir, uid)

    def volumes_dir(self, uid: str) -> str:
        """``<root>/pods/<uid>/volumes`` (upstream `getPodVolumesDir`): where tmpfs mounts are looked for."""
        return posixpath.join(self.pod_dir(uid), VOLUMES_DIR_NAME)

    def volume_dir(self, uid: str, plugin: str, name: str) -> str:
        """``<root>/pods/<uid>/volumes/<escaped plugin>/<name>`` (upstream `getPodVolumeDir`); `plugin` is the
        plugin's qualified name (``kubernetes.io/empty-dir``), escaped here as upstream's plugins do first."""
        return posixpath.join(self.volumes_dir(uid), escape_qualified_name(plugin), name)

    def container_dir(self, uid: str, name: str) -> str:
        """``<root>/pods/<uid>/containers/<name>`` (upstream `getPodContainerDir`): termination-log files."""
        return posixpath.join(self.pod_dir(uid), CONTAINERS_DIR_NAME, name)

    def etc_hosts(self, uid: str) -> str:
        """``<root>/pods/<uid>/etc-hosts`` (upstream `getEtcHostsPath(getPodDir(uid))`): the managed /etc/hosts."""
        return posixpath.join(self.pod_dir(uid), ETC_HOSTS_FILE_NAME)

    def userns_file(self, uid: str) -> str:
        """``<root>/pods/<uid>/userns`` (upstream userns manager `mappingsFile`): the pod's ID mappings (JSON)."""
        return posixpath.join(self.pod_dir(uid), USERNS_FILE_NAME)

    @property
    def allocated_state(self) -> str:
        """``<root>/allocated_pods_state``: the allocation manager's checkpoint (upstream NewManager)."""
        return posixpath.join(self.root_dir, ALLOCATED_PODS_STATE)

    @property
    def actuated_state(self) -> str:
        """``<root>/actuated_pods_state``: the runtime manager's checkpoint (upstream NewKubeGenericRuntimeManager)."""
        return posixpath.join(self.root_dir, ACTUATED_PODS_STATE)

    @property
    def cpu_manager_state(self) -> str:
        """``<root>/cpu_manager_state``: the CPU manager's checkpoint (upstream cpuManagerStateFileName)."""
        return posixpath.join(self.root_dir, CPU_MANAGER_STATE)

    @property
    def device_plugins_dir(self) -> str:
        """``<root>/device-plugins``: the device manager's ``kubelet.sock``, the plugins' sockets and
        ``kubelet_internal_checkpoint``. Upstream's path is fixed (``/var/lib/kubelet/device-plugins/``, its
        default root); kopflet's follows ``--root-dir`` so it never takes the machine's own kubelet's socket."""
        return posixpath.join(self.root_dir, DEVICE_PLUGINS_DIR_NAME)

    @property
    def memory_manager_state(self) -> str:
        """``<root>/memory_manager_state``: the memory manager's checkpoint (upstream memoryManagerStateFileName)."""
        return posixpath.join(self.root_dir, MEMORY_MANAGER_STATE)

    @property
    def cert_dir(self) -> str:
        """``<root>/pki``: ``--cert-dir``'s default, where the self-signed serving certificate lives."""
        return posixpath.join(self.root_dir, CERT_DIR_NAME)

    @property
    def seccomp_dir(self) -> str:
        """``<root>/seccomp`` (upstream `seccompProfileRoot`): a ``Localhost`` seccomp profile's
        ``localhostProfile`` is a path under it."""
        return posixpath.join(self.root_dir, SECCOMP_DIR_NAME)

    @property
    def pod_resources_dir(self) -> str:
        """``<root>/pod-resources`` (upstream `getPodResourcesDir`, made 0750 at start): the pod-resources socket's
        directory, which monitoring agents mount."""
        return posixpath.join(self.root_dir, POD_RESOURCES_DIR_NAME)

    @property
    def pod_resources_socket(self) -> str:
        """``<root>/pod-resources/kubelet.sock``: the pod-resources gRPC API (upstream ListenAndServePodResources's
        endpoint)."""
        return posixpath.join(self.pod_resources_dir, POD_RESOURCES_SOCKET)

    # ------------------------------------------------------------ volume plugins (kubelet_getters.go, pkg/volume)

    @property
    def plugins_dir(self) -> str:
        """``<root>/plugins`` (upstream `getPluginsDir`, also `getVolumeDevicePluginsDir`, made 0750 at start): the
        volume plugins' node-wide directories (CSI staging paths, block volumes' global map paths), and where CSI
        drivers deployed for this agent put their sockets (``plugins/<driver>/csi.sock``)."""
        return posixpath.join(self.root_dir, PLUGINS_DIR_NAME)

    @property
    def plugins_registry_dir(self) -> str:
        """``<root>/plugins_registry`` (upstream `getPluginsRegistrationDir`, made 0750 at start): the plugin
        manager watches it for the registration sockets of plugins (node-driver-registrar's
        ``<driver>-reg.sock``). Upstream's is ``/var/lib/kubelet/plugins_registry``; a driver deployed for this agent
        mounts this one."""
        return posixpath.join(self.root_dir, PLUGINS_REGISTRY_DIR_NAME)

    def plugin_dir(self, plugin: str) -> str:
        """``<root>/plugins/<plugin>`` (upstream `getPluginDir`): the plugin's name as given, not escaped
        (``kubernetes.io/csi`` is two directories, as upstream's CSI plugin asks for it)."""
        return posixpath.join(self.plugins_dir, plugin)

    def volume_device_plugin_dir(self, plugin: str) -> str:
        """``<root>/plugins/<plugin>/volumeDevices`` (upstream `getVolumeDevicePluginDir`), the name as given: CSI
        passes ``kubernetes.io/csi``, the local plugin its escaped ``kubernetes.io~local-volume``."""
        return posixpath.join(self.plugin_dir(plugin), VOLUME_DEVICES_DIR_NAME)

    def pod_volume_devices_dir(self, uid: str) -> str:
        """``<root>/pods/<uid>/volumeDevices`` (upstream `getPodVolumeDevicesDir`): the pod's block volumes."""
        return posixpath.join(self.pod_dir(uid), VOLUME_DEVICES_DIR_NAME)

    def pod_volume_device_dir(self, uid: str, plugin: str) -> str:
        """``<root>/pods/<uid>/volumeDevices/<escaped plugin>`` (upstream `getPodVolumeDeviceDir`, whose callers
        escape the plugin's name first: escaped here, as `volume_dir` does)."""
        return posixpath.join(self.pod_volume_devices_dir(uid), escape_qualified_name(plugin))

    def pod_device_map_path(self, uid: str, plugin: str, spec_name: str) -> str:
        """``<root>/pods/<uid>/volumeDevices/<escaped plugin>/<spec name>``: a block volume's symlink the container's
        device is made from (upstream `GetPodDeviceMapPath`'s directory and name joined, as makeBlockVolumes does)."""
        return posixpath.join(self.pod_volume_device_dir(uid, plugin), spec_name)

    def csi_volume_dir(self, uid: str, spec_name: str) -> str:
        """``<root>/pods/<uid>/volumes/kubernetes.io~csi/<escaped spec name>`` (upstream csi `getTargetPath`): holds
        ``vol_data.json`` and the ``mount`` directory. The spec name is the PV's name, or the pod volume's for an
        inline CSI volume."""
        return self.volume_dir(uid, CSI_PLUGIN_NAME, escape_qualified_name(spec_name))

    def csi_mount_path(self, uid: str, spec_name: str) -> str:
        """``.../kubernetes.io~csi/<spec name>/mount`` (upstream csiMountMgr.GetPath): NodePublishVolume's
        target_path, bind-mounted into the containers."""
        return posixpath.join(self.csi_volume_dir(uid, spec_name), CSI_MOUNT_DIR_NAME)

    def csi_vol_data_path(self, uid: str, spec_name: str) -> str:
        """``.../kubernetes.io~csi/<spec name>/vol_data.json``: what SetUp saved for the teardown (saveVolumeData)."""
        return posixpath.join(self.csi_volume_dir(uid, spec_name), VOL_DATA_FILE_NAME)

    def csi_device_mount_path(self, driver: str, volume_handle: str) -> str:
        """``<root>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount`` (upstream
        `makeDeviceMountPath`): NodeStageVolume's staging_target_path, shared by every pod of the volume."""
        digest = hashlib.sha256(volume_handle.encode()).hexdigest()
        return posixpath.join(self.plugin_dir(CSI_PLUGIN_NAME), driver, digest, GLOBAL_MOUNT_DIR_NAME)

    def csi_device_vol_data_path(self, driver: str, volume_handle: str) -> str:
        """The staging path's ``vol_data.json``, beside ``globalmount`` (MountDevice's saveVolumeData)."""
        return posixpath.join(posixpath.dirname(self.csi_device_mount_path(driver, volume_handle)), VOL_DATA_FILE_NAME)

    def csi_block_volume_dir(self, spec_name: str) -> str:
        """``<root>/plugins/kubernetes.io/csi/volumeDevices/<escaped spec name>`` (upstream csi
        `getVolumePluginDir`)."""
        return posixpath.join(self.volume_device_plugin_dir(CSI_PLUGIN_NAME), escape_qualified_name(spec_name))

    def csi_block_global_map_path(self, spec_name: str) -> str:
        """``.../volumeDevices/<spec name>/dev`` (upstream csiBlockMapper.GetGlobalMapPath): one bind-mounted map file
        per pod UID in it."""
        return posixpath.join(self.csi_block_volume_dir(spec_name), "dev")

    def csi_block_data_dir(self, spec_name: str) -> str:
        """``.../volumeDevices/<spec name>/data`` (upstream `getVolumeDeviceDataDir`): the block volume's
        ``vol_data.json``."""
        return posixpath.join(self.csi_block_volume_dir(spec_name), "data")

    def csi_block_staging_path(self, spec_name: str) -> str:
        """``<root>/plugins/kubernetes.io/csi/volumeDevices/staging/<spec name>`` (upstream csiBlockMapper
        GetStagingPath): a block volume's NodeStageVolume staging_target_path."""
        return posixpath.join(self.volume_device_plugin_dir(CSI_PLUGIN_NAME), "staging", spec_name)

    def csi_block_publish_path(self, spec_name: str, uid: str) -> str:
        """``<root>/plugins/kubernetes.io/csi/volumeDevices/publish/<spec name>/<pod uid>`` (upstream csiBlockMapper
        getPublishPath): a block volume's NodePublishVolume target_path."""
        return posixpath.join(self.volume_device_plugin_dir(CSI_PLUGIN_NAME), "publish", spec_name, uid)

    def local_volume_dir(self, uid: str, pv_name: str) -> str:
        """``<root>/pods/<uid>/volumes/kubernetes.io~local-volume/<pv>`` (upstream localVolume.GetPath): the bind
        mount of a local PV's path."""
        return self.volume_dir(uid, LOCAL_PLUGIN_NAME, pv_name)

    def local_device_mount_path(self, pv_name: str) -> str:
        """``<root>/plugins/kubernetes.io/local-volume/mounts/<pv>`` (upstream `getGlobalLocalPath` for a block
        device): where a local PV on a block device is formatted and mounted once."""
        return posixpath.join(self.plugin_dir(LOCAL_PLUGIN_NAME), MOUNTS_IN_GLOBAL_PD_PATH, pv_name)

    def local_block_global_map_path(self, pv_name: str) -> str:
        """``<root>/plugins/kubernetes.io~local-volume/volumeDevices/<pv>`` (upstream localVolume.GetGlobalMapPath,
        which escapes the plugin's name where the CSI plugin does not)."""
        return posixpath.join(self.volume_device_plugin_dir(escape_qualified_name(LOCAL_PLUGIN_NAME)), pv_name)

    # ------------------------------------------------------------------ <pod-log-root> (kuberuntime/helpers.go)

    def pod_log_dir(self, namespace: str, name: str, uid: str) -> str:
        """``<logroot>/<namespace>_<name>_<uid>`` (upstream `BuildPodLogsDirectory`): the sandbox's log directory."""
        return posixpath.join(self.pod_log_root, LOG_PATH_DELIMITER.join((namespace, name, uid)))

    def container_log_dir(self, namespace: str, name: str, uid: str, container: str) -> str:
        """``<logroot>/<namespace>_<name>_<uid>/<container>`` (upstream `BuildContainerLogsDirectory`): made
        (mode 0755) before CreateContainer; its ``<n>.log`` files count the restarts."""
        return posixpath.join(self.pod_log_dir(namespace, name, uid), container)

    @staticmethod
    def relative_log_path(container: str, restart_count: int) -> str:
        """``<container>/<restartCount>.log`` (upstream `buildContainerLogsPath`): the ContainerConfig's log_path,
        relative to the sandbox's log directory."""
        return posixpath.join(container, f"{restart_count}.log")

    def container_log_path(self, namespace: str, name: str, uid: str, container: str, restart_count: int) -> str:
        """The log file of one container instance (upstream startContainer's
        ``filepath.Join(podSandboxConfig.LogDirectory, containerConfig.LogPath)``)."""
        return posixpath.join(self.pod_log_dir(namespace, name, uid), self.relative_log_path(container, restart_count))


__all__ = [
    "ACTUATED_PODS_STATE",
    "ALLOCATED_PODS_STATE",
    "CSI_PLUGIN_NAME",
    "DEFAULT_CONTAINER_LOGS_DIR",
    "DEFAULT_POD_LOG_ROOT",
    "DEFAULT_ROOT_DIR",
    "LOCAL_PLUGIN_NAME",
    "Layout",
    "escape_qualified_name",
    "pod_uid_from_log_dir",
]

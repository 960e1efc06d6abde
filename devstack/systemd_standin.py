"""systemd's manager side on a private system bus, for a real systemd-logind run by `devstack.logind`.

This machine has no systemd as PID 1, and a real one would power the machine off. logind asks systemd for three
things around a shutdown, and this process answers them: the target's LoadState (``loaded``), StartUnit of the
target (recorded in the jobs file, nothing powered off), and KillUnit of ``systemd-logind.service`` (the signal
sent to logind, which is how the kubelet makes logind reread logind.conf). ``io.kopflet.devstack.CancelJobs``
ends the pending jobs with JobRemoved "canceled", as a cancelled shutdown does: logind then announces
PrepareForShutdown(false).

Run: ``python -m devstack.systemd_standin JOBS_FILE`` with DBUS_SYSTEM_BUS_ADDRESS set."""

import asyncio
import json
import os
import sys
import time
from pathlib import Path

from dbus_fast import BusType, Message, MessageType
from dbus_fast.aio import MessageBus
from dbus_fast.constants import PropertyAccess
from dbus_fast.service import ServiceInterface, dbus_property, method, signal

LOGIND_SERVICE = "org.freedesktop.login1"
SYSTEMD_SERVICE = "org.freedesktop.systemd1"
SYSTEMD_OBJECT = "/org/freedesktop/systemd1"
SYSTEMD_INTERFACE = "org.freedesktop.systemd1.Manager"

TARGETS = ("poweroff.target", "reboot.target", "halt.target", "kexec.target", "soft-reboot.target")


def unit_path(name: str) -> str:
    """systemd's unit_dbus_path_from_name: every byte but [A-Za-z0-9] escaped as _xx."""
    escaped = "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):02x}" for c in name)
    return f"{SYSTEMD_OBJECT}/unit/{escaped}"


class Unit(ServiceInterface):
    def __init__(self) -> None:
        super().__init__("org.freedesktop.systemd1.Unit")

    @dbus_property(access=PropertyAccess.READ)
    def LoadState(self) -> "s":  # noqa: F821
        return "loaded"


class Manager(ServiceInterface):
    def __init__(self, bus: MessageBus, jobs_file: Path) -> None:
        super().__init__(SYSTEMD_INTERFACE)
        self.bus, self.jobs_file = bus, jobs_file
        self.pending: dict[int, tuple[str, str]] = {}
        self.next_id = 1

    def record(self, entry: dict[str, object]) -> None:
        with self.jobs_file.open("a") as f:
            f.write(json.dumps({"time": time.time(), **entry}) + "\n")

    @method()
    def Subscribe(self) -> None:
        return None

    @method()
    def StartUnit(self, name: "s", mode: "s") -> "o":  # noqa: F821
        job_id = self.next_id
        self.next_id += 1
        path = f"{SYSTEMD_OBJECT}/job/{job_id}"
        self.pending[job_id] = (path, name)
        self.record({"call": "StartUnit", "unit": name, "mode": mode, "job": path})
        return path

    @method()
    async def KillUnit(self, name: "s", whom: "s", number: "i") -> None:  # noqa: F821
        self.record({"call": "KillUnit", "unit": name, "whom": whom, "signal": number})
        if name != "systemd-logind.service":
            return
        reply = await self.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus", interface="org.freedesktop.DBus",
            member="GetConnectionUnixProcessID", signature="s", body=[LOGIND_SERVICE]))
        if reply.message_type == MessageType.METHOD_RETURN:
            os.kill(int(reply.body[0]), number)

    @signal()
    def JobRemoved(self, job_id: "u", path: "o", unit: "s", result: "s") -> "uoss":  # noqa: F821
        return [job_id, path, unit, result]

    def cancel_jobs(self) -> int:
        for job_id, (path, unit) in sorted(self.pending.items()):
            self.record({"call": "JobRemoved", "unit": unit, "job": path, "result": "canceled"})
            self.JobRemoved(job_id, path, unit, "canceled")
        count = len(self.pending)
        self.pending.clear()
        return count


class Control(ServiceInterface):
    def __init__(self, manager: Manager) -> None:
        super().__init__("io.kopflet.devstack")
        self.manager = manager

    @method()
    def CancelJobs(self) -> "u":  # noqa: F821
        return self.manager.cancel_jobs()


async def main(jobs_file: Path) -> None:
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    manager = Manager(bus, jobs_file)
    bus.export(SYSTEMD_OBJECT, manager)
    bus.export(SYSTEMD_OBJECT, Control(manager))
    for target in TARGETS:
        bus.export(unit_path(target), Unit())
    await bus.request_name(SYSTEMD_SERVICE)
    print("ready", flush=True)
    await bus.wait_for_disconnect()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))

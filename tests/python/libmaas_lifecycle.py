"""python-libmaas (unmodified, from PyPI) against `metalform sim`.

Usage: python libmaas_lifecycle.py MAAS_URL API_KEY

Connects, lists machines, reads one, deploys it to Deployed, releases it with erase to Ready,
and starts commissioning. Prints one `step: ...` line per step and `libmaas lifecycle: ok` at
the end; any failure raises (non-zero exit) with the step that failed.
"""

import base64
import sys

from maas.client import connect
from maas.client.enum import NodeStatus, PowerState


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def main(url, apikey):
    client = connect(url, apikey=apikey)
    print("step: connected")

    machines = client.machines.list()
    check(len(machines) >= 1, "expected at least one machine, got %d" % len(machines))
    ready = [m for m in machines if m.status == NodeStatus.READY]
    check(ready, "expected a Ready machine among %r" % [m.status_name for m in machines])
    print("step: listed %d machines" % len(machines))

    machine = client.machines.get(system_id=ready[0].system_id)
    check(machine.hostname == ready[0].hostname, "read returned another machine")
    check(machine.status_name == "Ready", "read status %r" % machine.status_name)
    check(len(machine.interfaces) >= 1, "machine has no interfaces")
    check(machine.boot_interface.name == machine.interfaces[0].name, "boot interface")
    check(len(machine.block_devices) >= 1, "machine has no block devices")
    print("step: read %s (%s)" % (machine.system_id, machine.hostname))

    user_data = b"#cloud-config\nwrite_files:\n  - path: /etc/motd\n    content: hello\n"
    machine = machine.deploy(
        user_data=user_data,
        distro_series="ubuntu/noble",
        wait=True,
        wait_interval=0.2,
    )
    check(machine.status == NodeStatus.DEPLOYED, "deploy ended in %r" % machine.status_name)
    check(machine.osystem == "ubuntu" and machine.distro_series == "noble", "os/series")
    check(machine.power_state == PowerState.ON, "deployed machine is powered off")
    check(machine.ip_addresses, "deployed machine has no IP address")
    print("step: deployed %s (%s)" % (machine.system_id, ", ".join(machine.ip_addresses)))

    machine = machine.release(erase=True, quick_erase=True, wait=True, wait_interval=0.2)
    check(machine.status == NodeStatus.READY, "release ended in %r" % machine.status_name)
    check(machine.osystem == "", "release left osystem %r" % machine.osystem)
    print("step: released with erase to Ready")

    machine = machine.commission(wait=False)
    check(machine.status == NodeStatus.COMMISSIONING, "commission gave %r" % machine.status_name)
    print("step: commissioning started")

    print("libmaas lifecycle: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

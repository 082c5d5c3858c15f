"""python-libmaas (unmodified, from PyPI) against `metalform sim`: what operators do besides
the machine lifecycle, through every operation of python-libmaas that metalform models.

Usage: python libmaas_operator.py MAAS_URL API_KEY

Fabrics and VLANs (read, update), a /31 subnet on a RoCE port's VLAN and a STATIC link, a
port moved to another VLAN, tags (create, add to and remove from a machine), zones and resource
pools, owner data on an allocated machine, power parameters (one machine and many), MAAS's LVM
storage layout (through python-libmaas' own handler for set_storage_layout), and the machine's
events. Prints one `step: ...` line per step and `libmaas operator: ok` at the end; any failure
raises (non-zero exit) with the step that failed.
"""

import sys

from maas.client import connect
from maas.client.enum import LinkMode, NodeStatus


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def port_of(machine, name="enp28s0np0"):
    for interface in machine.interfaces:
        if interface.name == name:
            return interface
    raise AssertionError("%s has no %s" % (machine.hostname, name))


def main(url, apikey):
    client = connect(url, apikey=apikey)
    machines = [m for m in client.machines.list() if m.status == NodeStatus.READY]
    check(len(machines) >= 2, "expected two Ready machines")
    first = client.machines.get(system_id=machines[0].system_id)
    second = client.machines.get(system_id=machines[1].system_id)
    print("step: connected, %s and %s" % (first.system_id, second.system_id))

    # Fabrics and VLANs: fabric-0 with its untagged VLAN; the RoCE port on a fabric of its own.
    fabrics = client.fabrics.list()
    default = client.fabrics.get_default()
    check(default.id == 0 and default.name == "fabric-0", "default fabric %r" % default)
    check(default.vlans.get_default().vid == 0, "untagged VLAN of fabric-0")
    port = port_of(first)
    vlan = port.vlan
    fabric = client.fabrics.get(vlan.fabric.id)
    check(fabric.id != 0, "the RoCE port's fabric is its own, not fabric-0")
    vlan = fabric.vlans.get_default()
    vlan.mtu = 9000
    vlan.save()
    again = client._origin.Vlan.read(fabric, 0)
    check(again.mtu == 9000, "VLAN MTU saved: %r" % again.mtu)
    print("step: %d fabrics; RoCE VLAN %d on fabric %d, mtu 9000" % (len(fabrics), vlan.id, fabric.id))

    # A /31 on the port's VLAN and a STATIC link of its first address.
    subnet = client.subnets.create("172.30.7.0/31", vlan)
    check(subnet.vlan.id == vlan.id, "subnet on the port's VLAN")
    link = port.links.create(LinkMode.STATIC, subnet=subnet, ip_address="172.30.7.1")
    check(str(link.ip_address) == "172.30.7.1", "link %r" % link)
    first.refresh()
    modes = [l.mode for l in port_of(first).links]
    check(LinkMode.STATIC in modes, "STATIC link on the port: %r" % modes)
    print("step: linked 172.30.7.1 on %s" % port.name)

    # The second machine's port joins that VLAN (interface update with the VLAN's id).
    other = port_of(second)
    other.vlan = vlan
    other.save()
    second.refresh()
    check(port_of(second).vlan.id == vlan.id, "port moved to VLAN %d" % vlan.id)
    print("step: moved %s of %s to VLAN %d" % (other.name, second.system_id, vlan.id))

    # Tags.
    tag = client.tags.create("gpu-8x", comment="8 GPUs")
    first.tags.add(tag)
    first.refresh()
    check("gpu-8x" in [t.name for t in first.tags], "tag added: %r" % first.tags)
    check(client.tags.get("gpu-8x").comment == "8 GPUs", "tag read")
    first.tags.remove(tag)
    first.refresh()
    check("gpu-8x" not in [t.name for t in first.tags], "tag removed")
    print("step: tag gpu-8x added and removed")

    # Zones and resource pools.
    zone = client.zones.create("row-c", description="hall C")
    check(client.zones.get("row-c").description == "hall C", "zone read")
    check("default" in [z.name for z in client.zones.list()], "default zone")
    pool = client.resource_pools.create("gpu", description="GPU nodes")
    check(client.resource_pools.get(pool.id).name == "gpu", "pool read")
    check("default" in [p.name for p in client.resource_pools.list()], "default pool")
    print("step: zone %s and pool %s" % (zone.name, pool.name))

    # Storage: MAAS's LVM layout on the first machine's boot disk.
    handler = client._origin.Machine._handler
    answer = handler.set_storage_layout(
        system_id=first.system_id,
        storage_layout="lvm",
        vg_name="vgroot",
        lv_name="lvroot",
    )
    check(answer["system_id"] == first.system_id, "set_storage_layout answers the machine")
    first.refresh()
    groups = [d for d in first.block_devices if d.type.value == "virtual"]
    check(groups and groups[0].name == "vgroot-lvroot", "LVM root %r" % groups)
    print("step: LVM layout, root on %s" % groups[0].name)

    # Owner data on an allocated machine.
    allocated = client.machines.allocate(hostname=first.hostname)
    allocated.owner_data = {"rack": "c07"}
    allocated.save()
    check(client.machines.get(system_id=first.system_id).owner_data == {"rack": "c07"}, "owner data")
    print("step: owner data set on %s" % allocated.system_id)

    # Power parameters.
    params = first.get_power_parameters()
    check(params.get("power_address"), "power address: %r" % params)
    many = client.machines.get_power_parameters_for([first.system_id, second.system_id])
    check(set(many) == {first.system_id, second.system_id}, "power parameters of two: %r" % many)
    print("step: power parameters of %d machines" % len(many))

    # Events.
    events = client.events.query(system_ids=[first.system_id], level="DEBUG", limit=50)
    check(len(list(events)) >= 1, "events of %s" % first.system_id)
    print("step: %d events" % len(list(events)))

    print("libmaas operator: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

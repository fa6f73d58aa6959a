"""Which network interfaces this process's TCP connections actually use: what gloo gives as its
transport facts (docs/concepts/transport.md). Read from the sockets themselves, not from
GLOO_SOCKET_IFNAME, which only asks.

The process's sockets are the `socket:[inode]` links in /proc/self/fd; their addresses are in
/proc/self/net/tcp and tcp6 (the process's network namespace), and the interface of a local
address comes from the interfaces' own addresses (SIOCGIFADDR for IPv4, /proc/net/if_inet6 for
IPv6). Linux only; elsewhere the facts are empty. No torch: the harness's tests use it too.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import socket
import struct

_ESTABLISHED = "01"  # the st column of /proc/net/tcp (include/net/tcp_states.h: TCP_ESTABLISHED = 1)
_SIOCGIFADDR = 0x8915  # linux/sockios.h


def _socket_inodes() -> set[str]:
    out: set[str] = set()
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _address(text: str) -> tuple[str, int]:
    """ "0100007F:1F90" -> ("127.0.0.1", 8080): /proc/net/tcp prints each 32-bit word of the
    address in host byte order (little-endian here) and the port in hex."""
    hexaddr, hexport = text.split(":")
    raw = bytes.fromhex(hexaddr)
    words = b"".join(struct.pack("<I", struct.unpack(">I", raw[i : i + 4])[0]) for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(words)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip), int(hexport, 16)


def connections() -> list[tuple[str, int, str, int]]:
    """(local address, local port, remote address, remote port) of this process's established
    TCP connections."""
    mine = _socket_inodes()
    out = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 9 and cols[3] == _ESTABLISHED and cols[9] in mine:
                        out.append((*_address(cols[1]), *_address(cols[2])))
        except OSError:
            continue
    return out


def interface_addresses() -> dict[str, str]:
    """Address -> interface name, for every interface of this network namespace."""
    out: dict[str, str] = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _index, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:  # no IPv4 address
                continue
            out[socket.inet_ntoa(packed[20:24])] = name
    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                cols = line.split()
                if len(cols) >= 6:
                    out[str(ipaddress.ip_address(bytes.fromhex(cols[0])))] = cols[5]
    except OSError:
        pass
    return out


def used_interfaces(skip_ports: set[int]) -> dict[str, object]:
    """The interfaces, local addresses and peers of this process's connections, leaving out
    those to or from a port in `skip_ports` (the rendezvous store's, which is not the
    collectives' transport)."""
    names = interface_addresses()
    interfaces, addresses, peers = set(), set(), set()
    count = 0
    for local, lport, remote, rport in connections():
        if lport in skip_ports or rport in skip_ports:
            continue
        count += 1
        interfaces.add(names.get(local, local))
        addresses.add(local)
        peers.add(remote)
    return {
        "interfaces": sorted(interfaces),
        "addresses": sorted(addresses),
        "peers": sorted(peers),
        "connections": count,
    }

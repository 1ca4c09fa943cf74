"""A snapshot of everything on the host that the local cluster could leave behind, so a test can
compare the host before `local-cluster.sh up` and after `down`.

Other helpers run tests on the same machine at the same time, so the snapshot only looks at what
belongs to the cluster or lives in the root network namespace (which nobody else may touch):
the cluster's processes, root-namespace links, cni-* netns, mounts
outside /run/netns/<test bed> entries, the sysctls the kubelet rewrites, iptables, cgroups and
the paths Kubernetes tools hard-code.
"""

import glob
import os
import re
import subprocess

# Other suites run kube-scheduler, etcd and kube-apiserver of their own (envtest, scale benches),
# so the cluster's processes are recognised by what only they carry: the state dir in their
# arguments (every component and shim), the apiserver forwarder's script, the pause binary.
CLUSTER_MARKERS = ("apiserver-proxy.py",)
CLUSTER_ARGV0 = {"/pause"}
SYSCTLS = ["vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
           "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.ip_forward",
           "net.ipv4.conf.all.forwarding", "net.ipv4.conf.default.forwarding"]
HARDCODED_PATHS = ["/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd",
                   "/var/lib/cni", "/etc/cni", "/opt/cni", "/opt/containerd", "/var/lib/containerd",
                   "/var/run/kubernetes"]


def _run(*argv):
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def cluster_processes(state_dir):
    """pid -> cmdline of the local cluster's processes."""
    found = {}
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if not argv or not argv[0]:
            continue
        cmd = " ".join(a.decode(errors="replace") for a in argv if a)
        if (state_dir in cmd or any(m in cmd for m in CLUSTER_MARKERS)
                or argv[0].decode(errors="replace") in CLUSTER_ARGV0):
            found[int(path.split("/")[2])] = cmd
    return found


def snapshot(state_dir):
    mounts = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            # /run/netns/<name> bind mounts of other suites' test beds come and go.
            if point.startswith("/run/netns/") and not point.startswith("/run/netns/cni-"):
                continue
            mounts.add(point)
    iptables = {}
    for table in ("filter", "nat", "mangle", "raw"):
        out = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True).stdout
        # Drop comments (timestamps) and packet counters.
        iptables[table] = [re.sub(r"\[\d+:\d+\]", "", l) for l in out.splitlines() if not l.startswith("#")]
    return {
        "processes": set(cluster_processes(state_dir).values()),
        "links": set(re.findall(r"^\d+: ([^:@]+)", _run("ip", "-o", "link", "show"), re.M)),
        "addresses": _run("ip", "-o", "addr", "show"),
        "routes": _run("ip", "route", "show", "table", "all"),
        "rules": _run("ip", "rule", "show"),
        "cni_netns": set(glob.glob("/run/netns/cni-*")),
        "mounts": mounts,
        "sysctls": {s: _run("sysctl", "-n", s).strip() for s in SYSCTLS},
        "iptables": iptables,
        "cgroups": set(glob.glob("/sys/fs/cgroup/*/kubepods*") + glob.glob("/sys/fs/cgroup/kubepods*")),
        "paths": {p for p in HARDCODED_PATHS if os.path.exists(p)},
        "path_contents": {os.path.join(root, name) for p in HARDCODED_PATHS
                          for root, dirs, files in os.walk(p) for name in dirs + files},
        "state_dir": os.path.exists(state_dir),
    }


def differences(before, after):
    """Human-readable list of what changed between two snapshots (empty if nothing)."""
    diffs = []
    for key in before:
        b, a = before[key], after[key]
        if b == a:
            continue
        if isinstance(b, set):
            diffs.append(f"{key}: added {sorted(a - b)}, removed {sorted(b - a)}")
        else:
            diffs.append(f"{key}: before {b!r}\n  after {a!r}")
    return diffs

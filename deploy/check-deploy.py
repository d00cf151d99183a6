#!/usr/bin/env python3
"""Starts sluice-server the way the Kubernetes manifest and the systemd unit
start it, and checks that it serves.

For each deployment the files the broker reads are laid out in a temporary
folder with the owners and modes the deployment gives them, read from the
shipped files themselves:

- Kubernetes (kubernetes/sluice.yaml): the ConfigMap and each Secret volume
  as the kubelet writes them (files in a `..<timestamp>` folder, a `..data`
  link to it and a link per key; owned by root; the volume's mode; with the
  pod's fsGroup, group fsGroup and group read added, as the kubelet does for
  read-only volumes). The Secrets' keys come from the `kubectl create
  secret` lines of the manifest's header. The broker runs as the pod's
  runAsUser and runAsGroup with fsGroup and supplementalGroups as its
  groups, with the container's args.
- systemd (systemd/sluice.service): the `install` lines of the unit's header
  are run as written (with /etc, /usr/local/bin and deploy/ moved into the
  temporary folder); the StateDirectory is made as systemd makes it, owned
  by the service's user with StateDirectoryMode; each LoadCredential= file
  is copied into a credentials folder as systemd presents it (owned by the
  service's user, mode 0400, the folder 0500). The broker runs as a
  DynamicUser uid (no supplementary groups) with ExecStart's command line,
  `${CREDENTIALS_DIRECTORY}` and `%d` expanded.

In both, the configuration file is the one shipped, with its paths moved
into the temporary folder; the listen and metrics addresses are overridden
on the command line to 127.0.0.1:0. The check passes when the broker logs
that it serves, `/healthz` on its metrics port answers 200, and SIGTERM
stops it with exit status 0 (systemd: the snapshot is written into the
StateDirectory). It also checks the manifests' structure: no volume mounted
inside another's mount point, the PodDisruptionBudget, and the
ServiceMonitor of kubernetes/servicemonitor.yaml against the Service.

It must run as root (to create files owned by others and to change user
with setpriv). Otherwise it says it skipped, and fails when CI is set.

    python3 deploy/check-deploy.py --server target/ci/sluice-server [--deploy DIR]

Needs python3 with PyYAML, setpriv (util-linux) and openssl.
"""

import argparse
import http.client
import os
import queue
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import yaml

# Far above what any step needs; every wait here is bounded by it.
PATIENCE_S = 30
# The first uid of systemd's DynamicUser= range (61184-65519).
DYNAMIC_UID = 61184
# The folder name the kubelet's atomic writer gives a volume's files.
ATOMIC_DIR = "..2026_01_01_00_00_00.000000001"

failures = []


def fail(what):
    failures.append(what)
    print(f"FAIL: {what}", flush=True)


def note(what):
    print(f"  {what}", flush=True)


# ---- moving the deployment's paths into the temporary folder -------------


def relocate(text, prefixes, root):
    """Puts `root` before every absolute path in `text` that starts with
    one of `prefixes` (a whole path component), in one pass."""
    alternatives = "|".join(re.escape(p.rstrip("/")) for p in sorted(prefixes, key=len, reverse=True))
    pattern = re.compile(r"(?<![\w./-])(" + alternatives + r")(?=/|\"|'|\s|$)")
    return pattern.sub(lambda m: root + m.group(1), text)


# ---- the broker as a child process ----------------------------------------


def serve_check(name, command, env, expect_in_log=(), after_stop=None):
    """Runs `command`, waits for it to serve, asks /healthz, stops it with
    SIGTERM and waits for exit status 0."""
    note(f"{name}: {' '.join(shlex.quote(c) for c in command)}")
    child = subprocess.Popen(
        command,
        env=env,
        cwd="/",
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = queue.Queue()

    def pump():
        for line in child.stderr:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    log = []
    serving = None
    deadline = time.monotonic() + PATIENCE_S
    try:
        while serving is None:
            left = deadline - time.monotonic()
            if left <= 0:
                fail(f"{name}: no 'sluice is serving' line within {PATIENCE_S} s; log:\n" + "\n".join(log))
                return
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                child.wait(timeout=PATIENCE_S)
                fail(f"{name}: sluice-server exited with {child.returncode} before serving; log:\n" + "\n".join(log))
                return
            log.append(line)
            if "sluice is serving" in line:
                serving = line
        metrics = re.search(r"metrics=(\S+)", serving)
        if not metrics or metrics.group(1) == "off":
            fail(f"{name}: no metrics address in {serving!r}")
            return
        host, port = metrics.group(1).rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=PATIENCE_S)
        conn.request("GET", "/healthz")
        reply = conn.getresponse()
        body = reply.read().decode(errors="replace").strip()
        conn.close()
        if reply.status != 200:
            fail(f"{name}: /healthz answered {reply.status} {body!r}")
            return
        note(f"{name}: serving, /healthz {reply.status} {body!r}")
        text = "\n".join(log)
        for needle in expect_in_log:
            if needle not in text:
                fail(f"{name}: the start-up log does not show {needle!r}:\n{text}")
        child.send_signal(signal.SIGTERM)
        try:
            child.wait(timeout=PATIENCE_S)
        except subprocess.TimeoutExpired:
            fail(f"{name}: sluice-server did not stop within {PATIENCE_S} s of SIGTERM")
            return
        if child.returncode != 0:
            fail(f"{name}: sluice-server exited with {child.returncode} after SIGTERM")
            return
        note(f"{name}: stopped by SIGTERM, exit status 0")
        if after_stop:
            after_stop()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def clean_env(extra=None):
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/"}
    env.update(extra or {})
    return env


def setpriv(uid, gid, groups, no_new_privs, server_command):
    command = ["setpriv", f"--reuid={uid}", f"--regid={gid}"]
    command += [f"--groups={','.join(str(g) for g in groups)}"] if groups else ["--clear-groups"]
    if no_new_privs:
        command.append("--no-new-privs")
    return command + ["--"] + server_command


def make_dirs(path, root):
    """Creates `path` and its missing parents below `root`, 0755, root's."""
    os.makedirs(path, mode=0o755, exist_ok=True)
    while path.startswith(root) and path != root:
        os.chmod(path, 0o755)
        path = os.path.dirname(path)


# ---- Kubernetes -----------------------------------------------------------


def load_yaml(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def secret_keys(manifest_text):
    """Each Secret's keys, from the header's `kubectl create secret` lines."""
    keys = {}
    for line in manifest_text.splitlines():
        words = shlex.split(line.lstrip("# "), comments=True) if "kubectl create secret" in line else []
        if len(words) < 5:
            continue
        kind, name, flags = words[3], words[4], words[5:]
        if kind == "tls":
            keys[name] = ["tls.crt", "tls.key"]
        elif kind == "generic":
            found = []
            for flag in flags:
                m = re.match(r"--from-file=(?:([^=]+)=)?(.+)", flag)
                if m:
                    found.append(m.group(1) or os.path.basename(m.group(2)))
            keys[name] = found
    return keys


def secret_contents(name, keys, work):
    """Contents for a Secret's keys: a TLS pair made with openssl for
    tls.crt and tls.key, a random token otherwise."""
    contents = {}
    if "tls.crt" in keys or "tls.key" in keys:
        cert, key = os.path.join(work, f"{name}.crt"), os.path.join(work, f"{name}.key")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-days", "2", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-addext", "basicConstraints=critical,CA:FALSE",
             "-keyout", key, "-out", cert],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        with open(cert, "rb") as f:
            contents["tls.crt"] = f.read()
        with open(key, "rb") as f:
            contents["tls.key"] = f.read()
    for k in keys:
        if k not in contents:
            contents[k] = os.urandom(24).hex().encode() + b"\n"
    return contents


def write_volume(target, files, default_mode, items, fs_group):
    """Writes a ConfigMap or Secret volume at `target` as the kubelet does:
    the files in a timestamped folder, `..data` linking to it, a link per
    file; owned by root; then, with fsGroup, every file and folder given
    group fsGroup and read (folders also search and setgid) for the group."""
    payload = {}
    if items:
        for item in items:
            payload[item["path"]] = (files[item["key"]], item.get("mode", default_mode))
    else:
        for k, v in files.items():
            payload[k] = (v, default_mode)
    data = os.path.join(target, ATOMIC_DIR)
    os.makedirs(data, mode=0o755)
    os.chmod(data, 0o755)
    for rel, (content, mode) in payload.items():
        path = os.path.join(data, rel)
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        with open(path, "wb") as f:
            f.write(content)
        os.chown(path, 0, 0)
        os.chmod(path, mode)
    os.symlink(ATOMIC_DIR, os.path.join(target, "..data"))
    for rel in payload:
        top = rel.split("/", 1)[0]
        link = os.path.join(target, top)
        if not os.path.lexists(link):
            os.symlink(os.path.join("..data", top), link)
    if fs_group is not None:
        for folder, _, names in os.walk(target):
            st = os.lstat(folder)
            os.chown(folder, 0, fs_group)
            os.chmod(folder, (st.st_mode & 0o7777) | 0o440 | 0o110 | 0o2000)
            for n in names:
                p = os.path.join(folder, n)
                if os.path.islink(p):
                    continue
                st = os.lstat(p)
                os.chown(p, 0, fs_group)
                os.chmod(p, (st.st_mode & 0o7777) | 0o440)


def check_kubernetes_structure(docs, service_monitor_docs):
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    sts = by_kind["StatefulSet"][0]
    pod = sts["spec"]["template"]
    pod_labels = pod["metadata"].get("labels", {})

    container = pod["spec"]["containers"][0]
    mounts = sorted(m["mountPath"].rstrip("/") for m in container.get("volumeMounts", []))
    for a in mounts:
        for b in mounts:
            if a != b and b.startswith(a + "/"):
                fail(f"kubernetes: volume mounted at {b} inside the mount point {a}")

    pdbs = by_kind.get("PodDisruptionBudget", [])
    if not pdbs:
        fail("kubernetes: no PodDisruptionBudget in sluice.yaml")
    for pdb in pdbs:
        spec = pdb["spec"]
        if pdb["apiVersion"] != "policy/v1" or spec.get("maxUnavailable") != 1:
            fail(f"kubernetes: the PodDisruptionBudget is not policy/v1 with maxUnavailable 1: {pdb}")
        selector = spec.get("selector", {}).get("matchLabels", {})
        if not selector or any(pod_labels.get(k) != v for k, v in selector.items()):
            fail(f"kubernetes: the PodDisruptionBudget's selector {selector} does not select the pods {pod_labels}")
        else:
            note(f"kubernetes: PodDisruptionBudget maxUnavailable 1 over {selector}")

    service = by_kind["Service"][0]
    ports = {p["name"]: p for p in service["spec"]["ports"]}
    annotations = pod["metadata"].get("annotations", {})
    monitors = [d for d in service_monitor_docs if d.get("kind") == "ServiceMonitor"]
    if not monitors:
        fail("kubernetes: no ServiceMonitor in servicemonitor.yaml")
    for sm in monitors:
        if sm.get("apiVersion") != "monitoring.coreos.com/v1":
            fail(f"kubernetes: ServiceMonitor apiVersion {sm.get('apiVersion')}")
        spec = sm.get("spec", {})
        selector = spec.get("selector", {}).get("matchLabels", {})
        labels = service["metadata"].get("labels", {})
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            fail(f"kubernetes: the ServiceMonitor's selector {selector} does not select the Service {labels}")
        job = spec.get("jobLabel")
        if job and labels.get(job) != "sluice":
            fail(f"kubernetes: the ServiceMonitor's jobLabel {job} does not give job sluice (Service labels {labels})")
        for ep in spec.get("endpoints", []):
            port = ports.get(ep.get("port"))
            if port is None:
                fail(f"kubernetes: ServiceMonitor endpoint port {ep.get('port')} is no port of the Service {list(ports)}")
                continue
            if str(port["port"]) != str(annotations.get("prometheus.io/port")):
                fail(f"kubernetes: the ServiceMonitor scrapes port {port['port']}, the annotations say {annotations.get('prometheus.io/port')}")
            if ep.get("path", "/metrics") != annotations.get("prometheus.io/path", "/metrics"):
                fail(f"kubernetes: the ServiceMonitor's path {ep.get('path')} differs from the annotations'")
            note(f"kubernetes: ServiceMonitor scrapes the Service's port {ep['port']} ({port['port']}) at {ep.get('path', '/metrics')}")


def check_kubernetes(deploy, server, work):
    manifest = os.path.join(deploy, "kubernetes", "sluice.yaml")
    with open(manifest) as f:
        text = f.read()
    docs = load_yaml(manifest)
    monitor = os.path.join(deploy, "kubernetes", "servicemonitor.yaml")
    check_kubernetes_structure(docs, load_yaml(monitor) if os.path.exists(monitor) else [])

    config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    pod = next(d for d in docs if d["kind"] == "StatefulSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    psc = pod.get("securityContext", {})
    csc = container.get("securityContext", {})
    uid = csc.get("runAsUser", psc.get("runAsUser"))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", uid))
    fs_group = psc.get("fsGroup")
    groups = ([fs_group] if fs_group is not None else []) + list(psc.get("supplementalGroups", []))
    if uid in (None, 0):
        fail(f"kubernetes: the pod runs as uid {uid}, not as a user of its own")
        return
    keys = secret_keys(text)
    root = os.path.join(work, "k8s")
    os.makedirs(root, mode=0o755)
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = volumes[mount["name"]]
        target = root + mount["mountPath"]
        make_dirs(target, root)
        if "configMap" in volume:
            source = volume["configMap"]
            files = {k: v.encode() for k, v in config_maps[source["name"]]["data"].items()}
            mode = source.get("defaultMode", 0o644)
        elif "secret" in volume:
            source = volume["secret"]
            name = source["secretName"]
            if name not in keys:
                fail(f"kubernetes: the header does not say how to create the Secret {name}")
                return
            files = secret_contents(name, keys[name], work)
            mode = source.get("defaultMode", 0o644)
        else:
            fail(f"kubernetes: volume {mount['name']} is neither a ConfigMap nor a Secret")
            return
        write_volume(target, files, mode, source.get("items"), fs_group)
        for rel in sorted(os.listdir(os.path.join(target, ATOMIC_DIR))):
            st = os.stat(os.path.join(target, rel))
            note(f"kubernetes: {mount['mountPath']}/{rel}: uid {st.st_uid} gid {st.st_gid} mode {oct(st.st_mode & 0o7777)}")
    mount_paths = [m["mountPath"] for m in container.get("volumeMounts", [])]
    # The ConfigMap's files, with the mounted paths they name moved.
    for mount in container.get("volumeMounts", []):
        if "configMap" not in volumes[mount["name"]]:
            continue
        data = os.path.join(root + mount["mountPath"], ATOMIC_DIR)
        for dirpath, _, names in os.walk(data):
            for n in names:
                p = os.path.join(dirpath, n)
                with open(p) as f:
                    content = f.read()
                with open(p, "w") as f:
                    f.write(relocate(content, mount_paths, root))
    # The image's binary.
    binary = root + "/usr/local/bin/sluice-server"
    make_dirs(os.path.dirname(binary), root)
    shutil.copy(server, binary)
    os.chmod(binary, 0o755)
    args = [relocate(a, mount_paths, root) for a in container.get("args", [])]
    command = [binary] + args + ["--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]
    no_new_privs = csc.get("allowPrivilegeEscalation") is False
    serve_check(
        f"kubernetes (uid {uid}, gid {gid}, groups {groups})",
        setpriv(uid, gid, groups, no_new_privs, command),
        clean_env(),
        expect_in_log=["token of ", "tls_cert = "],
    )


# ---- systemd --------------------------------------------------------------


def unit_settings(text):
    """The [Service] section's settings: name -> list of values."""
    settings = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            k, v = line.split("=", 1)
            settings.setdefault(k.strip(), []).append(v.strip())
    return settings


def check_systemd(deploy, server, work):
    unit_path = os.path.join(deploy, "systemd", "sluice.service")
    with open(unit_path) as f:
        unit = f.read()
    settings = unit_settings(unit)
    if settings.get("DynamicUser", ["no"])[-1] not in ("yes", "true", "1", "on"):
        fail("systemd: the unit does not run as a DynamicUser (this check models that case)")
        return
    uid = gid = DYNAMIC_UID
    root = os.path.join(work, "systemd")
    for d in ["/usr/local/bin", "/etc/systemd/system", "/var/lib", "/run/credentials"]:
        make_dirs(root + d, root)
    moved = ["/etc", "/usr/local/bin", "/var/lib", "/run/credentials"]

    # The install steps of the header, as written.
    steps = [
        line[1:].strip()
        for line in unit.splitlines()
        if line.startswith("#") and re.match(r"(install |\(umask )", line[1:].strip())
    ]
    if not steps:
        fail("systemd: no install steps in the unit's header")
        return
    for step in steps:
        command = relocate(step, moved, root)
        command = re.sub(r"(?<![\w/.-])target/release/sluice-server", shlex.quote(server), command)
        command = re.sub(r"(?<![\w/.-])deploy/", shlex.quote(deploy.rstrip("/")) + "/", command)
        note(f"systemd: {step}")
        result = subprocess.run(["sh", "-ec", command], capture_output=True, text=True)
        if result.returncode != 0:
            fail(f"systemd: install step {step!r} failed: {result.stderr}")
            return
    for rel in ["/etc/sluice", "/etc/sluice/sluice.toml", "/etc/sluice/token"]:
        if os.path.lexists(root + rel):
            st = os.stat(root + rel)
            note(f"systemd: {rel}: uid {st.st_uid} gid {st.st_gid} mode {oct(st.st_mode & 0o7777)}")

    # StateDirectory=: made by systemd for the service's user.
    state = None
    for name in settings.get("StateDirectory", []):
        state = root + "/var/lib/" + name.split()[0]
        os.makedirs(state, exist_ok=True)
        os.chown(state, uid, gid)
        os.chmod(state, int(settings.get("StateDirectoryMode", ["0755"])[-1], 8))

    # LoadCredential=: a copy owned by the service's user, mode 0400.
    credentials = root + "/run/credentials/sluice.service"
    env = {}
    loads = settings.get("LoadCredential", [])
    if loads:
        os.makedirs(credentials)
        for load in loads:
            ident, source = load.split(":", 1)
            source = relocate(source, moved, root)
            try:
                with open(source, "rb") as f:
                    content = f.read()
            except OSError as e:
                fail(f"systemd: LoadCredential={load}: {e} (systemd fails the start: 243/CREDENTIALS)")
                return
            path = os.path.join(credentials, ident)
            with open(path, "wb") as f:
                f.write(content)
            os.chown(path, uid, gid)
            os.chmod(path, 0o400)
            note(f"systemd: credential {ident}: uid {uid} gid {gid} mode 0o400")
        os.chown(credentials, uid, gid)
        os.chmod(credentials, 0o500)
        env["CREDENTIALS_DIRECTORY"] = credentials
    if state:
        env["STATE_DIRECTORY"] = state

    # The configuration as installed, its paths moved (same file, same mode).
    config = root + "/etc/sluice/sluice.toml"
    if os.path.exists(config):
        with open(config) as f:
            content = f.read()
        with open(config, "w") as f:
            f.write(relocate(content, moved, root))

    exec_start = settings["ExecStart"][-1].lstrip("@-:+!")
    exec_start = exec_start.replace("%d", credentials)
    for var, value in env.items():
        exec_start = exec_start.replace("${" + var + "}", value).replace("$" + var, value)
    if "$" in exec_start or "%" in exec_start:
        fail(f"systemd: ExecStart has a variable or specifier this check does not expand: {exec_start}")
        return
    command = [relocate(w, moved, root) for w in shlex.split(exec_start)]
    command += ["--listen", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]
    no_new_privs = settings.get("NoNewPrivileges", ["no"])[-1] in ("yes", "true", "1", "on")

    def snapshot_written():
        written = [n for n in os.listdir(state)] if state else []
        if not any(n.endswith(".snapshot") for n in written):
            fail(f"systemd: no snapshot in the StateDirectory after the stop: {written}")
        else:
            note(f"systemd: the StateDirectory holds {written}")

    expect = ["token of "] if loads else []
    serve_check(
        f"systemd (DynamicUser uid {uid})",
        setpriv(uid, gid, [], no_new_privs, command),
        clean_env(env),
        expect_in_log=expect,
        after_stop=snapshot_written if state else None,
    )


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the sluice-server binary")
    parser.add_argument("--deploy", default=here, help="the deploy/ folder to check (default: this one)")
    parser.add_argument("--only", choices=["kubernetes", "systemd"])
    args = parser.parse_args()
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            print("check-deploy: CI is set but this is not root: the check needs root", file=sys.stderr)
            return 1
        print("check-deploy: skipped: not root (it creates files owned by other users and runs setpriv)")
        return 0
    for tool in ["setpriv", "openssl"]:
        if shutil.which(tool) is None:
            print(f"check-deploy: {tool} is missing", file=sys.stderr)
            return 1
    server = os.path.abspath(args.server)
    deploy = os.path.abspath(args.deploy)
    work = tempfile.mkdtemp(prefix="sluice-deploy-")
    os.chmod(work, 0o755)
    try:
        if args.only in (None, "kubernetes"):
            print("== Kubernetes: deploy/kubernetes/sluice.yaml", flush=True)
            check_kubernetes(deploy, server, work)
        if args.only in (None, "systemd"):
            print("== systemd: deploy/systemd/sluice.service", flush=True)
            check_systemd(deploy, server, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"check-deploy: {len(failures)} failure(s)", file=sys.stderr)
        return 1
    print("check-deploy: both deployments serve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
